/**
 * What the cluster page shows, as one value built from MySQL (and Temporal's running workflows): the node list
 * and the models the control API's routes compute, rendered into the cells the CLI's tables show
 * (cli/ctl/nodes.ts, replicas.ts, views/fabrics.ts), so the page and `llmgw ctl` never disagree.
 */
import type { Client } from '@temporalio/client';
import { certColumn, engineColumn } from '../../../cli/ctl/nodes';
import { shardCell } from '../../../cli/ctl/replicas';
import { fabricColumn, fabricsView, listFabricGroups, type FabricsView } from '../../../cli/ctl/views/fabrics';
import { doctorColumn } from '../../../lib/doctor/format';
import { groupBy } from '../../../lib/group';
import type { Store } from '../../../lib/store/store';
import { workflowLink } from '../../../lib/workflow-starts';
import { drainProgressQuery, formatDrainProgress } from '../../../workflows/contracts/drain';
import type { NodeBeats } from '../node-beats';
import { nodeList } from '../node-actions';
import { modelList } from '../operator-routes';
import type { ModelTraffic, RecentTraffic } from './traffic';

/** Where workflow links point: server.yaml's temporal.uiUrl and namespace. */
export interface TemporalUi {
  uiUrl: string;
  namespace: string;
}

/** One node as the page's node view shows it. */
export interface PageNode {
  id: string;
  state: string;
  host: string;
  gpusUsed: number;
  gpus: { index: number; name: string; memoryMiB: number; held: string | null }[];
  fabric: string;
  engines: string;
  engineProblems: string[];
  checks: string;
  cert: string;
  certWarning: boolean;
  lastSeen: string | null;
  replicas: string[];
}

/** One replica as the page shows it, with its rebuilds and moves from the event log. */
export interface PageReplica {
  id: string;
  model: string;
  profile: string;
  state: string;
  reason: string | null;
  shards: string[];
  nodes: string[];
  endpoint: string | null;
  history: { at: string; kind: string; message: string }[];
}

/** A running workflow, with its Temporal UI link (and a drain's progress). */
export interface PageWorkflow {
  id: string;
  type: string;
  startedAt: string;
  link: string;
  progress?: string;
}

/** The whole page's data. */
export interface PageSnapshot {
  overview: {
    nodes: Record<string, number>;
    gpus: { used: number; total: number };
    replicas: Record<string, number>;
    models: { name: string; desired: number; ready: number; others: Record<string, number> }[];
    warnings: string[];
    /** requests/s and TTFT per model over the last hour, from the gateways' counts (traffic.ts) */
    traffic: ModelTraffic[] | { error: string };
  };
  nodes: PageNode[];
  fabrics: FabricsView;
  replicas: PageReplica[];
  workflows: PageWorkflow[] | { error: string };
  events: { at: string; kind: string; message: string; nodeId?: string; replicaId?: string; model?: string }[];
  temporalUi: string;
}

const count = (into: Record<string, number>, key: string): void => void (into[key] = (into[key] ?? 0) + 1);

/** A query that does not answer within `ms` is left out rather than holding the whole snapshot. */
const within = <T>(p: Promise<T>, ms: number): Promise<T | null> =>
  Promise.race([p.catch(() => null), new Promise<null>((r) => setTimeout(() => r(null), ms).unref())]);

/** Temporal's running workflows, newest first (at most 50), each with its UI link; a drain with its progress. */
export async function runningWorkflows(client: Client, ui: TemporalUi): Promise<PageWorkflow[]> {
  const out: PageWorkflow[] = [];
  for await (const w of client.workflow.list({ query: 'ExecutionStatus="Running"', pageSize: 50 })) {
    out.push({
      id: w.workflowId,
      type: w.type,
      startedAt: w.startTime.toISOString(),
      link: workflowLink({ temporal: ui }, w.workflowId),
    });
    if (out.length >= 50) break;
  }
  await Promise.all(
    out
      .filter((w) => w.type === 'drainNode')
      .map(async (w) => {
        const p = await within(client.workflow.getHandle(w.id).query(drainProgressQuery), 800);
        if (p) w.progress = formatDrainProgress(p);
      }),
  );
  return out.sort((a, b) => b.startedAt.localeCompare(a.startedAt));
}

/** Builds the page's snapshot now (the traffic figures from `traffic`'s cache, when given). */
export async function buildSnapshot(
  store: Store,
  temporal: { client: Client; ui: TemporalUi },
  traffic?: RecentTraffic,
  beats?: Pick<NodeBeats, 'of'>,
): Promise<PageSnapshot> {
  const [nodes, models, replicas, events, workflows] = await Promise.all([
    nodeList(store, beats),
    modelList(store),
    store.listReplicas(),
    store.recentEvents(200),
    runningWorkflows(temporal.client, temporal.ui).catch((err: Error) => ({
      error: `Temporal did not list the running workflows: ${err.message}`,
    })),
  ]);
  const now = Date.now();
  const live = replicas.filter((r) => r.state !== 'stopped');
  const eventsOf = groupBy(events, (e) => e.replicaId);
  const groups = listFabricGroups(nodes);
  const warnings: string[] = [];
  const pageNodes = nodes.map((n): PageNode => {
    const held = new Map<number, string>();
    for (const s of n.gpuShards ?? []) for (const g of s.gpus) held.set(g, `${s.replicaId}#${s.rank}`);
    const cert = certColumn(n.cert, now);
    const certWarning = /EXPIRED|OVERDUE|revoked/.test(cert);
    const engineProblems = (n.engineStatus ?? [])
      .filter((s) => s.state === 'failed')
      .map((s) => `${s.engine} ${s.version || ''}: ${s.reason ?? 'unknown'}`.replace('  ', ' '));
    if (n.state === 'down') warnings.push(`${n.id} is down`);
    if (certWarning) warnings.push(`${n.id}: certificate ${cert}`);
    for (const p of engineProblems) warnings.push(`${n.id}: engine ${p.split('\n')[0]}`);
    const checks = doctorColumn(n.inventory.doctor);
    if (checks.startsWith('fail')) warnings.push(`${n.id}: doctor ${checks}`);
    return {
      id: n.id,
      state: n.state,
      host: n.inventory.host,
      gpusUsed: n.gpusUsed,
      gpus: n.inventory.gpus.map((g) => ({
        index: g.index,
        name: g.name,
        memoryMiB: g.memoryMiB,
        held: held.get(g.index) ?? null,
      })),
      fabric: fabricColumn(n, groups),
      engines: engineColumn(n),
      engineProblems,
      checks,
      cert,
      certWarning,
      lastSeen: n.lastSeen ? new Date(n.lastSeen).toISOString() : null,
      replicas: n.replicas,
    };
  });
  const fabrics = fabricsView(nodes);
  for (const f of fabrics.fabrics)
    for (const w of f.warnings.filter((x) => x.startsWith('one of'))) warnings.push(`fabric ${f.fabric}: ${w}`);
  for (const r of live.filter((x) => x.state === 'waiting'))
    warnings.push(`${r.id} is waiting${r.reason ? `: ${r.reason}` : ''}`);
  const modelRows = models.map((m) => {
    const others = { ...m.actual.states };
    const ready = others.ready ?? 0;
    delete others.ready;
    if (ready < m.replicas) warnings.push(`${m.name}: ${ready} of ${m.replicas} replicas ready`);
    return { name: m.name, desired: m.replicas, ready, others };
  });
  const trafficView = traffic
    ? await traffic
        .view(models.map((m) => m.name))
        .catch((err: Error) => ({ error: `the gateways' request counts could not be read: ${err.message}` }))
    : [];
  const nodeStates: Record<string, number> = {};
  for (const n of nodes) count(nodeStates, n.state);
  const replicaStates: Record<string, number> = {};
  for (const r of live) count(replicaStates, r.state);
  return {
    overview: {
      nodes: nodeStates,
      gpus: {
        used: nodes.reduce((a, n) => a + n.gpusUsed, 0),
        total: nodes.reduce((a, n) => a + n.inventory.gpus.length, 0),
      },
      replicas: replicaStates,
      models: modelRows,
      warnings,
      traffic: trafficView,
    },
    nodes: pageNodes,
    fabrics,
    replicas: live.map((r) => ({
      id: r.id,
      model: r.model,
      profile: r.profile,
      state: r.state,
      reason: r.reason,
      shards: r.shards.map(shardCell),
      nodes: [...new Set(r.shards.map((s) => s.nodeId))],
      endpoint: r.endpoint,
      history: (eventsOf.get(r.id) ?? [])
        .filter((e) => e.kind !== 'replica.ready')
        .slice(0, 10)
        .map((e) => ({ at: e.at.toISOString(), kind: e.kind, message: e.message })),
    })),
    workflows,
    events: events.slice(0, 100).map((e) => ({ ...e, at: e.at.toISOString() })),
    temporalUi: `${temporal.ui.uiUrl}/namespaces/${temporal.ui.namespace}/workflows`,
  };
}

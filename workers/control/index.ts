/** The control role: MySQL, the control worker (all workflows + control activities) and the control plane API, in one process. */
import { doorAgentFromFiles, type DoorAgent } from '../../lib/door-agent';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkflowBundleOption } from '@temporalio/worker';
import { createCaOperations } from '../../activities/ca';
import {
  createControlActivities,
  signalAgentRestarted,
  signalNodeLost,
  wakeWaitingReplicas,
} from '../../activities/control';
import { AGENT_HEARTBEAT_MS } from '../../lib/liveness';
import type { ServerConfig } from '../../config/types';
import type { CatalogApplyAnswer } from '../../gateway/control/contract';
import { NodeBeats } from '../../gateway/control/node-beats';
import { buildControlServer } from '../../gateway/control/server';
import { TaskTokenMemory } from '../../gateway/door/task-tokens';
import { doorAddressFor, startTemporalDoor, type TemporalDoor } from '../../gateway/door/door';
import { remoteCa } from '../../gateway/control/ca-client';
import { LlmgwError } from '../../lib/errors';
import { QUEUES } from '../../lib/names';
import { release } from '../../lib/release';
import { connectTemporal, temporalCredentials } from '../../lib/temporal-connect';
import { openConfiguredDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { NodeId } from '../../lib/types';
import { applyCatalog } from './catalog-apply';
import { endDrain } from './drain-end';
import { EnginePolicy } from './engine-policy';
import { NodeLiveness, type NodeLivenessOptions } from './node-liveness';
import { TaskTokenPruning } from './token-pruning';
import { startMetricsListener, type MetricsListener } from '../../gateway/metrics';
import { controlMetrics } from './metrics';

/** What the control role is started with: server.yaml, parsed, and test hooks. */
export interface ControlPlaneOptions {
  config: ServerConfig;
  /**
   * Apply server.yaml's catalog at start (new models deployed, changed counts and specs applied, every model's
   * deployment running), as `llmgw ctl apply` does without --prune. Off by default for embeddings and tests that
   * start deployments themselves; `llmgw control-plane` turns it on.
   */
  applyCatalog?: boolean;
  /** A pre-built workflow bundle (tests bundle once); default bundles workflows/ at start. */
  workflowBundle?: WorkflowBundleOption;
  /**
   * false: no worker for the waits' queue (llmgw-control-wait) in this process, for tests that run their own there (a
   * silent one: the health wait's heartbeat timing out). Default true.
   */
  waits?: boolean;
  /** Overrides of the node liveness timers (lib/liveness.ts), for tests. */
  liveness?: Pick<NodeLivenessOptions, 'silentMs' | 'staleMs' | 'agentLostMs' | 'everyMs' | 'probeMs'>;
  logger?: boolean;
  /** The control plane's log (certificate refusals, refused identity claims, revocations). */
  log?: (msg: string, fields: Record<string, unknown>) => void;
}

/**
 * How many waits (an engine coming up, requests in flight draining) the control worker runs at once: each is a
 * timer and a health check every 200 ms to 1 s, so thousands cost little; a deploy of 5,000 replicas has about as
 * many engines coming up at once. With the waits among the 100 slots of llmgw-control, the first 100 took every
 * slot and the replicas whose engines already served waited minutes to be recorded ready (docs/architecture.md,
 * Scale).
 */
const CONTROL_WAIT_SLOTS = 5000;

/** Workflows from a checkout's workflows/ (bundled at start), or from a release artefact the bundle built with it. */
function defaultWorkflows(): { workflowBundle: WorkflowBundleOption } | { workflowsPath: string } {
  const r = release();
  return r
    ? { workflowBundle: { codePath: join(dirname(r.program), 'workflows.js') } }
    : { workflowsPath: require.resolve('../../workflows') };
}

/** Reads one PEM file named by `tls.<key>` in server.yaml; a missing one names the key and the fix. */
function readTlsFile(config: ServerConfig, key: keyof ServerConfig['tls'], fix: string): string {
  const file = config.tls[key];
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new LlmgwError(
      'LLMGW_CONFIG_INVALID',
      `tls.${key}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)}); ${fix}`,
      { file, key },
    );
  }
}

/** A running control role: its API's URL, its clients, and how to stop it. */
export interface ControlPlane {
  /** https://host:port */
  url: string;
  config: ServerConfig;
  store: Store;
  client: Client;
  /** Temporal's front door for nodes, on listeners.temporalDoor */
  door: TemporalDoor;
  /** The agents' heartbeats this process heard (MySQL's last_seen gets only a few a minute per node) */
  beats: NodeBeats;
  /** `http://host:port/metrics` when server.yaml's metrics.controlPlane is set */
  metricsUrl: string | null;
  /** The catalog applied at start (applyCatalog), once it was; null when not asked to */
  catalogApplied: Promise<CatalogApplyAnswer | null>;
  close(): Promise<void>;
}

/** Starts the control plane listener and the control worker; resolves once both are up. */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<ControlPlane> {
  const { config } = opts;
  const plainLog = opts.log ?? ((): void => undefined);
  const tls = {
    caPem: readTlsFile(config, 'ca', 'create the CA with llmgw ca init, or point tls.ca at its ca.crt'),
    certPem: readTlsFile(
      config,
      'serverCert',
      'issue one with llmgw ca issue-server --name control-plane --host <hosts agents connect to>',
    ),
    keyPem: readTlsFile(config, 'serverKey', 'it is written beside the certificate by llmgw ca issue-server'),
  };
  // Temporal first: a wrong temporal.address or credential is said before anything is written to MySQL. The
  // native connection first: it fails in milliseconds, with the reason (the JS client waits out its deadline).
  const native = await connectTemporal(config.temporal, (options) => NativeConnection.connect(options));
  const connection = await connectTemporal(config.temporal, (options) => Connection.connect(options)).catch(
    async (err: unknown) => {
      await native.close();
      throw err;
    },
  );
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const pool = await openConfiguredDatabase(config.mysql, 'controlPlane');
  const store = new Store(pool);
  const metrics = config.metrics.controlPlane ? controlMetrics({ pool, client, log: plainLog }) : null;
  // The same log, counting the registration refusals it reports when metrics are on.
  const log = metrics ? metrics.countingLog(plainLog) : plainLog;
  // Recorded either way (the gateway lists the catalog's models); applied below when asked to.
  if (!opts.applyCatalog) for (const spec of config.catalog) await store.upsertModel(spec, true);

  // Made at first need, from the files as they are then: a gateway certificate put in place after start is used.
  let doorAgent: DoorAgent | null = null;
  const doorAgentNow = (): DoorAgent | null =>
    (doorAgent ??= doorAgentFromFiles(config.tls, config.gateway.timeouts.connectMs));
  const activities = createControlActivities({
    store,
    client,
    enginePorts: config.enginePorts,
    drainGraceS: config.drain.graceS,
    gatewayRefreshMs: config.gateway.refreshMs,
    // A replica behind a node's door answers /health to a gateway certificate only.
    doorAgent: doorAgentNow,
  });
  const worker = await Worker.create({
    connection: native,
    namespace: config.temporal.namespace,
    taskQueue: QUEUES.control,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : defaultWorkflows()),
    activities,
  });
  // The waits, on their own queue and slots (lib/names.ts, QUEUES.controlWait): no workflows here.
  const waits =
    opts.waits === false
      ? null
      : await Worker.create({
          connection: native,
          namespace: config.temporal.namespace,
          taskQueue: QUEUES.controlWait,
          activities,
          maxConcurrentActivityTaskExecutions: CONTROL_WAIT_SLOTS,
        });
  // Unawaited until close, as the one worker's run was: a worker that fails takes the process down with it.
  const runs = waits ? [worker.run(), waits.run()] : [worker.run()];

  // A node coming (back) lets waiting replicas try again now rather than at their next retry.
  const wakeWaiting = (): Promise<void> => wakeWaitingReplicas(store, client);

  // Every node's engines checked against server.yaml's: now where they were checked against another, and on each registration.
  const engines = new EnginePolicy({ config, store, client, log });
  await engines.start();
  // Where the CA key lives beside tls.ca (one host), renewals are signed and CRLs written in process; elsewhere
  // (the CA on its own host, as DESIGN wants) both go through a workflow whose activity runs on llmgw-ca.
  const caDir = dirname(config.tls.ca);
  const ca = existsSync(join(caDir, 'ca.key'))
    ? createCaOperations({ caDir, store, log: (msg, f) => log(msg, f ?? {}) })
    : null;
  const remote = remoteCa(client);
  // The agents' heartbeats, in memory: MySQL gets a few a minute per node; liveness judges the nodes beating here from these.
  const beats = new NodeBeats();
  const { app, gate } = await buildControlServer({
    store,
    beats,
    tls,
    log,
    logger: opts.logger,
    // Nodes reach Temporal only through the door, with their certificate; they are never told Temporal's address.
    temporal: {
      address: (host) => doorAddressFor(config.listeners, host),
      namespace: config.temporal.namespace,
      mtls: true,
    },
    heartbeatMs: AGENT_HEARTBEAT_MS,
    page: { client, ui: config.temporal },
    onNodesChanged: () => void wakeWaiting().catch(() => undefined),
    endDrain: (nodeId) => endDrain(client, nodeId),
    onRegistered: engines.onRegistered,
    onAgentCrashed: (nodeId) =>
      void signalAgentRestarted(store, client, nodeId)
        .then(
          (replicas) =>
            replicas.length &&
            log('agent restarted after a crash: its shards run again to adopt their engines', { nodeId, replicas }),
        )
        .catch((err: Error) =>
          log('could not tell replicas their agent restarted (they adopt once Temporal times the old shards out)', {
            nodeId,
            error: err.message,
          }),
        ),
    renew: (input: { csrPem: string; identity: NodeId; presentedSerial: string }) =>
      ca ? ca.signNodeCsr(input) : remote.renew(input),
    applyCatalog: (req) => applyCatalog({ store, client }, req),
    revoke: async (nodeId, reason) => {
      if (ca) return ca.revokeNode({ nodeId, reason });
      // MySQL first: the gate refuses the node at once, whether or not llmgw-ca is up to sign the CRL.
      const count = await store.revokeCertificates(nodeId, reason);
      const crl = await remote.publishCrl(`revoke ${nodeId}`).catch((err: Error) => ({ failed: err.message }));
      if ('failed' in crl)
        log('CRL NOT REPUBLISHED: asking llmgw-ca failed; run llmgw ca crl on the CA host', {
          nodeId,
          error: crl.failed,
        });
      else if ('pending' in crl)
        log('CRL NOT YET REPUBLISHED: the llmgw-ca worker has not answered; the workflow keeps trying', {
          nodeId,
          workflowId: crl.workflowId,
        });
      else
        log('crl republished by llmgw-ca', {
          nodeId,
          number: crl.number,
          revoked: crl.revoked,
          workflowId: crl.workflowId,
        });
      return count;
    },
  });
  // The same gate as the HTTPS API: one verdict per connection, and a revocation cuts the node's gRPC streams too.
  // Its task tokens also go to MySQL, so a restarted control plane (or another one) lets running shards answer on.
  const tokens = new TaskTokenMemory({ backing: store, log });
  const door = await startTemporalDoor({
    ...config.listeners.temporalDoor,
    upstream: temporalCredentials(config.temporal),
    namespace: config.temporal.namespace,
    tls,
    gate,
    log,
    tokens,
  });
  // Tokens of tasks nobody answered (their worker died) go after 90 days, a node certificate's lifetime.
  const pruning = new TaskTokenPruning({ store });
  pruning.start();
  const { host, port } = config.listeners.controlPlane;
  const url = await app.listen({ host, port });
  const metricsListener: MetricsListener | null =
    metrics && config.metrics.controlPlane
      ? await startMetricsListener({ ...config.metrics.controlPlane, registry: metrics.registry })
      : null;
  // From now on agents can reach this control plane: only silence from here on is evidence.
  const liveness = new NodeLiveness({
    store,
    log,
    lastDoorCall: door.lastCall,
    heard: (nodeId) => beats.of(nodeId),
    nodeLost: (nodeId, why) => signalNodeLost(store, client, nodeId, why),
    ...opts.liveness,
  });
  liveness.start();
  // server.yaml's catalog is the desired state: applied once the worker runs (a scale is a workflow update).
  const catalogApplied = opts.applyCatalog
    ? applyCatalog({ store, client }, { catalog: config.catalog, prune: false, dryRun: false }).then(
        (r) => {
          log('catalog applied', {
            actions: r.actions.filter((a) => a.kind !== 'unchanged').map((a) => `${a.kind} ${a.model}`),
            errors: r.errors,
          });
          return r;
        },
        (err: Error) => {
          log('CATALOG NOT APPLIED: the models keep what they run; llmgw ctl apply tries again', {
            error: err.message,
          });
          return null;
        },
      )
    : Promise.resolve(null);

  return {
    url,
    config,
    store,
    client,
    door,
    beats,
    metricsUrl: metricsListener?.url ?? null,
    catalogApplied,
    async close(): Promise<void> {
      await catalogApplied;
      await metricsListener?.close();
      liveness.stop();
      pruning.stop();
      await door.close();
      await app.close();
      // After the API: a registration it answered while closing still got its ensureEngines.
      engines.stop();
      // The SDK may already be draining it (its own signal handling in other embeddings).
      for (const w of [worker, waits]) if (w?.getState() === 'RUNNING') w.shutdown();
      await Promise.allSettled(runs);
      doorAgent?.destroy();
      await native.close();
      await connection.close();
      await pool.end();
    },
  };
}

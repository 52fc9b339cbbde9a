/**
 * Operator actions on a node, shared by the control API's routes (what `llmgw ctl` calls) and the cluster page's:
 * the node list entry, cordon / uncordon, and revocation. One implementation, so the page does what the CLI does.
 */
import { LlmgwError } from '../../lib/errors';
import { groupBy } from '../../lib/group';
import { renewAt } from '../../lib/pki/issue';
import { checkNodeId } from '../../lib/pki/node-id';
import { cutRevocationReason, type CertificateRecord, type ShardRow, type Store } from '../../lib/store/store';
import type { NodeId, NodeRecord } from '../../lib/types';
import type { CordonAnswer, NodeCertificate, NodeListEntry, RevokeAnswer } from './contract';
import type { NodeBeats } from './node-beats';
import type { ControlAppOptions } from './routes';

/**
 * A node as the node list shows it: its certificate (newest unrevoked first), its replicas and GPUs in use, and
 * when it was last seen: its last beat here when this control plane has one later than MySQL's (which is written
 * only every NODE_SEEN_WRITE_MS).
 */
export function listEntry(
  n: NodeRecord,
  shards: ShardRow[],
  certs: CertificateRecord[],
  beats?: Pick<NodeBeats, 'of'>,
): NodeListEntry {
  const mine = certs.filter((c) => c.cn === n.id && c.role === 'node');
  const c = mine.find((x) => !x.revokedAt) ?? mine[0];
  const cert: NodeCertificate | null = c
    ? {
        serial: c.serial,
        notAfter: c.notAfter.toISOString(),
        renewAt: renewAt(c.notBefore, c.notAfter).toISOString(),
        revoked: !!c.revokedAt,
      }
    : null;
  const on = shards.filter((s) => s.nodeId === n.id);
  const beat = beats?.of(n.id)?.beatAt;
  return {
    ...n,
    lastSeen: beat !== undefined && beat > (n.lastSeen?.getTime() ?? 0) ? new Date(beat) : n.lastSeen,
    cert,
    replicas: [...new Set(on.map((s) => s.replicaId))],
    gpusUsed: on.reduce((a, s) => a + s.gpus.length, 0),
    gpuShards: on.filter((s) => s.gpus.length).map(({ replicaId, rank, gpus }) => ({ replicaId, rank, gpus })),
  };
}

/** Every node as GET /v1/nodes lists it. */
export async function nodeList(store: Store, beats?: Pick<NodeBeats, 'of'>): Promise<NodeListEntry[]> {
  const [nodes, shards, certs] = await Promise.all([store.listNodes(), store.listShards(), store.listCertificates()]);
  // Each node's own rows, grouped once (not the whole lists filtered per node: quadratic at 1,000 nodes).
  const shardsOn = groupBy(shards, (s) => s.nodeId as string);
  const certsOf = groupBy(certs, (c) => c.cn);
  return nodes.map((n) => listEntry(n, shardsOn.get(n.id) ?? [], certsOf.get(n.id) ?? [], beats));
}

/**
 * The node a route's `:id` names, checked the one way every route checks it: the node-id alphabet exactly
 * (MariaDB would match `SIM-A` and `sim-a ` to `sim-a`), then registered — else 400 LLMGW_BAD_NODE_ID or 404.
 */
export async function knownNode(
  store: Store,
  raw: string,
): Promise<{ id: NodeId; state: NonNullable<Awaited<ReturnType<Store['nodeState']>>> }> {
  const id = checkNodeId(raw);
  const state = await store.nodeState(id);
  if (state === null) throw unknownNode(id);
  return { id, state };
}

/** What an operator route answers for a node id with no registration (404). */
export function unknownNode(id: NodeId): LlmgwError {
  return new LlmgwError('LLMGW_UNKNOWN_NODE', `node ${id} is not registered: see llmgw ctl nodes`, { nodeId: id });
}

/**
 * Cordons or uncordons a node. Cordon state lives in MySQL, so it survives restarts and re-registration;
 * uncordoning gives the node back, so a drain still moving replicas off it ends first (its move is given back).
 */
export async function setCordon(
  opts: Pick<ControlAppOptions, 'store' | 'endDrain' | 'onNodesChanged'>,
  rawId: string,
  verb: 'cordon' | 'uncordon',
  by = 'operator',
): Promise<CordonAnswer> {
  const { store } = opts;
  const state = verb === 'cordon' ? 'cordoned' : 'ready';
  const { id, state: before } = await knownNode(store, rawId);
  const drainEnded = verb === 'uncordon' && opts.endDrain ? await opts.endDrain(id) : undefined;
  // A down node can be cordoned too: it then comes back cordoned when its agent is seen again.
  const changed = (await store.isCordoned(id)) !== (state === 'cordoned');
  if (changed) {
    await store.setNodeState(id, state);
    await store.event({
      kind: `node.${state}`,
      nodeId: id,
      message: `${verb} by ${by}${before === 'down' ? ' (node down: applies when it is back)' : ''}`,
    });
    if (state === 'ready' && before !== 'down') opts.onNodesChanged?.(id);
  }
  return {
    nodeId: id,
    state: (await store.nodeState(id)) ?? state,
    changed,
    ...(drainEnded === undefined ? {} : { drainEnded }),
  };
}

/**
 * Revokes every certificate of a node (and cuts its connections, as `revoke` does), recording the reason cut to
 * what the store holds. A node that was issued a certificate but never registered (a failed onboarding) can be
 * revoked too.
 */
export async function revokeNode(
  store: Store,
  revoke: NonNullable<ControlAppOptions['revoke']>,
  rawId: string,
  rawReason: string,
): Promise<RevokeAnswer> {
  const id = checkNodeId(rawId);
  if ((await store.nodeState(id)) === null && (await store.listCertificates({ cn: id })).length === 0) {
    throw new LlmgwError(
      'LLMGW_UNKNOWN_NODE',
      `no node ${id} is registered and no certificate was issued to it: see llmgw ctl nodes`,
      { nodeId: id },
    );
  }
  const { reason, cut } = cutRevocationReason(rawReason);
  const revoked = await revoke(id, reason);
  await store.event({
    kind: 'node.revoked',
    nodeId: id,
    message: `${revoked} certificate${revoked === 1 ? '' : 's'} revoked: ${reason}`,
  });
  return { nodeId: id, revoked, reason, reasonCut: cut };
}

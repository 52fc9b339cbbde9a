/** `llmgw ctl replicas [--model M]`: every replica with its profile, state (and why, when waiting), shards with their GPUs, and endpoint. */
import type { ReplicaRecord, ShardAssignment } from '../../lib/types';
import { table } from '../table';
import { catalogModel, getJson, type CtlVerb } from './verb';

/** A shard as the tables show it: `node#rank`, and the GPU indices it holds there (`sim-a#0[0,1]`). */
export function shardCell(s: Pick<ShardAssignment, 'nodeId' | 'rank' | 'gpus'>): string {
  return `${s.nodeId}#${s.rank}${s.gpus?.length ? `[${s.gpus.join(',')}]` : ''}`;
}

/** Renders the replica list as a table. */
export function formatReplicas(replicas: ReplicaRecord[]): string {
  return table(
    ['REPLICA', 'MODEL', 'PROFILE', 'STATE', 'NODES[GPUS]', 'ENDPOINT', 'REASON'],
    replicas.map((r) => [
      r.id,
      r.model,
      r.profile,
      r.state,
      r.shards.map(shardCell).join(',') || '-',
      r.endpoint ?? '-',
      r.reason ?? '',
    ]),
  );
}

/** `ctl replicas` */
export const replicas: CtlVerb = {
  help: '  replicas [--model M]        replicas: profile, state (and why, when waiting), node#rank[GPU indices], endpoint',
  async run({ api, values, out }) {
    if (values.model !== undefined) await catalogModel(api, values.model);
    const q = values.model ? `?model=${encodeURIComponent(values.model)}` : '';
    const { replicas: list } = await getJson<{ replicas: ReplicaRecord[] }>(api, `${api.server}/v1/replicas${q}`);
    out(values.json ? `${JSON.stringify(list, null, 2)}\n` : formatReplicas(list));
  },
};

/** `llmgw ctl replicas [--model M]`: every replica with its state (and why, when waiting), nodes and endpoint. */
import type { ReplicaRecord } from '../../lib/types';
import { table } from '../table';
import { catalogModel, getJson, type CtlVerb } from './verb';

/** Renders the replica list as a table. */
export function formatReplicas(replicas: ReplicaRecord[]): string {
  return table(
    ['REPLICA', 'MODEL', 'STATE', 'NODES', 'ENDPOINT', 'REASON'],
    replicas.map((r) => [
      r.id,
      r.model,
      r.state,
      r.shards.map((s) => `${s.nodeId}#${s.rank}`).join(',') || '-',
      r.endpoint ?? '-',
      r.reason ?? '',
    ]),
  );
}

/** `ctl replicas` */
export const replicas: CtlVerb = {
  help: '  replicas [--model M]        replicas: state (and why, when waiting), nodes, endpoint',
  async run({ api, values, out }) {
    if (values.model !== undefined) await catalogModel(api, values.model);
    const q = values.model ? `?model=${encodeURIComponent(values.model)}` : '';
    const { replicas: list } = await getJson<{ replicas: ReplicaRecord[] }>(api, `${api.server}/v1/replicas${q}`);
    out(values.json ? `${JSON.stringify(list, null, 2)}\n` : formatReplicas(list));
  },
};

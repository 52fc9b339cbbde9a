/** `llmgw ctl fabrics`: each fabric, its nodes, subnet manager, adapters and warnings; islands last. */
import { fabricsView, formatFabrics, type NodeListEntry } from './views/fabrics';
import { getJson, type CtlVerb } from './verb';

/** `ctl fabrics` */
export const fabrics: CtlVerb = {
  help: '  fabrics                     each fabric: its nodes, subnet manager (SM GUID), adapters and warnings; islands last',
  async run({ api, values, out }) {
    const { nodes } = await getJson<{ nodes: NodeListEntry[] }>(api, `${api.server}/v1/nodes`);
    const view = fabricsView(nodes);
    out(values.json ? `${JSON.stringify(view, null, 2)}\n` : formatFabrics(view));
  },
};

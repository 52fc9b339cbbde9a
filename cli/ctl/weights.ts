/** `llmgw ctl weights`: the weights fetches under way and the files each node's cache holds. */
import type { WeightCopy } from '../../lib/store/weights';
import { temporalClient } from '../temporal';
import { formatWeights, weightsFetches } from './views/weights';
import { getJson, type CtlVerb } from './verb';

/** `ctl weights` */
export const weights: CtlVerb = {
  help: `  weights                     weights fetches under way (node, bytes, total, rate, from a peer or the origin) and
                              the files each node's cache holds`,
  async run({ api, config, values, out }) {
    const { copies } = await getJson<{ copies: WeightCopy[] }>(api, `${api.server}/v1/weights`);
    const { client, close } = await temporalClient(config);
    try {
      const fetches = await weightsFetches(client, { model: values.model });
      out(values.json ? `${JSON.stringify({ fetches, copies }, null, 2)}\n` : formatWeights(fetches, copies));
    } finally {
      await close();
    }
  },
};

/** `llmgw ctl scale MODEL N`: set the model's desired replicas (and wait until they serve). */
import { intOption, UsageError } from '../args';
import { deployModel } from './deployment';
import type { CtlVerb } from './verb';

/** `ctl scale` */
export const scale: CtlVerb = {
  help: "  scale MODEL N               set the model's desired replicas",
  async run({ config, api, values, positionals, out, verb, usage }) {
    const model = positionals[0];
    if (!model) throw new UsageError(`ctl ${verb} needs a MODEL\n${usage}`);
    if (positionals[1] === undefined) throw new UsageError(`ctl scale needs MODEL N, e.g. llmgw ctl scale ${model} 3`);
    const replicas = intOption(positionals[1], 'N', 0);
    await deployModel(config, api, {
      model,
      replicas,
      wait: !values['no-wait'],
      timeoutS: intOption(values.timeout, '--timeout', 300),
      routeTimeoutS: intOption(values['route-timeout'], '--route-timeout', 30),
      out,
    });
  },
};

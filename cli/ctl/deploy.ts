/** `llmgw ctl deploy MODEL`: start (or join) the model's deployment workflow and wait until its replicas serve and every live gateway routes them. */
import { intOption, UsageError } from '../args';
import { deployModel } from './deployment';
import type { CtlVerb } from './verb';

/** `ctl deploy` */
export const deploy: CtlVerb = {
  help: `  deploy MODEL [--replicas N] [--no-wait] [--timeout S] [--route-timeout S]
                              start (or join) the model's deployment workflow; waits until its replicas serve
                              (--timeout, default 300) and every live gateway routes them (--route-timeout, default 30)`,
  async run({ config, api, values, positionals, out, verb, usage }) {
    const model = positionals[0];
    if (!model) throw new UsageError(`ctl ${verb} needs a MODEL\n${usage}`);
    const replicas = values.replicas === undefined ? undefined : intOption(values.replicas, '--replicas', 0);
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

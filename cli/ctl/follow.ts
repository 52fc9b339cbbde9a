/** `llmgw ctl follow WORKFLOW-ID`: follow a workflow in the terminal until it ends; Ctrl-C detaches. */
import { UsageError } from '../args';
import { followWorkflow } from '../follow';
import { withTemporalClient, workflowLink } from '../temporal';
import type { CtlVerb } from './verb';

/** `ctl follow` */
export const follow: CtlVerb = {
  help: `  follow WORKFLOW-ID          follow a workflow in the terminal (onboard/NODE step by step) until it ends; Ctrl-C
                              detaches, the workflow goes on`,
  async run({ config, positionals, out }) {
    const workflowId = positionals[0];
    if (!workflowId) throw new UsageError('ctl follow needs a WORKFLOW-ID, e.g. llmgw ctl follow onboard/gpu-01');
    await withTemporalClient(config, (client, signal) =>
      followWorkflow(client, workflowId, { out, signal, uiLink: workflowLink(config, workflowId) }),
    );
  },
};

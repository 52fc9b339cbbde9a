/**
 * `llmgw provision-node` (also `llmgw-provision-node`): create the node's VM on Proxmox (provisionNode), following
 * each step in the terminal. Ctrl-C detaches; the workflow goes on in Temporal.
 */
import { loadServerConfig } from '../config/load';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { parseCidr } from '../lib/proxmox/plan';
import { parse, UsageError } from './args';
import { detachedLine, failureMessage, followProvisioning, provisionedLine } from './follow';
import { PROVISION_FLAGS, PROVISION_OPTIONS, provisionInput } from './provision-input';
import { withTemporalClient, workflowLink } from './temporal';

const PROVISION_USAGE = `
llmgw provision-node --name ID --ip ADDR/PREFIX [options]
(also: llmgw-provision-node …)

Creates the node's VM on Proxmox as the workflow provision/ID (activities on llmgw-proxmox, the worker that
holds the API token): checks the VMID is free, creates the VM from the cloud image with cloud-init (hostname
ID, the CA host's ssh key, the static address, no package upgrade on first boot), CPU type host, grows the
disk, starts it, and waits until its ssh port answers. If a step after the create fails, the VM it created is
removed. Then onboard it: llmgw onboard-node, or do both at once with llmgw add-node.
${PROVISION_FLAGS}
  --no-follow             start it and return (llmgw ctl follow provision/ID follows it)
  --config FILE           server.yaml: Temporal, and the proxmox section's defaults
`;

const out = (s: string): void => void process.stdout.write(s);

/** Entry for `llmgw provision-node`. */
export async function provisionNodeCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, { usage: PROVISION_USAGE, options: PROVISION_OPTIONS });
  for (const f of ['name', 'ip'] as const)
    if (!values[f]) throw new UsageError(`--${f} is required\n${PROVISION_USAGE}`);
  const config = loadServerConfig(values.config);
  const input = provisionInput(values, config);
  await withTemporalClient(config, async (client, signal) => {
    const workflowId = workflowIds.provision(input.nodeId);
    const handle = await client.workflow.start('provisionNode', {
      taskQueue: QUEUES.control,
      workflowId,
      args: [input],
      workflowIdConflictPolicy: 'USE_EXISTING',
      typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
    });
    out(
      `provisioning ${input.nodeId} (VM ${input.vmid}, ${input.ip}, cpu ${input.cpu}) on ${config.proxmox?.url} node ${input.pveNode}: workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`,
    );
    if (values['no-follow']) return;
    const r = await followProvisioning(handle, { out, signal }).catch((err: unknown) => {
      throw new Error(failureMessage(err));
    });
    out(
      r === 'detached'
        ? detachedLine(workflowId)
        : `${provisionedLine(r)}\n  next: llmgw onboard-node --node ${input.nodeId} --addr ${parseCidr(input.ip).address} --server URL --binary ARTEFACT\n`,
    );
  });
}

/**
 * `llmgw onboard-node` (also `llmgw-onboard-node`), run on the CA host: starts onboardNode (`onboard/<node>`),
 * or joins the one running, and follows it step by step. Ctrl-C detaches; the onboarding goes on.
 */
import type { Client } from '@temporalio/client';
import { loadServerConfig } from '../config/load';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { checkNodeId } from '../lib/pki';
import type { OnboardInput, OnboardResult } from '../workflows/contracts/onboard';
import { intOption, parse, UsageError } from './args';
import { ENGINE_BIN_OPTIONS, nodeBinUsage } from './engine-flags';
import { detachedLine, followOnboarding, onboardedLine } from './follow';
import { agentFlags, artefactRef, controlPlaneUrl, sshKeyPath } from './node-input';
import { withTemporalClient, workflowLink } from './temporal';

const USAGE = `
llmgw onboard-node --node ID --addr ADDR --server URL --binary ARTEFACT [options]
(also: llmgw-onboard-node …)

Run on the CA host (beside llmgw ca-worker): gives the machine at ADDR its identity and agent over ssh, as
the workflow onboard/ID on llmgw-ca — wait for ssh, learn its host key (accept-new: a changed one is refused),
check its hostname is ID and issue its certificate (CN = ID), install the release artefact, the certificate,
the CA root (trusted system-wide), the agent's configuration and its service, run each configured engine,
start the agent, and wait until it has registered. Every step is idempotent: running it again on a finished
node changes nothing; running it while one is under way joins that one. Ctrl-C detaches (it goes on);
llmgw ctl follow onboard/ID follows it again.

  --node ID               the node id: also its hostname, VM name and certificate CN (a-z, 0-9, '-')
  --addr ADDR             where the CA host reaches it over ssh
  --server URL            the control plane its agent registers with, e.g. https://10.0.0.140:7443
  --binary ARTEFACT       the release artefact to install (llmgw-<version>-linux-<arch>.tar.gz, from npm run
                          release or a release); onboarding never copies the working tree it runs from
  --fabric NAME[:dev,dev] InfiniBand fabric of the node (repeatable); none: an island
${nodeBinUsage(26, 'run at onboarding (--version) and offered')}
  --nvidia-smi PATH       nvidia-smi on the node (default: on its PATH)
  --no-gpu                the node has no GPU: the agent does not look for one
  --ib-root PATH          sysfs root with class/infiniband on the node (default /sys)
  --advertise-host HOST   where the node is reached: its door, or without one its engines (default ADDR)
  --no-door               the agent serves no node door: engines listen on the node's address, reached by the
                          gateways directly. Default: its door on <advertise-host>:7460 (engines on 127.0.0.1), so
                          every gateway and control plane needs tls.gatewayCert (llmgw ca issue --gateway NAME)
  --ssh-user USER         (default root; another user needs passwordless sudo)
  --ssh-key PATH          the CA host's private key (default ~/.ssh/id_ed25519, id_ecdsa or id_rsa)
  --ssh-port N            (default 22)
  --ssh-timeout S         how long to wait for ssh to answer (default 600)
  --register-timeout S    how long the started agent may take to register (default 120)
  --no-follow             start (or join) it and return
  --config FILE           server.yaml: where Temporal is and how to reach it (temporal.address, namespace, uiUrl,
                          tls, apiKeyFile: docs/operations.md "Connecting to Temporal")
`;

/**
 * Starts onboarding `input.nodeId` or joins the one running (one workflow per node: `onboard/<node>`), prints
 * its id and UI link, and follows it unless `follow` is false. Resolves with the result, 'detached' (signal), or
 * 'started' (no follow); throws the failure naming the step, why and what to do.
 */
export async function onboardNode(
  client: Client,
  input: OnboardInput,
  o: { uiLink: string; out: (s: string) => void; follow: boolean; signal?: AbortSignal },
): Promise<OnboardResult | 'detached' | 'started'> {
  const workflowId = workflowIds.onboard(input.nodeId);
  const before = await client.workflow
    .getHandle(workflowId)
    .describe()
    .catch(() => null);
  const handle = await client.workflow.start('onboardNode', {
    taskQueue: QUEUES.control,
    workflowId,
    args: [input],
    // A second start while one runs joins it; a finished one is run again (which changes nothing on a done node).
    workflowIdConflictPolicy: 'USE_EXISTING',
    typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
  });
  o.out(`onboarding ${input.nodeId} (${input.addr}): workflow ${workflowId}\n  ${o.uiLink}\n`);
  if (before?.status.name === 'RUNNING')
    o.out(`  joined the onboarding running since ${before.startTime.toISOString()} (its own flags stand)\n`);
  if (!o.follow) return 'started';
  const r = await followOnboarding(handle, { out: o.out, signal: o.signal });
  o.out(r === 'detached' ? detachedLine(workflowId) : `${onboardedLine(r)}\n`);
  return r;
}

/** Entry for `llmgw onboard-node`. */
export async function onboardNodeCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: USAGE,
    options: {
      node: { type: 'string' },
      addr: { type: 'string' },
      server: { type: 'string' },
      binary: { type: 'string' },
      fabric: { type: 'string', multiple: true },
      ...ENGINE_BIN_OPTIONS,
      'nvidia-smi': { type: 'string' },
      'no-gpu': { type: 'boolean' },
      'ib-root': { type: 'string' },
      'advertise-host': { type: 'string' },
      'no-door': { type: 'boolean' },
      'ssh-user': { type: 'string' },
      'ssh-key': { type: 'string' },
      'ssh-port': { type: 'string' },
      'ssh-timeout': { type: 'string' },
      'register-timeout': { type: 'string' },
      'no-follow': { type: 'boolean' },
      config: { type: 'string' },
    },
  });
  for (const f of ['node', 'addr', 'server'] as const)
    if (!values[f]) throw new UsageError(`--${f} is required\n${USAGE}`);
  const server = controlPlaneUrl(values.server!);
  const nodeId = checkNodeId(values.node!);
  const artefact = await artefactRef(values.binary);
  const input: OnboardInput = {
    nodeId,
    addr: values.addr!,
    sshPort: intOption(values['ssh-port'], '--ssh-port', 22),
    sshUser: values['ssh-user'] ?? 'root',
    sshKeyPath: sshKeyPath(values['ssh-key']),
    server,
    advertiseHost: values['advertise-host'] ?? values.addr!,
    ...agentFlags(values),
    artefact,
    sshDeadlineS: intOption(values['ssh-timeout'], '--ssh-timeout', 600),
    registerTimeoutS: intOption(values['register-timeout'], '--register-timeout', 120),
  };
  const config = loadServerConfig(values.config);
  await withTemporalClient(config, (client, signal) =>
    onboardNode(client, input, {
      uiLink: workflowLink(config, workflowIds.onboard(nodeId)),
      out: (s) => process.stdout.write(s),
      follow: !values['no-follow'],
      signal,
    }),
  );
}

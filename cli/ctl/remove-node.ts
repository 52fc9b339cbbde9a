/** `llmgw ctl remove-node NODE [--destroy-vm] [--force]`: take a node out of the cluster for good (workflow remove-node/NODE). */
import { loadServerConfig } from '../../config/load';
import type { NodeListEntry } from '../../gateway/control/contract';
import { startRemoveNode } from '../../lib/workflow-starts';
import type { RemoveNodeInput } from '../../workflows/contracts/remove-node';
import { workflowIds } from '../../lib/names';
import { checkNodeId } from '../../lib/pki/node-id';
import { parse, UsageError } from '../args';
import { controlApi } from '../control-api';
import { detachedLine, followRemoval } from '../follow';
import { sshKeyPath } from '../node-input';
import { withTemporalClient, workflowLink } from '../temporal';
import { getJson, type CtlVerb } from './verb';

const USAGE = `
llmgw ctl remove-node NODE [--destroy-vm] [--force] [--addr ADDR] [--ssh-user USER] [--ssh-key PATH] [--ssh-port N]

Removes NODE for good (workflow remove-node/NODE; run it on the CA host, where llmgw ca-worker runs): drains it
(each replica moves elsewhere, its replacement serving first), stops its agent over ssh (its systemd unit
disabled), revokes its certificates, forgets its ssh host keys and its records. Refused while it holds a replica
that fits on no other node, naming the model (a model's last replica above all) unless --force.

  --destroy-vm      also remove its VM through llmgw proxmox-worker: only the VM named NODE with the llmgw tag,
                    which llmgw's provisioning made; any other VM is left alone, and said so
  --force           remove it even so: those replicas stop there and wait for room elsewhere; a node that
                    cannot be reached over ssh is not stopped (its certificate is revoked all the same)
  --addr ADDR       where the CA host reaches it over ssh (default: the address it registered with)
  --ssh-user USER   (default root)      --ssh-key PATH (default ~/.ssh/id_ed25519, id_ecdsa or id_rsa)
  --ssh-port N      (default 22)        --no-wait   start it and return
  --config FILE     server.yaml         --server URL  control plane URL
`;

/** Entry for `llmgw ctl remove-node`. */
export async function removeNodeCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: USAGE,
    allowPositionals: true,
    options: {
      config: { type: 'string' },
      server: { type: 'string' },
      'destroy-vm': { type: 'boolean' },
      force: { type: 'boolean' },
      addr: { type: 'string' },
      'ssh-user': { type: 'string' },
      'ssh-key': { type: 'string' },
      'ssh-port': { type: 'string' },
      'no-wait': { type: 'boolean' },
    },
  });
  if (!positionals[0])
    throw new UsageError(`ctl remove-node needs a NODE, e.g. llmgw ctl remove-node gpu-04\n${USAGE}`);
  const nodeId = checkNodeId(positionals[0]);
  const port = Number(values['ssh-port'] ?? 22);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new UsageError(`--ssh-port must be a port number, got "${values['ssh-port']}"`);
  const config = loadServerConfig(values.config);
  const api = controlApi(config, values.server);
  const { nodes } = await getJson<{ nodes: NodeListEntry[] }>(api, `${api.server}/v1/nodes`);
  const addr = values.addr ?? nodes.find((n) => n.id === nodeId)?.inventory.host ?? null;
  const workflowId = workflowIds.removeNode(nodeId);
  await withTemporalClient(config, async (client, signal) => {
    const input: RemoveNodeInput = {
      nodeId,
      destroyVm: values['destroy-vm'] ?? false,
      force: values.force ?? false,
      ssh: { addr, port, user: values['ssh-user'] ?? 'root', keyPath: addr ? sshKeyPath(values['ssh-key']) : '' },
    };
    const handle = await startRemoveNode(client, input);
    out(`removing ${nodeId}: workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`);
    if (values['no-wait']) return;
    const r = await followRemoval(handle, { out, signal });
    out(
      r === 'detached'
        ? detachedLine(workflowId)
        : `${nodeId} removed in ${(r.totalMs / 1000).toFixed(1)} s: llmgw ctl nodes no longer lists it, and its certificates are refused\n`,
    );
  });
}

/** `ctl remove-node` (its own options and --help) */
export const removeNodeVerb: CtlVerb = {
  help: `  remove-node NODE [--destroy-vm] [--force]
                              drain NODE, stop its agent, revoke its certificates, forget its host keys and records
                              (workflow remove-node/NODE); --destroy-vm removes the VM llmgw made for it`,
  run: (ctx) =>
    removeNodeCommand([...ctx.positionals, ...(ctx.values.config ? ['--config', ctx.values.config] : [])], ctx.out),
  raw: removeNodeCommand,
};

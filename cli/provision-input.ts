/** What provision-node and add-node read the same way: the VM's flags over server.yaml's proxmox defaults. */
import type { ServerConfig } from '../config/types';
import { LlmgwError } from '../lib/errors';
import { checkNodeId } from '../lib/pki';
import { checkVmid, defaultVmid, parseCidr, parseDiskGiB } from '../lib/proxmox/plan';
import type { ProvisionInput } from '../workflows/contracts/provision';
import { intOption, UsageError } from './args';
import { sshKeyPair } from './node-input';

/** The VM's flags, in both commands' help. */
export const PROVISION_FLAGS = `
  --name ID               the node id: VM name, hostname (cloud-init) and certificate CN (a-z, 0-9, '-')
  --ip ADDR/PREFIX        its static address, e.g. 10.0.0.144/24
  --vmid N                (default: the address's last octet, 144 here). A VMID that exists is refused,
                          naming the VM that holds it: llmgw never adopts or replaces a VM it did not create
  --gw ADDR               default gateway (default proxmox.gateway in server.yaml)
  --cores N               (default proxmox.cores, 4)
  --memory MIB            (default proxmox.memoryMiB, 8192)
  --disk SIZE             the disk, grown from the image's size, e.g. 100G (default proxmox.disk, 64G)
  --cpu TYPE              Proxmox CPU type (default host). Proxmox's own API default is kvm64, which hides
                          AVX2: llama.cpp then runs its scalar backend, many times slower (docs/provisioning.md)
  --image VOLID           cloud image, e.g. local:import/debian-12-genericcloud-amd64.qcow2 (default proxmox.image)
  --storage NAME          (default proxmox.storage)
  --bridge NAME           (default proxmox.bridge)
  --pve-node NAME         the Proxmox node to create it on (default proxmox.node)
  --ssh-key PATH          the CA host's private key; PATH.pub goes into the VM (default ~/.ssh/id_ed25519,
                          id_ecdsa or id_rsa)
  --ssh-timeout S         how long the new VM may take until ssh answers (default 600)`;

/** parseArgs' values, as both commands hold them. */
export type Values = Record<string, string | boolean | string[] | undefined>;
const str = (v: Values, k: string): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined);

/** The VM's options for parseArgs. */
export const PROVISION_OPTIONS = {
  name: { type: 'string' },
  ip: { type: 'string' },
  vmid: { type: 'string' },
  gw: { type: 'string' },
  cores: { type: 'string' },
  memory: { type: 'string' },
  disk: { type: 'string' },
  cpu: { type: 'string' },
  image: { type: 'string' },
  storage: { type: 'string' },
  bridge: { type: 'string' },
  'pve-node': { type: 'string' },
  'ssh-key': { type: 'string' },
  'ssh-timeout': { type: 'string' },
  'no-follow': { type: 'boolean' },
  config: { type: 'string' },
} as const;

/** The provisioning input from the flags over server.yaml's proxmox defaults; every bad value names the flag. */
export function provisionInput(values: Values, config: ServerConfig): ProvisionInput {
  const pve = config.proxmox;
  if (!pve)
    throw new UsageError(
      'server.yaml has no proxmox section: add one (url, node, tokenId, tokenSecretFile, ca, storage, image, bridge; config/server.example.yaml), and run llmgw proxmox-worker with it',
    );
  const nodeId = checkNodeId(str(values, 'name') as string);
  const ip = str(values, 'ip') as string;
  try {
    parseCidr(ip);
    const vmid =
      str(values, 'vmid') === undefined ? defaultVmid(ip) : checkVmid(intOption(str(values, 'vmid'), '--vmid', 0));
    const gw = str(values, 'gw') ?? pve.gateway;
    const { pub } = sshKeyPair(str(values, 'ssh-key'));
    return {
      nodeId,
      vmid,
      ip,
      gateway: gw,
      nameserver: pve.nameserver,
      cores: intOption(str(values, 'cores'), '--cores', pve.cores),
      memoryMiB: intOption(str(values, 'memory'), '--memory', pve.memoryMiB),
      diskGiB: parseDiskGiB(str(values, 'disk') ?? pve.disk),
      cpu: str(values, 'cpu') ?? 'host',
      image: str(values, 'image') ?? pve.image,
      storage: str(values, 'storage') ?? pve.storage,
      bridge: str(values, 'bridge') ?? pve.bridge,
      pveNode: str(values, 'pve-node') ?? pve.node,
      sshKeys: pub,
      ciuser: 'root',
      sshPort: 22,
      sshDeadlineS: intOption(str(values, 'ssh-timeout'), '--ssh-timeout', 600),
    };
  } catch (err) {
    if (err instanceof LlmgwError) throw new UsageError(err.message);
    throw err;
  }
}

/**
 * `llmgw provision-node` (also `llmgw-provision-node`) and `llmgw add-node` (also `llmgw-add-node`): create the
 * node's VM on Proxmox (provisionNode), and with add-node also onboard it (onboardNode), following each step in
 * the terminal. Ctrl-C detaches; the workflows go on in Temporal.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Client, WorkflowHandle } from '@temporalio/client';
import { loadServerConfig } from '../config/load';
import type { ServerConfig } from '../config/types';
import { LlmgwError } from '../lib/errors';
import { QUEUES, searchAttributes, workflowIds } from '../lib/names';
import { checkNodeId } from '../lib/pki';
import { checkVmid, defaultVmid, parseCidr, parseDiskGiB } from '../lib/proxmox/plan';
import type { OnboardInput } from '../workflows/contracts/onboard';
import type { AddNodeInput, AddNodeResult, ProvisionInput } from '../workflows/contracts/provision';
import type { DoctorResult } from '../lib/types';
import { intOption, parse, UsageError } from './args';
import { controlApi } from './control-api';
import { detachedLine, failureMessage, followOnboarding, followProvisioning, onboardedLine, provisionedLine } from './follow';
import { artefactRef, engineBins, withTemporalClient, workflowLink } from './onboard';

const PROVISION_FLAGS = `
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

const ADD_USAGE = `
llmgw add-node --name ID --ip ADDR/PREFIX --server URL --binary ARTEFACT [options]
(also: llmgw-add-node …)

Both halves in one command, as the workflow add-node/ID: provision/ID (the VM on Proxmox; see llmgw
provision-node --help), then onboard/ID (identity, agent and engine probe over ssh; see llmgw onboard-node
--help), each followed step by step. At the end a node whose CPU lacks AVX2 is flagged with the fix.
${PROVISION_FLAGS}
  --server URL            the control plane its agent registers with, e.g. https://10.0.0.140:7443
  --binary ARTEFACT       the release artefact to install (npm run release)
  --fabric NAME[:dev,dev] InfiniBand fabric of the node (repeatable)
  --llamacpp-bin PATH     llama-server on the node, probed at onboarding and offered
  --vllm-bin PATH         vllm on the node, likewise
  --sglang-python PATH    the python with SGLang on the node, likewise
  --nvidia-smi PATH       nvidia-smi on the node (default: on its PATH)
  --no-gpu                the node has no GPU
  --ib-root PATH          sysfs root with class/infiniband on the node (default /sys)
  --ssh-user USER         (default root)
  --register-timeout S    how long the started agent may take to register (default 120)
  --provision-only        only the VM (the same as llmgw provision-node)
  --onboard-only          only onboarding, of a VM that exists (the same as llmgw onboard-node; --addr is
                          the address of --ip)
  --no-follow             start it and return (llmgw ctl follow add-node/ID)
  --config FILE           server.yaml: Temporal, and the proxmox section's defaults
`;

type Values = Record<string, string | boolean | string[] | undefined>;
const str = (v: Values, k: string): string | undefined => (typeof v[k] === 'string' ? (v[k] as string) : undefined);

const PROVISION_OPTIONS = {
  name: { type: 'string' }, ip: { type: 'string' }, vmid: { type: 'string' }, gw: { type: 'string' }, cores: { type: 'string' }, memory: { type: 'string' },
  disk: { type: 'string' }, cpu: { type: 'string' }, image: { type: 'string' }, storage: { type: 'string' }, bridge: { type: 'string' },
  'pve-node': { type: 'string' }, 'ssh-key': { type: 'string' }, 'ssh-timeout': { type: 'string' }, 'no-follow': { type: 'boolean' }, config: { type: 'string' },
} as const;

/** The CA host's ssh key pair: --ssh-key, or the first of the usual ones; its .pub must be beside it. */
function sshKeyPair(flag: string | undefined): { key: string; pub: string[] } {
  const key = flag ? resolve(flag) : ['id_ed25519', 'id_ecdsa', 'id_rsa'].map((k) => join(homedir(), '.ssh', k)).find((k) => existsSync(k));
  if (!key) throw new UsageError(`no ssh key in ${join(homedir(), '.ssh')} (id_ed25519, id_ecdsa, id_rsa): pass --ssh-key PATH (make one with ssh-keygen -t ed25519)`);
  const pubFile = `${key}.pub`;
  if (!existsSync(pubFile)) throw new UsageError(`${pubFile} is missing: the VM is given the public half of --ssh-key ${key} (ssh-keygen -y -f ${key} > ${pubFile})`);
  const pub = readFileSync(pubFile, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  return { key, pub };
}

/** The provisioning input from the flags over server.yaml's proxmox defaults; every bad value names the flag. */
export function provisionInput(values: Values, config: ServerConfig): ProvisionInput {
  const pve = config.proxmox;
  if (!pve) throw new UsageError('server.yaml has no proxmox section: add one (url, node, tokenId, tokenSecretFile, ca, storage, image, bridge; config/server.example.yaml), and run llmgw proxmox-worker with it');
  const nodeId = checkNodeId(str(values, 'name') as string);
  const ip = str(values, 'ip') as string;
  try {
    parseCidr(ip);
    const vmid = str(values, 'vmid') === undefined ? defaultVmid(ip) : checkVmid(intOption(str(values, 'vmid'), '--vmid', 0));
    const gw = str(values, 'gw') ?? pve.gateway;
    const { pub } = sshKeyPair(str(values, 'ssh-key'));
    return {
      nodeId, vmid, ip, gateway: gw, nameserver: pve.nameserver,
      cores: intOption(str(values, 'cores'), '--cores', pve.cores), memoryMiB: intOption(str(values, 'memory'), '--memory', pve.memoryMiB),
      diskGiB: parseDiskGiB(str(values, 'disk') ?? pve.disk), cpu: str(values, 'cpu') ?? 'host',
      image: str(values, 'image') ?? pve.image, storage: str(values, 'storage') ?? pve.storage, bridge: str(values, 'bridge') ?? pve.bridge,
      pveNode: str(values, 'pve-node') ?? pve.node, sshKeys: pub, ciuser: 'root', sshPort: 22,
      sshDeadlineS: intOption(str(values, 'ssh-timeout'), '--ssh-timeout', 600),
    };
  } catch (err) {
    if (err instanceof LlmgwError) throw new UsageError(err.message);
    throw err;
  }
}

const out = (s: string): void => void process.stdout.write(s);

/** Entry for `llmgw provision-node`. */
export async function provisionNodeCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, { usage: PROVISION_USAGE, options: PROVISION_OPTIONS });
  for (const f of ['name', 'ip'] as const) if (!values[f]) throw new UsageError(`--${f} is required\n${PROVISION_USAGE}`);
  const config = loadServerConfig(values.config);
  const input = provisionInput(values, config);
  await withTemporalClient(config, async (client, signal) => {
    const workflowId = workflowIds.provision(input.nodeId);
    const handle = await client.workflow.start('provisionNode', {
      taskQueue: QUEUES.control, workflowId, args: [input], workflowIdConflictPolicy: 'USE_EXISTING',
      typedSearchAttributes: [{ key: searchAttributes.node, value: [input.nodeId] }],
    });
    out(`provisioning ${input.nodeId} (VM ${input.vmid}, ${input.ip}, cpu ${input.cpu}) on ${config.proxmox?.url} node ${input.pveNode}: workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`);
    if (values['no-follow']) return;
    const r = await followProvisioning(handle, { out, signal }).catch((err: unknown) => {
      throw new Error(failureMessage(err));
    });
    out(r === 'detached' ? detachedLine(workflowId) : `${provisionedLine(r)}\n  next: llmgw onboard-node --node ${input.nodeId} --addr ${parseCidr(input.ip).address} --server URL --binary ARTEFACT\n`);
  });
}

/** Waits until a child workflow exists (the parent starts it), then returns its handle; null when the parent ended first. */
async function childHandle(client: Client, parent: WorkflowHandle, workflowId: string, since: Date, signal: AbortSignal): Promise<WorkflowHandle | null> {
  for (;;) {
    const d = await client.workflow.getHandle(workflowId).describe().catch(() => null);
    if (d && d.startTime >= new Date(since.getTime() - 1000)) return client.workflow.getHandle(workflowId);
    if ((await parent.describe()).status.name !== 'RUNNING' || signal.aborted) return null;
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** Entry for `llmgw add-node`. */
export async function addNodeCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: ADD_USAGE,
    options: {
      ...PROVISION_OPTIONS, server: { type: 'string' }, binary: { type: 'string' }, fabric: { type: 'string', multiple: true },
      'llamacpp-bin': { type: 'string' }, 'vllm-bin': { type: 'string' }, 'sglang-python': { type: 'string' }, 'nvidia-smi': { type: 'string' },
      'no-gpu': { type: 'boolean' }, 'ib-root': { type: 'string' }, 'ssh-user': { type: 'string' }, 'register-timeout': { type: 'string' },
      'provision-only': { type: 'boolean' }, 'onboard-only': { type: 'boolean' },
    },
  });
  if (values['provision-only'] && values['onboard-only']) throw new UsageError('--provision-only and --onboard-only exclude each other: give neither for both halves');
  const required = values['provision-only'] ? ['name', 'ip'] : ['name', 'ip', 'server'];
  for (const f of required) if (!values[f as keyof typeof values]) throw new UsageError(`--${f} is required\n${ADD_USAGE}`);
  const config = loadServerConfig(values.config);
  const nodeId = checkNodeId(values.name as string);
  const provision = values['onboard-only'] ? null : provisionInput(values, config);
  let onboard: OnboardInput | null = null;
  if (!values['provision-only']) {
    const server = (values.server as string).replace(/\/$/, '');
    if (!/^https:\/\/[^/]+$/.test(server)) throw new UsageError(`--server ${values.server}: the control plane's https://HOST:PORT (it speaks mutual TLS only)`);
    let addr: string;
    try {
      addr = parseCidr(values.ip as string).address;
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const { key } = sshKeyPair(values['ssh-key']);
    onboard = {
      nodeId, addr, sshPort: 22, sshUser: values['ssh-user'] ?? 'root', sshKeyPath: key, server, advertiseHost: addr,
      fabrics: values.fabric ?? [], noGpu: values['no-gpu'] ?? false,
      ...(values['nvidia-smi'] ? { nvidiaSmi: values['nvidia-smi'] } : {}), ...(values['ib-root'] ? { ibRoot: values['ib-root'] } : {}),
      bins: engineBins(values),
      artefact: await artefactRef(values.binary), sshDeadlineS: intOption(values['ssh-timeout'], '--ssh-timeout', 600),
      registerTimeoutS: intOption(values['register-timeout'], '--register-timeout', 120),
    };
  }
  const input: AddNodeInput = { nodeId, provision, onboard };
  await withTemporalClient(config, async (client, signal) => {
    const workflowId = workflowIds.addNode(nodeId);
    const since = new Date();
    const handle = await client.workflow.start('addNode', {
      taskQueue: QUEUES.control, workflowId, args: [input], workflowIdConflictPolicy: 'USE_EXISTING',
      typedSearchAttributes: [{ key: searchAttributes.node, value: [nodeId] }],
    });
    out(`adding ${nodeId}: workflow ${workflowId}\n  ${workflowLink(config, workflowId)}\n`);
    if (values['no-follow']) return;
    for (const [what, id] of [...(provision ? [['provision', workflowIds.provision(nodeId)]] : []), ...(onboard ? [['onboard', workflowIds.onboard(nodeId)]] : [])] as [string, string][]) {
      const h = await childHandle(client, handle, id, since, signal);
      if (signal.aborted) return void out(detachedLine(workflowId));
      if (!h) break;
      out(`${what}: workflow ${id}\n`);
      const r = await (what === 'provision' ? followProvisioning(h, { out, signal }) : followOnboarding(h, { out, signal })).catch(() => 'failed' as const);
      if (r === 'detached') return void out(detachedLine(workflowId));
      if (r === 'failed') break;
      out(`${what === 'provision' ? provisionedLine(r as never) : onboardedLine(r as never)}\n`);
    }
    let result: AddNodeResult;
    try {
      result = (await handle.result()) as AddNodeResult;
    } catch (err) {
      throw new Error(failureMessage(err));
    }
    out(`${nodeId} added in ${(result.totalMs / 1000).toFixed(1)} s\n`);
    if (onboard) out(await cpuVerdict(config, nodeId, onboard.server));
  });
}

/**
 * The end of add-node: the node's CPU check as its agent reported it (llmgw doctor's cpu-flags). A node without
 * AVX2 — what a VM on kvm64 looks like — is flagged with the reason and the fix.
 */
async function cpuVerdict(config: ServerConfig, nodeId: string, server: string): Promise<string> {
  try {
    const api = controlApi(config, server);
    const res = await api.fetch(`${api.server}/v1/nodes`, { signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
    const { nodes } = (await res.json()) as { nodes: { id: string; inventory: { doctor?: DoctorResult[] } }[] };
    const cpu = nodes.find((x) => x.id === nodeId)?.inventory.doctor?.find((d) => d.id === 'cpu-flags');
    if (!cpu) return `  CPU: ${nodeId} reported no CPU check (an older agent?): see llmgw ctl nodes\n`;
    if (cpu.status === 'pass') return `  CPU: ${cpu.summary}\n`;
    return `  WARNING: ${nodeId}'s CPU check ${cpu.status === 'fail' ? 'failed' : 'warns'}: ${cpu.summary}\n  fix: ${cpu.fix || 'see llmgw doctor'}\n`;
  } catch (err) {
    return `  CPU: could not read ${nodeId}'s checks from the control plane (${(err as Error).message}): see llmgw ctl nodes\n`;
  }
}

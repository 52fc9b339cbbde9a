/**
 * Provisioning's pure parts: what llmgw asks Proxmox for, and how it reads Proxmox's answers. The facts come
 * from qemu-server (Qemu.pm, CPUConfig.pm, Cloudinit.pm) and pve-common (Tools.pm's UPIDs); see
 * ../shared/notes/proxmox-ssh-pki.md §A and docs/provisioning.md.
 */
import { isIPv4 } from 'node:net';
import { LlmgwError } from '../errors';

/** The tag every VM llmgw creates carries; with the name, it is how a VM is recognised as llmgw's own. */
export const LLMGW_TAG = 'llmgw';

export interface VmSpec {
  vmid: number;
  /** the node id: VM name and, through cloud-init, hostname */
  name: string;
  /** ADDR/PREFIX */
  ip: string;
  gateway: string | null;
  nameserver: string | null;
  cores: number;
  memoryMiB: number;
  /** wanted disk size, GiB */
  diskGiB: number;
  /** Proxmox CPU type; llmgw's default is `host` (the API's own default is kvm64, which hides AVX2) */
  cpu: string;
  /** the cloud image, an import volid */
  image: string;
  storage: string;
  bridge: string;
  /** authorized_keys lines for the cloud-init user */
  sshKeys: string[];
  /** the cloud-init user (root: onboarding logs in as root by default) */
  ciuser: string;
  /** the tag of the run creating it (runTag): how a retried create recognises its own VM */
  runTag: string;
}

export { runTag } from './tags';

/** `10.0.0.144/24` → address and prefix; a clear error for anything else. */
export function parseCidr(s: string): { address: string; prefix: number } {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(s.trim());
  if (!m || !isIPv4(m[1] as string) || Number(m[2]) < 1 || Number(m[2]) > 32) {
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `--ip ${s}: expected an IPv4 address with its prefix length, e.g. 10.0.0.144/24`,
    );
  }
  return { address: m[1] as string, prefix: Number(m[2]) };
}

/**
 * The VMID llmgw uses when none is given: the address's last octet (10.0.0.144 → 144), so a VM's id says its
 * address. Proxmox's VMIDs start at 100: an octet below that is refused, naming the fix.
 */
export function defaultVmid(ip: string): number {
  const octet = Number(parseCidr(ip).address.split('.')[3]);
  if (octet < 100)
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `the VMID defaults to the address's last octet, but ${octet} (from ${ip}) is below Proxmox's first VMID, 100: pass --vmid N (100 to 999999999)`,
    );
  return octet;
}

export function checkVmid(n: number): number {
  if (!Number.isInteger(n) || n < 100 || n > 999_999_999)
    throw new LlmgwError('LLMGW_BAD_REQUEST', `--vmid ${n}: Proxmox VMIDs are whole numbers from 100 to 999999999`);
  return n;
}

/** `64G`, `64` (GiB) → 64. */
export function parseDiskGiB(s: string, flag = '--disk'): number {
  const m = /^(\d+)(G|GB|GiB)?$/i.exec(s.trim());
  if (!m || Number(m[1]) < 1)
    throw new LlmgwError('LLMGW_BAD_REQUEST', `${flag} ${s}: expected a size in GiB, e.g. 64G`);
  return Number(m[1]);
}

/**
 * `sshkeys` as Proxmox wants it: the keys joined by newlines, URL-encoded once. The server accepts only
 * `[-%a-zA-Z0-9_.!~*'()]` and unescapes — encodeURIComponent's safe set exactly. (proxmox-api form-encodes the
 * result once more for the wire, which the server undoes first.) Raw keys or `+` for spaces are refused with
 * "invalid urlencoded string".
 */
export function encodeSshKeys(keys: string[]): string {
  const lines = keys.map((k) => k.trim()).filter(Boolean);
  if (lines.length === 0)
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      'no ssh public key to give the VM: onboarding would have no way in (pass --ssh-key PATH, whose PATH.pub is used)',
    );
  return encodeURIComponent(lines.join('\n'));
}

/** The body of `POST /nodes/{node}/qemu` for `spec`. The disk is imported at the image's size; it is grown after. */
export function createParams(spec: VmSpec): Record<string, string | number> {
  const { address, prefix } = parseCidr(spec.ip);
  return {
    vmid: spec.vmid,
    name: spec.name,
    tags: `${LLMGW_TAG};${spec.runTag}`,
    description: `llmgw node ${spec.name} (created by llmgw provision-node)`,
    ostype: 'l26',
    // Always sent: without it the API picks kvm64 (CPUConfig.pm), which has no AVX/AVX2/FMA.
    cpu: spec.cpu,
    cores: spec.cores,
    memory: spec.memoryMiB,
    scsihw: 'virtio-scsi-single',
    // import-from needs this exact form: <storage>:0,import-from=<volid> (Qemu.pm).
    scsi0: `${spec.storage}:0,import-from=${spec.image},discard=on,iothread=1`,
    ide2: `${spec.storage}:cloudinit`,
    boot: 'order=scsi0',
    net0: `virtio,bridge=${spec.bridge}`,
    serial0: 'socket',
    vga: 'serial0',
    ciuser: spec.ciuser,
    // No package upgrade on first boot: it holds apt's lock for minutes and changes the machine under onboarding.
    ciupgrade: 0,
    ipconfig0: `ip=${address}/${prefix}${spec.gateway ? `,gw=${spec.gateway}` : ''}`,
    ...(spec.nameserver ? { nameserver: spec.nameserver } : {}),
    sshkeys: encodeSshKeys(spec.sshKeys),
  };
}

/** A VM as `/cluster/resources?type=vm` lists it. */
export interface VmResource {
  vmid: number;
  name?: string;
  node: string;
  status: string;
  tags?: string;
  template?: number;
  /** a config lock; `create` while a create runs: the VMID is reserved but name and tags are written only at its end */
  lock?: string;
}

const tagsOf = (vm: Pick<VmResource, 'tags'>): string[] => (vm.tags ?? '').split(/[;,\s]+/).filter(Boolean);

/** True when `vm` is one llmgw made for node `name`: that name and llmgw's tag (and, given `run`, that run's tag). */
export function isOwnVm(vm: Pick<VmResource, 'name' | 'tags'>, name: string, run?: string): boolean {
  const tags = tagsOf(vm);
  return vm.name === name && tags.includes(LLMGW_TAG) && (run === undefined || tags.includes(run));
}

/** How a VM holding a VMID is named in messages. */
export function describeVm(vm: VmResource): string {
  return `VM ${vm.vmid}${vm.name ? ` "${vm.name}"` : ''} on node ${vm.node} (${vm.status}${vm.tags ? `, tags ${vm.tags}` : ''})`;
}

/** `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:` → its parts (the node is where to poll it). */
export function parseUpid(upid: string): { node: string; type: string; id: string; user: string } {
  const m = /^UPID:([^:]+):[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:[0-9A-Fa-f]{8}:([^:]*):([^:]*):([^:]*):$/.exec(upid);
  if (!m)
    throw new LlmgwError(
      'LLMGW_PROXMOX_FAILED',
      `Proxmox returned ${JSON.stringify(upid)} where a task id (UPID:…) was expected`,
    );
  return { node: m[1] as string, type: m[2] as string, id: m[3] as string, user: m[4] as string };
}

/** A task's end: OK and `WARNINGS: n` are success; any other exit status is the error text. */
export function taskSucceeded(exitstatus: string | undefined): boolean {
  return exitstatus === 'OK' || /^WARNINGS: \d+$/.test(exitstatus ?? '');
}

/** A failed call, read from proxmox-api's message (`POST <url> return Error 500 <reason>: <body json>`). */
export interface PveCallError {
  method: string;
  url: string;
  status: number | null;
  /** Proxmox's message (its HTTP reason phrase), with the parameter errors of a 400 */
  reason: string;
}

export function parsePveError(err: unknown): PveCallError {
  const msg = err instanceof Error ? err.message : String(err);
  // The reason may hold colons (a volid, "import failed: …"): the body is what follows the last ": " before JSON.
  const m =
    /^(GET|POST|PUT|DELETE) (\S+) (?:return Error|connection failed with) (\d{3}) (.*?)(?:(?: return)?: ((?:\{|\[|null\b).*))?$/s.exec(
      msg,
    );
  if (!m) {
    const net = /^FaILED to call (\w+) (\S+)(?: cause by:(.*))?$/s.exec(msg);
    if (net)
      return {
        method: net[1] as string,
        url: net[2] as string,
        status: null,
        reason: net[3] ? `connection failed: ${net[3]}` : 'connection failed',
      };
    return { method: '', url: '', status: null, reason: msg };
  }
  let reason = (m[4] as string).trim();
  try {
    const body = JSON.parse(m[5] ?? 'null') as { errors?: Record<string, string> | string; message?: string } | null;
    if (body && typeof body.errors === 'object' && body.errors)
      reason += ` (${Object.entries(body.errors)
        .map(([k, v]) => `${k}: ${String(v).trim()}`)
        .join('; ')})`;
    else if (body?.message && !reason) reason = body.message.trim();
  } catch {
    /* not JSON: the reason alone */
  }
  return { method: m[1] as string, url: m[2] as string, status: Number(m[3]), reason };
}

/** What kind of refusal an error is, for the retry decisions. */
export function classifyPve(reason: string): 'exists' | 'lock-timeout' | 'locked' | 'missing' | 'auth' | 'other' {
  if (/already exists/i.test(reason)) return 'exists';
  if (/can't lock file .* got timeout/i.test(reason)) return 'lock-timeout';
  if (/VM is locked/i.test(reason)) return 'locked';
  if (/does not exist/i.test(reason)) return 'missing';
  if (/authentication failure|permission denied|no such user|invalid token/i.test(reason)) return 'auth';
  return 'other';
}

/** The size in GiB of a disk from its config line (`local-lvm:vm-144-disk-0,iothread=1,size=2G`); null when absent. */
export function diskSizeGiB(line: string | undefined): number | null {
  const m = /(?:^|,)size=(\d+(?:\.\d+)?)([KMGT])?(?:,|$)/.exec(line ?? '');
  if (!m) return null;
  const n = Number(m[1]);
  // No unit: bytes (pve-common's format_size writes a size that is no whole KiB so).
  const unit = { B: 1 / 2 ** 30, K: 1 / (1024 * 1024), M: 1 / 1024, G: 1, T: 1024 }[
    (m[2] ?? 'B') as 'B' | 'K' | 'M' | 'G' | 'T'
  ];
  return n * unit;
}

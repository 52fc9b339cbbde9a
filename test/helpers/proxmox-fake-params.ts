/**
 * The parameter checks of the Proxmox VE fake (test/helpers/proxmox-fake.ts): what qemu-server's create and config
 * calls verify for the keys llmgw sends, with PVE's texts where its sources give them (JSONSchema: 400 "Parameter
 * verification failed." with `errors: {param: msg}`; handler dies: 500 with the message as the reason phrase).
 */

/** A PVE API error: the HTTP status, the message (the reason phrase), and per-parameter errors for a 400. */
export class PveError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errors?: Record<string, string>,
  ) {
    super(message);
  }
}

/** Request parameters as they arrive: repeated keys become arrays. */
export type Params = Record<string, string | string[]>;

/** 400 "Parameter verification failed." with `errors`. */
export const paramError = (errors: Record<string, string>): PveError =>
  new PveError(400, 'Parameter verification failed.', errors);

/** A parameter's single value (the last one, were it repeated). */
export const one = (p: Params, k: string): string | undefined => {
  const v = p[k];
  return Array.isArray(v) ? v[v.length - 1] : v;
};

/** Keys the fake's create and config calls accept; anything else is "not defined in schema", as PVE says. */
const VM_KEYS = new Set([
  'vmid',
  'name',
  'cores',
  'sockets',
  'memory',
  'cpu',
  'scsihw',
  'scsi0',
  'scsi1',
  'virtio0',
  'ide2',
  'boot',
  'net0',
  'serial0',
  'vga',
  'agent',
  'ostype',
  'ciuser',
  'cipassword',
  'sshkeys',
  'ipconfig0',
  'nameserver',
  'searchdomain',
  'ciupgrade',
  'tags',
  'description',
  'onboot',
  'numa',
  'machine',
  'bios',
  'start',
]);
/** CPU models qemu-server knows built in (CPUConfig.pm), the ones llmgw could name. */
const CPU_MODELS = new Set([
  'host',
  'max',
  'kvm64',
  'kvm32',
  'qemu64',
  'qemu32',
  'x86-64-v2',
  'x86-64-v2-AES',
  'x86-64-v3',
  'x86-64-v4',
  'Broadwell',
  'Cascadelake-Server',
  'EPYC',
  'EPYC-Rome',
  'EPYC-Milan',
  'Haswell',
  'Icelake-Server',
  'IvyBridge',
  'SandyBridge',
  'Skylake-Server',
]);
const DNS_NAME = /^(([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)\.)*([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;
const URLENCODED = /^[-%a-zA-Z0-9_.!~*'()]*$/;
const TAG = /^[a-z0-9_][a-z0-9_\-+.]*$/i;
const SSH_KEY =
  /^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com) [A-Za-z0-9+/]+={0,3}( .*)?$/;

/** A drive's property string: `<volume>` then `key=value`s. */
export function parseDrive(s: string): { volume: string; opts: Map<string, string> } {
  const [volume = '', ...rest] = s.split(',');
  const opts = new Map<string, string>();
  for (const kv of rest) {
    const i = kv.indexOf('=');
    opts.set(i < 0 ? kv : kv.slice(0, i), i < 0 ? '' : kv.slice(i + 1));
  }
  return { volume, opts };
}

/** The cpu property's model (`[cputype=]<model>,flags=…`); PVE's default when there is none is kvm64 (CPUConfig.pm). */
export function cpuModel(cpu: string | undefined): string {
  if (!cpu) return 'kvm64';
  const first = cpu.split(',')[0] ?? '';
  return first.startsWith('cputype=') ? first.slice('cputype='.length) : first;
}

/** The decoded keys of a stored `sshkeys` value (PVE stores it URL-encoded). */
export const decodeSshKeys = (stored: string | undefined): string[] =>
  stored
    ? decodeURIComponent(stored)
        .split('\n')
        .map((l) => l.trim())
        .filter(Boolean)
    : [];

/** The address part of `ipconfig0`'s `ip=A/P` (undefined for dhcp or none). */
export function ipOf(ipconfig: string | undefined): string | undefined {
  const ip = ipconfig
    ?.split(',')
    .find((kv) => kv.startsWith('ip='))
    ?.slice(3);
  return ip && ip !== 'dhcp' ? ip.split('/')[0] : undefined;
}

/** Checks create (`create`) or config-update parameters the way PVE's schema does; returns the values to store. */
export function checkVmParams(p: Params, create: boolean): Record<string, string> {
  const errors: Record<string, string> = {};
  const out: Record<string, string> = {};
  const allowed = create ? VM_KEYS : new Set([...VM_KEYS, 'delete', 'digest', 'revert', 'skiplock']);
  for (const k of Object.keys(p)) {
    if (!allowed.has(k) || (!create && k === 'vmid'))
      errors[k] = 'property is not defined in schema and the schema does not allow additional properties';
    else if (Array.isArray(p[k])) errors[k] = `type check ('string') failed - got ARRAY`;
    else out[k] = p[k];
  }
  const int = (k: string, min: number): void => {
    const v = out[k];
    if (v === undefined) return;
    if (!/^-?\d+$/.test(v)) errors[k] = `type check ('integer') failed - got '${v}'`;
    else if (Number(v) < min) errors[k] = `value must have a minimum value of ${min}`;
  };
  const bool = (k: string): void => {
    if (out[k] !== undefined && !/^(0|1|true|false|yes|no|on|off)$/i.test(out[k]))
      errors[k] = `type check ('boolean') failed - got '${out[k]}'`;
  };
  if (create && out.vmid === undefined) errors.vmid = 'property is missing and it is not optional';
  int('vmid', 100);
  int('cores', 1);
  int('sockets', 1);
  if (out.memory !== undefined) {
    const m = out.memory.replace(/^current=/, '');
    if (!/^\d+$/.test(m)) errors.memory = `invalid format - type check ('integer') failed - got '${m}'`;
    else if (Number(m) < 16) errors.memory = 'invalid format - value must have a minimum value of 16';
  }
  for (const k of ['ciupgrade', 'onboot', 'numa', 'start']) bool(k);
  if (out.name !== undefined && !DNS_NAME.test(out.name))
    errors.name = 'invalid format - value does not look like a valid DNS name';
  if (out.cpu !== undefined) {
    const model = cpuModel(out.cpu);
    if (!model.startsWith('custom-') && !CPU_MODELS.has(model))
      errors.cpu = `Built-in cputype '${model}' is not defined (missing 'custom-' prefix?)`;
  }
  if (out.net0 !== undefined && !/^(virtio|e1000|rtl8139|vmxnet3)(=[0-9A-Fa-f:]{17})?(,|$)/.test(out.net0))
    errors.net0 = 'invalid format - format error\nnet0.model: property is missing and it is not optional';
  if (out.ipconfig0 !== undefined) {
    for (const kv of out.ipconfig0.split(',')) {
      const [k = '', v = ''] = kv.split('=');
      const ok =
        k === 'ip'
          ? v === 'dhcp' || (/^[\d.]+\/\d+$/.test(v) && IPV4.test(v.split('/')[0]!) && Number(v.split('/')[1]) <= 32)
          : k === 'gw'
            ? IPV4.test(v)
            : ['ip6', 'gw6'].includes(k);
      if (!ok)
        errors.ipconfig0 = `invalid format - format error\nipconfig0.${k}: invalid format - value does not look like a valid network configuration`;
    }
  }
  if (out.nameserver !== undefined && !out.nameserver.split(/[ ,;]+/).every((a) => IPV4.test(a)))
    errors.nameserver = `invalid format - value does not look like a valid IP address: ${out.nameserver}`;
  if (out.tags !== undefined) {
    const tags = out.tags.split(/[;, ]+/).filter(Boolean);
    const bad = tags.find((t) => !TAG.test(t));
    if (bad !== undefined) errors.tags = `invalid format - invalid characters in tag '${bad}'`;
    // PVE stores the unique tags ';'-separated (GuestHelpers::get_unique_tags).
    else out.tags = [...new Set(tags)].join(';');
  }
  if (out.sshkeys !== undefined) {
    // Format 'urlencoded' (JSONSchema.pm): exactly encodeURIComponent's safe set; then the handler unescapes once.
    if (!URLENCODED.test(out.sshkeys)) errors.sshkeys = `invalid format - invalid urlencoded string: ${out.sshkeys}`;
    else {
      let keys: string[] = [];
      try {
        keys = decodeSshKeys(out.sshkeys);
      } catch {
        errors.sshkeys = `invalid format - invalid urlencoded string: ${out.sshkeys}`;
      }
      const bad = keys.find((k) => !SSH_KEY.test(k));
      if (bad !== undefined) errors.sshkeys = `SSH public key validation error: unable to parse key '${bad}'`;
    }
  }
  for (const k of ['scsi0', 'scsi1', 'virtio0']) {
    const v = out[k];
    if (v === undefined) continue;
    const d = parseDrive(v);
    if (!/^[a-z][a-z0-9\-_.]*:/i.test(d.volume) && !d.volume.startsWith('/'))
      errors[k] = `invalid format - format error\n${k}.file: invalid format - unable to parse volume ID '${d.volume}'`;
    else if (d.opts.has('import-from') && !/^[a-z][a-z0-9\-_.]*:0$/i.test(d.volume))
      errors[k] = `'import-from' requires special syntax - use <storage ID>:0,import-from=<source>`;
  }
  if (
    out.ide2 !== undefined &&
    !/^[a-z][a-z0-9\-_.]*:(cloudinit|iso\/[^,]+|none)(,|$)|^none(,|$)|^cdrom(,|$)/i.test(out.ide2)
  )
    errors.ide2 = `invalid format - format error\nide2.file: invalid format - unable to parse volume ID '${out.ide2}'`;
  if (Object.keys(errors).length > 0) throw paramError(errors);
  return out;
}

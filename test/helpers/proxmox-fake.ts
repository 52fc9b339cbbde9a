/**
 * A fake Proxmox VE 8 API for tests: one node ('pve' unless told), over real HTTPS, that llmgw's provisioning
 * (proxmox-api 1.1.1) talks to exactly as to a real host. What it models, after qemu-server / pve-manager /
 * pve-http-server as docs/…/proxmox-ssh-pki notes §A describe them:
 *
 * - Transport: `https://127.0.0.1:PORT/api2/json/...`, a CA of its own (`caPem`/`caFile`; clients verify against it)
 *   and a server certificate for 127.0.0.1 and localhost. Responses `application/json;charset=UTF-8` `{data}`;
 *   errors: the HTTP status with PVE's message as the reason phrase, body `{data: null, message, errors?}` (400
 *   "Parameter verification failed." with `errors: {param: msg}`; handler failures 500). Unknown paths: 501.
 * - Auth: only `Authorization: PVEAPIToken=<tokenId>=<tokenSecret>`; none → 401 "No ticket", anything else →
 *   401 "authentication failure" (PVE's 3 s delay on failures is left out).
 * - Parameters: POST/PUT form-encoded bodies, GET/DELETE query strings, as proxmox-api sends them (booleans 1/0,
 *   arrays as repeated keys); checked per test/helpers/proxmox-fake-params.ts (unknown keys refused, vmid, name,
 *   cores, memory, cpu models, scsi0 import-from syntax, ide2, net0, ipconfig0, nameserver, tags, sshkeys's
 *   urlencoded format then one URL-decode and a key check).
 * - `GET /version`, `/nodes`, `/cluster/nextid[?vmid]` (lowest free id ≥ 100, not reserved; 400 errors.vmid "VM N
 *   already exists"), `/cluster/resources[?type]`, `/nodes/{n}/qemu`.
 * - Create `POST /nodes/{n}/qemu`: storages and import volids checked (absolute path → "Only root can pass
 *   arbitrary filesystem paths."), then the VMID reserved at once (config `{lock: create}`, no name yet) and a
 *   `qmcreate` UPID returned; a used vmid → 500 "unable to create VM N - VM N already exists on node 'pve'". The
 *   task takes `taskMs`, writes the full config (scsi0 `<st>:vm-N-disk-0,…,size=2G`, ide2 `<st>:vm-N-cloudinit,
 *   media=cdrom`, meta, smbios1, vmgenid; no `cpu` key when none was sent: the model is then kvm64) and drops the
 *   lock; a failed task removes the VM. Imports hold the target storage's lock: one that overlaps another on the
 *   same storage fails "unable to create VM N - can't lock file '/var/lock/pve-manager/pve-storage-<st>' - got
 *   timeout" (`maxConcurrentImports()` records the overlap).
 * - Tasks: real UPID format, `tasks/{upid}/status` and `/log?start&limit` (ending "TASK OK" / "TASK ERROR: …");
 *   unknown UPID → 400 "no such task".
 * - `GET/PUT …/{vmid}/config` (`delete`, `digest`; locked → 500 "VM is locked (create)"), `PUT …/resize` (grow
 *   only, a `resize` task), `POST …/status/start|stop` (`qmstart`/`qmstop`), `GET …/status/current`, `DELETE
 *   …/{vmid}` (`qmdestroy`; running → 500 "VM N is running - destroy failed"); a missing VM → 500 "Configuration
 *   file 'nodes/<n>/qemu-server/N.conf' does not exist".
 * - A started VM is a real test host (test/helpers/test-host.ts): hostname = VM name, address = ipconfig0's ip
 *   (else the network's next), root's authorized_keys = the decoded sshkeys, sshd up `bootMs` after the start; its
 *   /proc/cpuinfo is the real machine's for cpu `host`/`max`/named models, kvm64's flags (`kvm64Cpuinfo`) for
 *   kvm64/qemu64 (and no cpu).
 * - Faults (`inject`), each used once or `times`: lock-timeout and drop-response on a method + path, task-fail by
 *   task type. Every call is in `requests`.
 *
 * NOT modelled: permissions/ACLs and privileges beyond the one token (no tickets, CSRF, users, realms), HA,
 * clusters of several nodes (another node name → 500 hostname lookup), pools, snapshots, clones, templates,
 * backups, migration; real disks (an import is a size in the config, 2G; no qemu-img, no volumes to list) and
 * storage content APIs (download-url, upload); the guest agent (its calls are 501); cloud-init beyond hostname,
 * keys and address (no ciuser/upgrade/nameserver effect, no instance-id, no regenerated host keys); pending
 * changes (config updates apply at once, hot-plug or not); firewall, SDN, consoles; CPU models other than
 * kvm64/qemu64 showing their own flags; exact texts of the less used validation errors (best effort).
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';
import { initCa, issueServerCertificate } from '../../lib/pki';
import {
  checkVmParams,
  cpuModel,
  decodeSshKeys,
  ipOf,
  one,
  paramError,
  parseDrive,
  PveError,
  type Params,
} from './proxmox-fake-params';
import type { TestHost, TestNetwork } from './test-host';

export { PveError } from './proxmox-fake-params';

/** A VM as the fake holds it. */
export interface FakeVm {
  vmid: number;
  name?: string;
  /** ';'-separated, as PVE stores them */
  tags?: string;
  /** every key as stored (sshkeys URL-encoded, as PVE keeps it) */
  config: Record<string, string>;
  /** the CPU model in effect: config.cpu's, or the API's default kvm64 */
  cpuType: string;
  status: 'running' | 'stopped';
  lock?: string;
  /** the test host it runs as, while running */
  host?: TestHost;
}

/** A fault for the next matching call or task (`times`, default 1). */
export type Fault =
  | { kind: 'lock-timeout'; method: string; path: string; times?: number }
  | { kind: 'drop-response'; method: string; path: string; times?: number }
  | { kind: 'task-fail'; type: string; text: string; times?: number };

/** One API call: method, path below /api2/json, parameters (body or query), the status answered (0: dropped). */
export interface FakeRequest {
  method: string;
  path: string;
  body: Params;
  status: number;
}

/** A running fake. */
export interface ProxmoxFake {
  url: string;
  host: string;
  port: number;
  caPem: string;
  caFile: string;
  tokenId: string;
  tokenSecret: string;
  node: string;
  /** a fetch that verifies TLS against `caPem` (what proxmox-api's `fetch` option wants) */
  fetch: typeof undiciFetch;
  vms(): FakeVm[];
  requests: FakeRequest[];
  inject(f: Fault): void;
  /** the highest number of qmcreate imports that overlapped on one storage */
  maxConcurrentImports(): number;
  close(): Promise<void>;
}

export interface ProxmoxFakeOptions {
  network: TestNetwork;
  /** default 'pve' */
  node?: string;
  /** how long a qmcreate (and a qmdestroy) runs; default 300 */
  taskMs?: number;
  /** how long a started VM takes until its sshd listens; default 1500 */
  bootMs?: number;
  /** import volids that exist; default ['local:import/debian-12-genericcloud-amd64.qcow2'] */
  images?: string[];
  /** default ['local', 'local-lvm'] */
  storages?: string[];
  /** what the cloud image holds beyond sshd (a driver's nvidia-smi, say): run on each VM's machine once it is up */
  onBoot?: (host: TestHost, vm: FakeVm) => Promise<void>;
}

/** Flags kvm64 lacks that a modern host has (SSSE3 and later, AVX*, FMA, F16C, …). */
const NOT_KVM64 =
  /^(avx.*|amx.*|fma|f16c|ssse3|sse4_1|sse4_2|sse4a|popcnt|aes|pclmulqdq|movbe|xsave.*|bmi1|bmi2|adx|sha_ni|vaes|vpclmulqdq|gfni|rdrand|rdseed|erms|fsgsbase|invpcid|smep|smap|abm|lzcnt|hle|rtm|mpx|clwb|clflushopt|x2apic|tsc_deadline_timer|pcid|pku|ospke|umip|la57)$/;

/** `real` (a /proc/cpuinfo) as a kvm64 guest sees it: those flags gone from each `flags` line, QEMU's model name. */
export function kvm64Cpuinfo(real: string): string {
  return real
    .split('\n')
    .map((l) => {
      const m = /^(flags\s*:\s*)(.*)$/.exec(l);
      if (m)
        return (
          m[1]! +
          m[2]!
            .split(' ')
            .filter((f) => f && !NOT_KVM64.test(f))
            .join(' ')
        );
      return /^model name\s*:/.test(l) ? l.replace(/:.*$/, ': Common KVM processor') : l;
    })
    .join('\n');
}

/** A fetch verifying TLS against `caPem` only (no switching verification off). */
export function fetchTrusting(caPem: string): typeof undiciFetch {
  const dispatcher = new Agent({ connect: { ca: caPem } });
  return ((url: Parameters<typeof undiciFetch>[0], init?: Parameters<typeof undiciFetch>[1]) =>
    undiciFetch(url, { ...init, dispatcher })) as typeof undiciFetch;
}

interface Task {
  upid: string;
  node: string;
  pid: number;
  pstart: number;
  starttime: number;
  type: string;
  id: string;
  user: string;
  log: string[];
  exitstatus?: string;
}
interface Vm {
  vmid: number;
  config: Record<string, string>;
  running: boolean;
  host?: TestHost;
  starting?: boolean;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const UNITS: [string, number][] = [
  ['T', 2 ** 40],
  ['G', 2 ** 30],
  ['M', 2 ** 20],
  ['K', 2 ** 10],
];
/** PVE's size notation: the largest unit that divides it. */
const formatSize = (bytes: number): string => {
  for (const [u, n] of UNITS) if (bytes % n === 0) return `${bytes / n}${u}`;
  return String(bytes);
};
const parseSize = (s: string): number => {
  const m = /^(\d+(?:\.\d+)?)([KMGT])?$/.exec(s);
  return m ? Math.round(Number(m[1]) * (UNITS.find(([u]) => u === m[2])?.[1] ?? 1)) : NaN;
};

/** The config qmcreate writes: disks allocated (an import at the image's 2G), the cloud-init drive, meta/smbios1/vmgenid. */
function createdConfig(vmid: number, params: Record<string, string>, log: (l: string) => void): Record<string, string> {
  const config: Record<string, string> = {};
  for (const [k, v] of Object.entries(params)) if (k !== 'vmid' && k !== 'start') config[k] = v;
  let disk = 0;
  for (const k of ['scsi0', 'scsi1', 'virtio0']) {
    if (config[k] === undefined) continue;
    const d = parseDrive(config[k]);
    const [st, size = '0'] = d.volume.split(':');
    const from = d.opts.get('import-from');
    d.opts.delete('import-from');
    if (from) log(`importing disk '${from}' to VM ${vmid} ...`);
    if (from) log('transferred 2.0 GiB of 2.0 GiB (100.00%)');
    d.opts.set('size', from ? '2G' : `${size}G`);
    config[k] = [`${st}:vm-${vmid}-disk-${disk++}`, ...[...d.opts].map(([a, b]) => (b === '' ? a : `${a}=${b}`))].join(
      ',',
    );
    log(`${k}: successfully created disk '${config[k]}'`);
  }
  if (config.ide2?.endsWith(':cloudinit'))
    config.ide2 = `${config.ide2.split(':')[0]}:vm-${vmid}-cloudinit,media=cdrom`;
  return {
    ...config,
    meta: `creation-qemu=9.2.0,ctime=${Math.floor(Date.now() / 1000)}`,
    smbios1: `uuid=${randomUUID()}`,
    vmgenid: randomUUID(),
  };
}

/** Starts the fake on 127.0.0.1 (a free port). */
export async function startProxmoxFake(o: ProxmoxFakeOptions): Promise<ProxmoxFake> {
  const node = o.node ?? 'pve';
  const taskMs = o.taskMs ?? 300;
  const images = new Set(o.images ?? ['local:import/debian-12-genericcloud-amd64.qcow2']);
  const storages = new Set(o.storages ?? ['local', 'local-lvm']);
  const tokenId = 'llmgw@pve!provision';
  const tokenSecret = randomUUID();
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-pve-fake-'));
  const ca = initCa(join(dir, 'ca'), { keyBits: 2048, commonName: 'Proxmox Virtual Environment' });
  const cert = issueServerCertificate(ca, node, ['127.0.0.1', 'localhost']);
  const caFile = join(dir, 'pve-root-ca.pem');
  writeFileSync(caFile, ca.certPem);

  const vms = new Map<number, Vm>();
  const tasks = new Map<string, Task>();
  const running = new Set<Promise<void>>();
  const faults: (Fault & { left: number })[] = [];
  const requests: FakeRequest[] = [];
  const imports = new Map<string, number>();
  const lockHolder = new Map<string, number>();
  let maxImports = 0;
  let pid = 10_000 + Math.floor(Math.random() * 50_000);
  const pstart = 1_000_000 + Math.floor(Math.random() * 1_000_000);

  const takeFault = (match: (f: Fault) => boolean): Fault | undefined => {
    const i = faults.findIndex(match);
    if (i < 0) return undefined;
    const f = faults[i]!;
    if (--f.left <= 0) faults.splice(i, 1);
    return f;
  };
  const missing = (vmid: number): PveError =>
    new PveError(500, `Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
  const vmOf = (vmid: number): Vm => {
    const vm = vms.get(vmid);
    if (!vm) throw missing(vmid);
    return vm;
  };
  const checkUnlocked = (vm: Vm): void => {
    if (vm.config.lock) throw new PveError(500, `VM is locked (${vm.config.lock})`);
  };

  /** Runs `work` as a worker task; a `task-fail` fault for its type ends it with that text instead. */
  const task = (
    type: string,
    id: string,
    work: (log: (l: string) => void) => Promise<void>,
    onFail?: () => Promise<void>,
    ms = 0,
  ): string => {
    const starttime = Math.floor(Date.now() / 1000);
    const hex = (n: number): string => n.toString(16).toUpperCase().padStart(8, '0');
    const t: Task = {
      upid: `UPID:${node}:${hex(++pid)}:${hex(pstart)}:${hex(starttime)}:${type}:${id}:${tokenId}:`,
      node,
      pid,
      pstart,
      starttime,
      type,
      id,
      user: tokenId,
      log: [],
    };
    tasks.set(t.upid, t);
    const fault = takeFault((f) => f.kind === 'task-fail' && f.type === type);
    const p = (async () => {
      try {
        if (fault?.kind === 'task-fail') {
          await sleep(ms);
          throw new Error(fault.text);
        }
        await work((l) => t.log.push(l));
        t.log.push('TASK OK');
        t.exitstatus = 'OK';
      } catch (err) {
        await onFail?.().catch(() => undefined);
        const msg = (err instanceof Error ? err.message : String(err)).split('\n')[0]!;
        t.log.push(`TASK ERROR: ${msg}`);
        t.exitstatus = msg;
      }
    })();
    running.add(p);
    void p.finally(() => running.delete(p));
    return t.upid;
  };

  const vmView = (vm: Vm): FakeVm => ({
    vmid: vm.vmid,
    config: { ...vm.config },
    cpuType: cpuModel(vm.config.cpu),
    status: vm.running ? 'running' : 'stopped',
    ...(vm.config.name !== undefined && { name: vm.config.name }),
    ...(vm.config.tags !== undefined && { tags: vm.config.tags }),
    ...(vm.config.lock !== undefined && { lock: vm.config.lock }),
    ...(vm.host && { host: vm.host }),
  });

  const create = (p: Params): string => {
    const params = checkVmParams(p, true);
    const vmid = Number(params.vmid);
    // Storage access (qemu-server's $check_storage_access): storages exist, an import names an import volume.
    let importFrom: { storage: string; volid: string } | undefined;
    for (const k of ['scsi0', 'scsi1', 'virtio0', 'ide2']) {
      if (params[k] === undefined) continue;
      const d = parseDrive(params[k]);
      const st = d.volume.split(':')[0]!;
      if (d.volume !== 'none' && !d.volume.startsWith('/') && !storages.has(st))
        throw new PveError(500, `storage '${st}' does not exist`);
      const src = d.opts.get('import-from');
      if (src === undefined) continue;
      if (src.startsWith('/')) throw new PveError(500, 'Only root can pass arbitrary filesystem paths.');
      const [srcSt = '', srcName = ''] = src.split(':');
      if (!storages.has(srcSt)) throw new PveError(500, `storage '${srcSt}' does not exist`);
      const type = srcName.split('/')[0];
      if (type !== 'import' && type !== 'images')
        throw paramError({
          [k]: `invalid format - format error\n${k}.import-from: source volume '${src}' has wrong type '${type}' - needs to be 'images' or 'import'`,
        });
      if (!images.has(src)) throw new PveError(500, `volume '${src}' does not exist`);
      importFrom = { storage: st, volid: src };
    }
    if (vms.has(vmid))
      throw new PveError(500, `unable to create VM ${vmid} - VM ${vmid} already exists on node '${node}'`);
    vms.set(vmid, { vmid, config: { lock: 'create' }, running: false });
    return task(
      'qmcreate',
      String(vmid),
      async (log) => {
        const st = importFrom?.storage;
        // The first import on a storage holds its lock for the whole copy; one that overlaps it waits and times out.
        if (st !== undefined && !lockHolder.has(st)) lockHolder.set(st, vmid);
        const holder = st !== undefined && lockHolder.get(st) === vmid;
        if (st !== undefined) {
          imports.set(st, (imports.get(st) ?? 0) + 1);
          maxImports = Math.max(maxImports, imports.get(st)!);
        }
        try {
          await sleep(taskMs);
          if (st !== undefined && !holder)
            throw new Error(
              `unable to create VM ${vmid} - can't lock file '/var/lock/pve-manager/pve-storage-${st}' - got timeout`,
            );
          vms.set(vmid, { vmid, running: false, config: createdConfig(vmid, params, log) });
        } finally {
          if (st !== undefined) imports.set(st, imports.get(st)! - 1);
          if (holder) lockHolder.delete(st);
        }
      },
      async () => void vms.delete(vmid),
      taskMs,
    );
  };

  const start = (vmid: number): string => {
    const vm = vmOf(vmid);
    return task('qmstart', String(vmid), async () => {
      checkUnlocked(vm);
      if (vm.running || vm.starting) throw new Error(`VM ${vmid} already running`);
      vm.starting = true;
      try {
        const real = readFileSync('/proc/cpuinfo', 'utf8');
        const model = cpuModel(vm.config.cpu);
        const address = ipOf(vm.config.ipconfig0);
        vm.host = await o.network.startHost({
          nodeId: vm.config.name ?? `VM${vmid}`,
          ...(address && { address }),
          authorizedKeys: decodeSshKeys(vm.config.sshkeys),
          sshdAfterMs: o.bootMs ?? 1500,
          cpuinfo: model === 'kvm64' || model === 'qemu64' ? kvm64Cpuinfo(real) : real,
        });
        vm.running = true;
        await o.onBoot?.(vm.host, vmView(vm));
      } finally {
        vm.starting = false;
      }
    });
  };
  const stop = (vmid: number): string => {
    const vm = vmOf(vmid);
    return task('qmstop', String(vmid), async () => {
      checkUnlocked(vm);
      const host = vm.host;
      vm.host = undefined;
      vm.running = false;
      await host?.stop();
    });
  };
  const destroy = (vmid: number, p: Params): string => {
    for (const k of Object.keys(p))
      if (!['purge', 'destroy-unreferenced-disks', 'skiplock'].includes(k))
        throw paramError({
          [k]: 'property is not defined in schema and the schema does not allow additional properties',
        });
    const vm = vmOf(vmid);
    if (vm.running || vm.starting) throw new PveError(500, `VM ${vmid} is running - destroy failed`);
    return task('qmdestroy', String(vmid), async () => {
      checkUnlocked(vm);
      await sleep(taskMs / 3);
      vms.delete(vmid);
    });
  };
  const digestOf = (vm: Vm): string => createHash('sha1').update(JSON.stringify(vm.config)).digest('hex');
  const putConfig = (vmid: number, p: Params): null => {
    const vm = vmOf(vmid);
    checkUnlocked(vm);
    const { delete: del, digest, revert: _r, skiplock: _s, ...set } = checkVmParams(p, false);
    if (digest !== undefined && digest !== digestOf(vm))
      throw new PveError(500, 'detected modified configuration - file changed by other user? Try again.');
    for (const k of (del ?? '').split(/[,; ]+/).filter(Boolean)) delete vm.config[k];
    Object.assign(vm.config, set);
    return null;
  };
  const resize = (vmid: number, p: Params): string => {
    const disk = one(p, 'disk');
    const size = one(p, 'size');
    const errors: Record<string, string> = {};
    if (disk === undefined) errors.disk = 'property is missing and it is not optional';
    if (size === undefined) errors.size = 'property is missing and it is not optional';
    else if (!/^\+?\d+(\.\d+)?[KMGT]?$/.test(size)) errors.size = 'value does not match the regex pattern';
    if (Object.keys(errors).length > 0) throw paramError(errors);
    const vm = vmOf(vmid);
    checkUnlocked(vm);
    const drive = vm.config[disk!];
    if (drive === undefined) throw new PveError(500, `disk '${disk}' does not exist`);
    const d = parseDrive(drive);
    const current = parseSize(d.opts.get('size') ?? '0');
    const wanted = size!.startsWith('+') ? current + parseSize(size!.slice(1)) : parseSize(size!);
    if (wanted < current) throw new PveError(500, 'shrinking disks is not supported');
    return task('resize', String(vmid), async (log) => {
      d.opts.set('size', formatSize(wanted));
      vm.config[disk!] = [d.volume, ...[...d.opts].map(([a, b]) => (b === '' ? a : `${a}=${b}`))].join(',');
      log(`Image resized to ${formatSize(wanted)}.`);
    });
  };
  const nextid = (p: Params): string => {
    const want = one(p, 'vmid');
    if (want !== undefined) {
      if (!/^\d+$/.test(want) || Number(want) < 100)
        throw paramError({ vmid: 'value must have a minimum value of 100' });
      if (vms.has(Number(want))) throw paramError({ vmid: `VM ${want} already exists` });
      return want;
    }
    let id = 100;
    while (vms.has(id)) id++;
    return String(id);
  };
  const resource = (vm: Vm): Record<string, unknown> => ({
    id: `qemu/${vm.vmid}`,
    type: 'qemu',
    vmid: vm.vmid,
    node,
    status: vm.running ? 'running' : 'stopped',
    template: 0,
    ...(vm.config.name !== undefined && { name: vm.config.name }),
    ...(vm.config.tags !== undefined && { tags: vm.config.tags }),
    ...(vm.config.lock !== undefined && { lock: vm.config.lock }),
    maxcpu: Number(vm.config.cores ?? 1) * Number(vm.config.sockets ?? 1),
    maxmem: Number((vm.config.memory ?? '512').replace(/^current=/, '')) * 2 ** 20,
    uptime: 0,
    cpu: 0,
    mem: 0,
    disk: 0,
  });
  const taskOf = (upid: string): Task => {
    const t = tasks.get(upid);
    if (!t) throw paramError({ upid: 'no such task' });
    return t;
  };

  /** The API: a method and a path below /api2/json to a result (or a PveError). */
  const route = (method: string, path: string, p: Params): unknown => {
    const seg = path
      .split('/')
      .filter(Boolean)
      .map((x) => decodeURIComponent(x));
    const at = (...want: string[]): boolean =>
      seg.length === want.length && want.every((w, i) => w === '*' || w === seg[i]);
    const is = (m: string, ...want: string[]): boolean => method === m && at(...want);
    if (is('GET', 'version')) return { version: '8.4.1', release: '8.4', repoid: '2a5fa54a8503f96d' };
    if (is('GET', 'nodes')) return [{ node, status: 'online', type: 'node', id: `node/${node}` }];
    if (is('GET', 'cluster', 'nextid')) return nextid(p);
    if (is('GET', 'cluster', 'resources')) {
      const type = one(p, 'type');
      const all = [
        ...[...vms.values()].map(resource),
        { id: `node/${node}`, type: 'node', node, status: 'online' },
        ...[...storages].map((s) => ({
          id: `storage/${node}/${s}`,
          type: 'storage',
          node,
          storage: s,
          status: 'available',
        })),
      ];
      return type === undefined ? all : all.filter((r) => r.type === (type === 'vm' ? 'qemu' : type));
    }
    if (seg[0] === 'nodes' && seg[1] !== undefined && seg[1] !== node) {
      throw new PveError(
        500,
        `hostname lookup '${seg[1]}' failed - failed to get address info for: ${seg[1]}: Name or service not known`,
      );
    }
    if (is('GET', 'nodes', '*', 'tasks', '*', 'status')) {
      const t = taskOf(seg[3]!);
      return {
        upid: t.upid,
        node: t.node,
        pid: t.pid,
        pstart: t.pstart,
        starttime: t.starttime,
        type: t.type,
        id: t.id,
        user: t.user,
        status: t.exitstatus === undefined ? 'running' : 'stopped',
        ...(t.exitstatus !== undefined && { exitstatus: t.exitstatus }),
      };
    }
    if (is('GET', 'nodes', '*', 'tasks', '*', 'log')) {
      const t = taskOf(seg[3]!);
      const from = Number(one(p, 'start') ?? 0);
      const limit = Number(one(p, 'limit') ?? 50);
      const lines = t.log.map((l, i) => ({ n: i + 1, t: l })).slice(from, from + limit);
      return lines.length > 0 || from > 0 ? lines : [{ n: 1, t: 'no content' }];
    }
    if (is('GET', 'nodes', '*', 'qemu'))
      return [...vms.values()].map((vm) => ({ ...resource(vm), id: undefined, type: undefined }));
    if (is('POST', 'nodes', '*', 'qemu')) return create(p);
    const vmid = Number(seg[3]);
    if (seg[0] === 'nodes' && seg[2] === 'qemu' && !/^\d+$/.test(seg[3] ?? ''))
      throw paramError({ vmid: `type check ('integer') failed - got '${seg[3]}'` });
    if (is('GET', 'nodes', '*', 'qemu', '*', 'config')) {
      const vm = vmOf(vmid);
      return { ...vm.config, digest: digestOf(vm) };
    }
    if (is('PUT', 'nodes', '*', 'qemu', '*', 'config')) return putConfig(vmid, p);
    if (is('PUT', 'nodes', '*', 'qemu', '*', 'resize')) return resize(vmid, p);
    if (is('POST', 'nodes', '*', 'qemu', '*', 'status', 'start')) return start(vmid);
    if (is('POST', 'nodes', '*', 'qemu', '*', 'status', 'stop')) return stop(vmid);
    if (is('GET', 'nodes', '*', 'qemu', '*', 'status', 'current')) {
      const vm = vmOf(vmid);
      const r = resource(vm);
      return {
        vmid,
        name: vm.config.name,
        status: r.status,
        qmpstatus: r.status,
        cpus: r.maxcpu,
        maxmem: r.maxmem,
        uptime: 0,
        ha: { managed: 0 },
        ...(vm.config.lock !== undefined && { lock: vm.config.lock }),
      };
    }
    if (is('DELETE', 'nodes', '*', 'qemu', '*')) return destroy(vmid, p);
    throw new PveError(501, `Method '${method} /${seg.join('/')}' not implemented`);
  };

  const send = (res: ServerResponse, status: number, reason: string, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(status, reason.replace(/[\r\n]+/g, ' ').trim(), {
      'Content-Type': 'application/json;charset=UTF-8',
      'Content-Length': Buffer.byteLength(text),
    });
    res.end(text);
  };
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const method = (req.method ?? 'GET').toUpperCase();
    const url = new URL(req.url ?? '/', 'https://localhost');
    const params: Params = {};
    const add = (sp: URLSearchParams): void => {
      for (const [k, v] of sp) {
        const had = params[k];
        params[k] = had === undefined ? v : [...(Array.isArray(had) ? had : [had]), v];
      }
    };
    add(url.searchParams);
    if (method === 'POST' || method === 'PUT') add(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
    const path = url.pathname.replace(/^\/api2\/json(?=\/|$)/, '') || '/';
    const record: FakeRequest = { method, path, body: params, status: 0 };
    requests.push(record);
    const auth = req.headers.authorization;
    if (!url.pathname.startsWith('/api2/json/'))
      return send(res, (record.status = 501), 'Not Implemented', { data: null });
    if (auth === undefined)
      return send(res, (record.status = 401), 'No ticket', { data: null, message: 'No ticket\n' });
    if (auth !== `PVEAPIToken=${tokenId}=${tokenSecret}`)
      return send(res, (record.status = 401), 'authentication failure', {
        data: null,
        message: 'authentication failure\n',
      });
    const onPath = (f: Fault): boolean =>
      f.kind !== 'task-fail' && f.method.toUpperCase() === method && f.path.replace(/^\/api2\/json/, '') === path;
    const lockFault = takeFault((f) => f.kind === 'lock-timeout' && onPath(f));
    const drop = lockFault ? undefined : takeFault((f) => f.kind === 'drop-response' && onPath(f));
    let status = 200;
    let reason = 'OK';
    let body: unknown;
    try {
      if (lockFault)
        throw new PveError(
          500,
          `can't lock file '/var/lock/qemu-server/lock-${/\/qemu\/(\d+)/.exec(path)?.[1] ?? one(params, 'vmid')}.conf' - got timeout`,
        );
      body = { data: route(method, path, params) ?? null };
    } catch (err) {
      const e = err instanceof PveError ? err : new PveError(500, err instanceof Error ? err.message : String(err));
      status = e.status;
      reason = e.message;
      body = { data: null, message: `${e.message}\n`, ...(e.errors && { errors: e.errors }) };
    }
    // Done, but the answer lost on the way: the client sees a reset connection.
    if (drop) return void req.socket.destroy();
    record.status = status;
    send(res, status, reason, body);
  };
  const server: Server = createServer({ key: cert.keyPem, cert: cert.certPem }, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, String(err instanceof Error ? err.message : err), { data: null });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;

  return {
    url: `https://127.0.0.1:${port}`,
    host: '127.0.0.1',
    port,
    caPem: ca.certPem,
    caFile,
    tokenId,
    tokenSecret,
    node,
    fetch: fetchTrusting(ca.certPem),
    vms: () => [...vms.values()].map(vmView),
    requests,
    inject: (f) => void faults.push({ ...f, left: f.times ?? 1 }),
    maxConcurrentImports: () => maxImports,
    async close() {
      await Promise.allSettled([...running]);
      for (const vm of vms.values()) {
        await vm.host?.stop();
        vm.host = undefined;
        vm.running = false;
      }
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * Provisioning's pure parts (lib/proxmox/plan.ts): what llmgw asks Proxmox for and how it reads the answers.
 * Error texts are proxmox-api 1.1.1's (`<METHOD> <url> return Error <status> <reason>: <body json>`) around the
 * reason phrases qemu-server / pve-manager answer with (../shared/notes/proxmox-ssh-pki.md §A).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { provisionInput } from '../../cli/provision-input';
import type { ServerConfig } from '../../config/types';
import { LlmgwError } from '../../lib/errors';
import {
  checkVmid,
  classifyPve,
  createParams,
  defaultVmid,
  describeVm,
  diskSizeGiB,
  encodeSshKeys,
  isOwnVm,
  LLMGW_TAG,
  parseCidr,
  parseDiskGiB,
  parsePveError,
  parseUpid,
  runTag,
  taskSucceeded,
  type VmSpec,
} from '../../lib/proxmox/plan';

/** The error `fn` throws (fails the test when it throws none). */
function thrown(fn: () => unknown): LlmgwError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(LlmgwError);
    return err as LlmgwError;
  }
  throw new Error('expected an error, none was thrown');
}

const ED = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG+x/Yz9Qw== root@ca-host';
const RSA = 'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7+/ab== ops key';

const spec = (over: Partial<VmSpec> = {}): VmSpec => ({
  vmid: 144,
  name: 'gpu-144',
  ip: '10.0.0.144/24',
  gateway: '10.0.0.1',
  nameserver: null,
  cores: 4,
  memoryMiB: 8192,
  diskGiB: 64,
  cpu: 'host',
  image: 'local:import/debian-12-genericcloud-amd64.qcow2',
  storage: 'local-lvm',
  bridge: 'vmbr0',
  sshKeys: [ED],
  ciuser: 'root',
  runTag: 'run-0a1b2c',
  ...over,
});

describe('VMIDs', () => {
  test('the default VMID is the last octet of ADDR/PREFIX', () => {
    expect(defaultVmid('10.0.0.144/24')).toBe(144);
    expect(defaultVmid('192.168.7.100/16')).toBe(100);
    expect(defaultVmid(' 10.0.0.254/24 ')).toBe(254);
  });

  test('an octet below 100 is refused, naming the fix --vmid', () => {
    for (const ip of ['10.0.0.99/24', '10.0.0.5/24', '10.0.0.0/24']) {
      const e = thrown(() => defaultVmid(ip));
      expect(e.code).toBe('LLMGW_BAD_REQUEST');
      expect(e.message).toContain('--vmid N');
      expect(e.message).toContain(`(from ${ip})`);
      expect(e.message).toContain('100 to 999999999');
    }
    expect(thrown(() => defaultVmid('10.0.0.99/24')).message).toContain('but 99 (from');
  });

  test('defaultVmid refuses what is not ADDR/PREFIX', () => {
    expect(thrown(() => defaultVmid('10.0.0.144')).message).toContain(
      '--ip 10.0.0.144: expected an IPv4 address with its prefix length',
    );
  });

  test('checkVmid: whole numbers 100..999999999', () => {
    expect(checkVmid(100)).toBe(100);
    expect(checkVmid(144)).toBe(144);
    expect(checkVmid(999_999_999)).toBe(999_999_999);
    for (const n of [99, 0, -1, 1_000_000_000, 144.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      const e = thrown(() => checkVmid(n));
      expect(e.code).toBe('LLMGW_BAD_REQUEST');
      expect(e.message).toBe(`--vmid ${n}: Proxmox VMIDs are whole numbers from 100 to 999999999`);
    }
  });
});

describe('parseCidr', () => {
  test('address and prefix', () => {
    expect(parseCidr('10.0.0.144/24')).toEqual({ address: '10.0.0.144', prefix: 24 });
    expect(parseCidr('  192.168.1.7/32\n')).toEqual({ address: '192.168.1.7', prefix: 32 });
    expect(parseCidr('10.1.2.3/1')).toEqual({ address: '10.1.2.3', prefix: 1 });
  });

  test.each([
    '10.0.0.144',
    '10.0.0.144/',
    '10.0.0.144/0',
    '10.0.0.144/33',
    '10.0.0.144/024',
    '256.0.0.1/24',
    '10.0.0/24',
    '10.0.0.1.2/24',
    'fd00::1/64',
    'pve.example.net/24',
    '10.0.0.144/24,gw=10.0.0.1',
    '',
    '/24',
    '010.0.0.1/24',
  ])('refuses %j with the flag and an example', (bad) => {
    const e = thrown(() => parseCidr(bad));
    expect(e.code).toBe('LLMGW_BAD_REQUEST');
    expect(e.message).toBe(`--ip ${bad}: expected an IPv4 address with its prefix length, e.g. 10.0.0.144/24`);
  });
});

describe('parseDiskGiB', () => {
  test('GiB with or without a unit', () => {
    expect(parseDiskGiB('64G')).toBe(64);
    expect(parseDiskGiB('64')).toBe(64);
    expect(parseDiskGiB('100GB')).toBe(100);
    expect(parseDiskGiB('32GiB')).toBe(32);
    expect(parseDiskGiB('8g')).toBe(8);
    expect(parseDiskGiB(' 1G ')).toBe(1);
  });

  test.each(['0G', '0', '1.5G', '64M', '1T', '64 G', '-1G', 'G', '', 'big'])('refuses %j, naming the flag', (bad) => {
    const e = thrown(() => parseDiskGiB(bad));
    expect(e.code).toBe('LLMGW_BAD_REQUEST');
    expect(e.message).toBe(`--disk ${bad}: expected a size in GiB, e.g. 64G`);
  });

  test('the flag named is the one given', () => {
    expect(thrown(() => parseDiskGiB('x', 'proxmox.disk')).message).toBe(
      'proxmox.disk x: expected a size in GiB, e.g. 64G',
    );
  });
});

describe('encodeSshKeys (Proxmox sshkeys: URL-encoded exactly once)', () => {
  const SAFE = /^[-%a-zA-Z0-9_.!~*'()]*$/;

  test('one key: spaces %20, + %2B, / %2F, = %3D, @ %40; nothing else escaped', () => {
    const enc = encodeSshKeys([ED]);
    expect(enc).toBe('ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIG%2Bx%2FYz9Qw%3D%3D%20root%40ca-host');
    expect(enc).toMatch(SAFE);
    expect(enc).not.toContain('+');
    expect(enc).not.toContain(' ');
    expect(enc).not.toContain('%25');
  });

  test('keys joined by a newline (%0A), trimmed, blank lines dropped', () => {
    const enc = encodeSshKeys([`  ${ED}\n`, '', '   ', RSA]);
    expect(enc).toBe(
      'ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIG%2Bx%2FYz9Qw%3D%3D%20root%40ca-host%0Assh-rsa%20AAAAB3NzaC1yc2EAAAADAQABAAABAQC7%2B%2Fab%3D%3D%20ops%20key',
    );
    expect(enc).toMatch(SAFE);
    expect(enc).not.toContain('%25');
  });

  test('one decodeURIComponent gives the keys back exactly (not double-encoded)', () => {
    const keys = [ED, RSA, "ecdsa-sha2-nistp256 AAAAE2VjZHNh+/= a comment with (parens) and ~*!'_.-"];
    const enc = encodeSshKeys(keys);
    expect(enc).toMatch(SAFE);
    expect(decodeURIComponent(enc)).toBe(keys.join('\n'));
    // decoding once more changes nothing: there was no second layer
    expect(decodeURIComponent(decodeURIComponent(enc))).toBe(keys.join('\n'));
    // encodeURIComponent's safe set passes through as is
    expect(enc.endsWith("a%20comment%20with%20(parens)%20and%20~*!'_.-")).toBe(true);
  });

  test('a key holding a literal % is escaped once (%25), and decodes back', () => {
    const enc = encodeSshKeys(['ssh-ed25519 AAAA 100%done']);
    expect(enc).toBe('ssh-ed25519%20AAAA%20100%25done');
    expect(decodeURIComponent(enc)).toBe('ssh-ed25519 AAAA 100%done');
  });

  test('no key at all is refused, naming --ssh-key', () => {
    for (const keys of [[], [''], ['  ', '\n']]) {
      const e = thrown(() => encodeSshKeys(keys));
      expect(e.code).toBe('LLMGW_BAD_REQUEST');
      expect(e.message).toContain('pass --ssh-key PATH');
    }
  });
});

describe('createParams', () => {
  test('the whole body for a typical node', () => {
    expect(createParams(spec())).toEqual({
      vmid: 144,
      name: 'gpu-144',
      tags: 'llmgw;run-0a1b2c',
      description: 'llmgw node gpu-144 (created by llmgw provision-node)',
      ostype: 'l26',
      cpu: 'host',
      cores: 4,
      memory: 8192,
      scsihw: 'virtio-scsi-single',
      scsi0: 'local-lvm:0,import-from=local:import/debian-12-genericcloud-amd64.qcow2,discard=on,iothread=1',
      ide2: 'local-lvm:cloudinit',
      boot: 'order=scsi0',
      net0: 'virtio,bridge=vmbr0',
      serial0: 'socket',
      vga: 'serial0',
      ciuser: 'root',
      ciupgrade: 0,
      ipconfig0: 'ip=10.0.0.144/24,gw=10.0.0.1',
      sshkeys: 'ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIG%2Bx%2FYz9Qw%3D%3D%20root%40ca-host',
    });
  });

  test('cpu is always sent, as given (never left to the API default kvm64)', () => {
    expect(createParams(spec()).cpu).toBe('host');
    expect(createParams(spec({ cpu: 'x86-64-v3' })).cpu).toBe('x86-64-v3');
    expect(createParams(spec({ cpu: 'kvm64' })).cpu).toBe('kvm64');
    expect(Object.keys(createParams(spec()))).toContain('cpu');
  });

  test('ciupgrade is 0: no package upgrade on first boot', () => {
    expect(createParams(spec()).ciupgrade).toBe(0);
  });

  test('tags: llmgw and the run tag, ;-separated', () => {
    const tags = String(createParams(spec({ runTag: runTag('7F3a-9B') })).tags).split(';');
    expect(tags).toEqual([LLMGW_TAG, 'run-7f3a9b']);
    expect(LLMGW_TAG).toBe('llmgw');
  });

  test('scsi0 imports the image in the STORAGE:0,import-from=IMAGE form', () => {
    const p = createParams(spec({ storage: 'ceph-vm', image: 'nfs-images:import/noble-server-cloudimg-amd64.qcow2' }));
    expect(p.scsi0).toBe(
      'ceph-vm:0,import-from=nfs-images:import/noble-server-cloudimg-amd64.qcow2,discard=on,iothread=1',
    );
    expect(String(p.scsi0)).toMatch(/^ceph-vm:0,import-from=/);
    expect(p.ide2).toBe('ceph-vm:cloudinit');
  });

  test('ipconfig0 ip=A/P,gw=G; without a gateway just ip=A/P', () => {
    expect(createParams(spec({ ip: '192.168.5.201/16', gateway: '192.168.0.1' })).ipconfig0).toBe(
      'ip=192.168.5.201/16,gw=192.168.0.1',
    );
    expect(createParams(spec({ gateway: null })).ipconfig0).toBe('ip=10.0.0.144/24');
    expect(createParams(spec({ ip: ' 10.0.0.144/24 ' })).ipconfig0).toBe('ip=10.0.0.144/24,gw=10.0.0.1');
  });

  test('name is the node id', () => {
    const p = createParams(spec({ name: 'infer-a', vmid: 310 }));
    expect(p.name).toBe('infer-a');
    expect(p.vmid).toBe(310);
    expect(p.description).toBe('llmgw node infer-a (created by llmgw provision-node)');
  });

  test('nameserver only when given', () => {
    expect('nameserver' in createParams(spec({ nameserver: null }))).toBe(false);
    expect(createParams(spec({ nameserver: '10.0.0.53' })).nameserver).toBe('10.0.0.53');
  });

  test('bridge, cores, memory and ciuser pass through', () => {
    const p = createParams(spec({ bridge: 'vmbr7', cores: 16, memoryMiB: 65536, ciuser: 'debian' }));
    expect([p.net0, p.cores, p.memory, p.ciuser]).toEqual(['virtio,bridge=vmbr7', 16, 65536, 'debian']);
  });

  test('a bad address or no key fails the whole body', () => {
    expect(thrown(() => createParams(spec({ ip: '10.0.0.144' }))).message).toContain('--ip 10.0.0.144:');
    expect(thrown(() => createParams(spec({ sshKeys: [] }))).message).toContain('--ssh-key');
  });

  test('the CLI defaults cpu to host (what createParams then sends)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-plan-'));
    writeFileSync(join(dir, 'id'), 'not read');
    writeFileSync(join(dir, 'id.pub'), `${ED}\n# a comment\n\n`);
    const config = {
      proxmox: {
        url: 'https://pve.example.net:8006',
        node: 'pve',
        tokenId: 'llmgw@pve!provision',
        tokenSecretFile: '/dev/null',
        ca: '/dev/null',
        storage: 'local-lvm',
        image: 'local:import/debian-12-genericcloud-amd64.qcow2',
        bridge: 'vmbr0',
        gateway: '10.0.0.1',
        nameserver: null,
        cores: 4,
        memoryMiB: 8192,
        disk: '64G',
      },
    } as unknown as ServerConfig;
    const input = provisionInput({ name: 'gpu-144', ip: '10.0.0.144/24', 'ssh-key': join(dir, 'id') }, config);
    expect(input).toMatchObject({ cpu: 'host', vmid: 144, diskGiB: 64, sshKeys: [ED], ciuser: 'root' });
    expect(
      provisionInput({ name: 'gpu-144', ip: '10.0.0.144/24', 'ssh-key': join(dir, 'id'), cpu: 'x86-64-v2-AES' }, config)
        .cpu,
    ).toBe('x86-64-v2-AES');
    expect(() => provisionInput({ name: 'gpu-44', ip: '10.0.0.44/24', 'ssh-key': join(dir, 'id') }, config)).toThrow(
      /pass --vmid N/,
    );
  });
});

describe('isOwnVm', () => {
  const RUN = 'run-0a1b2c';

  test('name and llmgw tag both needed', () => {
    expect(isOwnVm({ name: 'gpu-144', tags: `llmgw;${RUN}` }, 'gpu-144')).toBe(true);
    expect(isOwnVm({ name: 'gpu-144', tags: 'llmgw' }, 'gpu-144')).toBe(true);
    expect(isOwnVm({ name: 'gpu-145', tags: `llmgw;${RUN}` }, 'gpu-144')).toBe(false);
    expect(isOwnVm({ name: 'gpu-144', tags: RUN }, 'gpu-144')).toBe(false);
    expect(isOwnVm({ name: 'gpu-144' }, 'gpu-144')).toBe(false);
    expect(isOwnVm({ tags: `llmgw;${RUN}` }, 'gpu-144')).toBe(false);
    expect(isOwnVm({ name: 'gpu-144', tags: 'llmgw-old;prod' }, 'gpu-144')).toBe(false);
  });

  test("given a run, only that run's VM is ours", () => {
    expect(isOwnVm({ name: 'gpu-144', tags: `llmgw;${RUN}` }, 'gpu-144', RUN)).toBe(true);
    expect(isOwnVm({ name: 'gpu-144', tags: 'llmgw;run-ffff' }, 'gpu-144', RUN)).toBe(false);
    expect(isOwnVm({ name: 'gpu-144', tags: 'llmgw' }, 'gpu-144', RUN)).toBe(false);
    expect(isOwnVm({ name: 'gpu-144', tags: `${RUN}` }, 'gpu-144', RUN)).toBe(false);
    expect(isOwnVm({ name: 'gpu-144', tags: `llmgw;${RUN}x` }, 'gpu-144', RUN)).toBe(false);
  });

  test('tags as Proxmox lists them: ; , or space separated, any order', () => {
    expect(isOwnVm({ name: 'gpu-144', tags: `${RUN},llmgw` }, 'gpu-144', RUN)).toBe(true);
    expect(isOwnVm({ name: 'gpu-144', tags: `prod ${RUN} llmgw` }, 'gpu-144', RUN)).toBe(true);
  });

  test('runTag: run-<id>, lower case, PVE tag characters only', () => {
    expect(runTag('0A1B-2C3D_e4')).toBe('run-0a1b2c3de4');
    expect(runTag('4f2d9a0e-7b1c-4e8a-9f3d-2c6b1a0e5d77')).toBe('run-4f2d9a0e7b1c4e8a9f3d2c6b1a0e5d77');
  });

  test('describeVm names the holder', () => {
    expect(describeVm({ vmid: 144, name: 'db-1', node: 'pve2', status: 'running', tags: 'prod' })).toBe(
      'VM 144 "db-1" on node pve2 (running, tags prod)',
    );
    expect(describeVm({ vmid: 144, node: 'pve', status: 'stopped' })).toBe('VM 144 on node pve (stopped)');
  });
});

describe('parsePveError / classifyPve (proxmox-api 1.1.1 messages)', () => {
  const URL = 'https://pve.example.net:8006/api2/json';

  test('500 create on a taken VMID: exists', () => {
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu return Error 500 unable to create VM 144 - VM 144 already exists on node 'pve': {"data":null,"message":"unable to create VM 144 - VM 144 already exists on node 'pve'\\n"}`,
      ),
    );
    expect(e).toEqual({
      method: 'POST',
      url: `${URL}/nodes/pve/qemu`,
      status: 500,
      reason: "unable to create VM 144 - VM 144 already exists on node 'pve'",
    });
    expect(classifyPve(e.reason)).toBe('exists');
  });

  test('400 nextid with parameter errors: the errors are appended, and it is exists', () => {
    const e = parsePveError(
      new Error(
        `GET ${URL}/cluster/nextid?vmid=144 return Error 400 Parameter verification failed.: {"data":null,"errors":{"vmid":"VM 144 already exists\\n"}}`,
      ),
    );
    expect(e).toEqual({
      method: 'GET',
      url: `${URL}/cluster/nextid?vmid=144`,
      status: 400,
      reason: 'Parameter verification failed. (vmid: VM 144 already exists)',
    });
    expect(classifyPve(e.reason)).toBe('exists');
  });

  test('several parameter errors, joined by ;', () => {
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu return Error 400 Parameter verification failed.: {"data":null,"errors":{"sshkeys":"invalid urlencoded string","cores":"value must have a minimum value of 1"}}`,
      ),
    );
    expect(e.reason).toBe(
      'Parameter verification failed. (sshkeys: invalid urlencoded string; cores: value must have a minimum value of 1)',
    );
    expect(classifyPve(e.reason)).toBe('other');
  });

  test('storage lock "got timeout": lock-timeout', () => {
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu return Error 500 unable to create VM 145 - can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout: {"data":null}`,
      ),
    );
    expect(e.status).toBe(500);
    expect(e.reason).toBe(
      "unable to create VM 145 - can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout",
    );
    expect(classifyPve(e.reason)).toBe('lock-timeout');
    // a task's exit status says the same
    expect(classifyPve("can't lock file '/var/lock/qemu-server/lock-144.conf' - got timeout")).toBe('lock-timeout');
  });

  test('"VM is locked": locked', () => {
    const e = parsePveError(
      new Error(`PUT ${URL}/nodes/pve/qemu/144/resize return Error 500 VM is locked (create): {"data":null}`),
    );
    expect(e).toEqual({
      method: 'PUT',
      url: `${URL}/nodes/pve/qemu/144/resize`,
      status: 500,
      reason: 'VM is locked (create)',
    });
    expect(classifyPve(e.reason)).toBe('locked');
  });

  test('"does not exist": missing', () => {
    const e = parsePveError(
      new Error(
        `GET ${URL}/nodes/pve/qemu/144/status/current return Error 500 Configuration file 'nodes/pve/qemu-server/144.conf' does not exist: {"data":null}`,
      ),
    );
    expect(e.status).toBe(500);
    expect(e.reason).toBe("Configuration file 'nodes/pve/qemu-server/144.conf' does not exist");
    expect(classifyPve(e.reason)).toBe('missing');
  });

  test('401: auth', () => {
    const e = parsePveError(new Error(`GET ${URL}/version return Error 401 authentication failure: {"data":null}`));
    expect(e).toEqual({ method: 'GET', url: `${URL}/version`, status: 401, reason: 'authentication failure' });
    expect(classifyPve(e.reason)).toBe('auth');
    expect(classifyPve('invalid token value!')).toBe('auth');
    expect(classifyPve('permission denied - invalid PVE ticket')).toBe('auth');
  });

  test('other statuses ("connection failed with"): method, url and status read', () => {
    // proxmox-api writes `<reason> return: <body>` here.
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu connection failed with 403 Permission check failed (/vms/144, VM.Allocate) return: {"data":null}`,
      ),
    );
    expect(e).toMatchObject({ method: 'POST', url: `${URL}/nodes/pve/qemu`, status: 403 });
    expect(e.reason).toBe('Permission check failed (/vms/144, VM.Allocate)');
    expect(classifyPve(e.reason)).toBe('other');
  });

  test("an empty reason phrase takes the body's message", () => {
    const e = parsePveError(
      new Error(
        `DELETE ${URL}/nodes/pve/qemu/144 return Error 500 : {"data":null,"message":"VM 144 is running - destroy failed\\n"}`,
      ),
    );
    expect(e).toEqual({
      method: 'DELETE',
      url: `${URL}/nodes/pve/qemu/144`,
      status: 500,
      reason: 'VM 144 is running - destroy failed',
    });
  });

  test('a body that is not JSON (a proxy page) stays in the reason, so it is seen', () => {
    expect(parsePveError(new Error(`GET ${URL}/version return Error 500 Internal Server Error: not json`)).reason).toBe(
      'Internal Server Error: not json',
    );
  });

  test('network failures ("FaILED to call"): no status', () => {
    expect(
      parsePveError(
        new Error(`FaILED to call POST ${URL}/nodes/pve/qemu cause by:connect ECONNREFUSED 127.0.0.1:8006`),
      ),
    ).toEqual({
      method: 'POST',
      url: `${URL}/nodes/pve/qemu`,
      status: null,
      reason: 'connection failed: connect ECONNREFUSED 127.0.0.1:8006',
    });
    expect(parsePveError(new Error(`FaILED to call GET ${URL}/version`))).toEqual({
      method: 'GET',
      url: `${URL}/version`,
      status: null,
      reason: 'connection failed',
    });
  });

  test('anything else: the message as the reason, no status', () => {
    expect(parsePveError(new Error('something odd'))).toEqual({
      method: '',
      url: '',
      status: null,
      reason: 'something odd',
    });
    expect(parsePveError('a string')).toEqual({ method: '', url: '', status: null, reason: 'a string' });
  });

  test('classifyPve: other for the rest', () => {
    expect(classifyPve('Parameter verification failed.')).toBe('other');
    expect(classifyPve('')).toBe('other');
    expect(classifyPve('QEMU guest agent is not running')).toBe('other');
  });
});

describe('tasks', () => {
  test('parseUpid: node, type, id, user', () => {
    expect(parseUpid('UPID:pve:000A1B2C:0123ABCD:65A1B2C3:qmcreate:144:llmgw@pve!provision:')).toEqual({
      node: 'pve',
      type: 'qmcreate',
      id: '144',
      user: 'llmgw@pve!provision',
    });
    expect(parseUpid('UPID:pve-2:00001234:1234ABCDE:6789ABCD:resize:145:root@pam:')).toEqual({
      node: 'pve-2',
      type: 'resize',
      id: '145',
      user: 'root@pam',
    });
  });

  test.each([
    'UPID:pve:000A1B2C:0123ABCD:65A1B2C3:qmcreate:144:root@pam', // no trailing colon
    'pve:000A1B2C:0123ABCD:65A1B2C3:qmcreate:144:root@pam:',
    'UPID:pve:A1B2C:0123ABCD:65A1B2C3:qmcreate:144:root@pam:', // pid not 8 hex digits
    'UPID:pve:000A1B2C:0123ABCD:65A1B2CZ:qmcreate:144:root@pam:',
    '',
    'null',
  ])('parseUpid refuses %j', (bad) => {
    const e = thrown(() => parseUpid(bad));
    expect(e.code).toBe('LLMGW_PROXMOX_FAILED');
    expect(e.message).toBe(`Proxmox returned ${JSON.stringify(bad)} where a task id (UPID:…) was expected`);
  });

  test('taskSucceeded: OK and WARNINGS: n only', () => {
    expect(taskSucceeded('OK')).toBe(true);
    expect(taskSucceeded('WARNINGS: 2')).toBe(true);
    expect(taskSucceeded('WARNINGS: 17')).toBe(true);
    for (const s of [
      undefined,
      '',
      'ok',
      'OK ',
      'WARNINGS',
      'WARNINGS: ',
      'WARNINGS: two',
      "can't lock file '/var/lock/qemu-server/lock-144.conf' - got timeout",
      'unexpected status',
      'job errors',
    ]) {
      expect(taskSucceeded(s)).toBe(false);
    }
  });
});

describe('parsePveError: reasons that hold colons', () => {
  const URL = 'https://pve.example.net:8006/api2/json';
  test('a volid in the reason is not a lost connection', () => {
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu return Error 500 unable to create VM 144 - volume 'local:import/x.qcow2' does not exist: {"data":null}`,
      ),
    );
    expect(e).toEqual({
      method: 'POST',
      url: `${URL}/nodes/pve/qemu`,
      status: 500,
      reason: "unable to create VM 144 - volume 'local:import/x.qcow2' does not exist",
    });
  });
  test('a reason with ": " inside is kept whole', () => {
    const e = parsePveError(
      new Error(
        `POST ${URL}/nodes/pve/qemu return Error 500 unable to create VM 144 - import failed: exit code 1: {"data":null}`,
      ),
    );
    expect(e.reason).toBe('unable to create VM 144 - import failed: exit code 1');
  });
});

describe('diskSizeGiB', () => {
  test('a size without a unit is bytes (pve-common format_size)', () => {
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,size=2147483648')).toBe(2);
  });
  test('size= in G, M, T, K', () => {
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,iothread=1,size=2G')).toBe(2);
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,discard=on,size=64G,iothread=1')).toBe(64);
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,size=3584M')).toBe(3.5);
    expect(diskSizeGiB('ceph:vm-144-disk-0,size=1T')).toBe(1024);
    expect(diskSizeGiB('local:144/vm-144-disk-0.qcow2,size=2097152K')).toBe(2);
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,size=2.5G')).toBe(2.5);
  });

  test('no size (or none given): null', () => {
    expect(diskSizeGiB(undefined)).toBeNull();
    expect(diskSizeGiB('')).toBeNull();
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,iothread=1')).toBeNull();
    expect(diskSizeGiB('local-lvm:vm-144-disk-0,size=')).toBeNull();
    // only the size= option counts, not a volume name that happens to hold "size="
    expect(diskSizeGiB('local-lvm:vm-144-disksize=9G,iothread=1')).toBeNull();
  });
});

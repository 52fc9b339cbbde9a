/** `llmgw doctor` checks against fixture roots (sysfs, /proc, /dev, /etc) with fake nvidia-smi, sminfo, systemctl and ldconfig. */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctorColumn, doctorFailed, formatDoctor, runDoctor, type DoctorOptions } from '../../lib/doctor';
import { loadedModules } from '../../lib/doctor/gpu';
import { runCommand, type Exec } from '../../lib/hardware/exec';
import type { DoctorResult } from '../../lib/types';

const FIXTURES = join(__dirname, '..', 'fixtures');
const SYSFS = join(FIXTURES, 'sysfs');
const ROOTS = join(FIXTURES, 'roots');
const FAKE_SMI = join(FIXTURES, 'nvidia-smi');
const FAKE_SMINFO = join(FIXTURES, 'sminfo');
const LDCONFIG_GOMP =
  "1210 libs found in cache `/etc/ld.so.cache'\n\tlibgomp.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libgomp.so.1\n";

interface Fakes {
  env?: Record<string, string>;
  units?: Record<string, string | null>;
  ldconfig?: string;
}

/** nvidia-smi and sminfo are the fixture scripts (run via env(1)); systemctl and ldconfig answer from `units` / `ldconfig`. */
function fakeExec(f: Fakes = {}): Exec {
  return async (cmd, args) => {
    if (cmd === 'systemctl') {
      const state = f.units?.[args[1] ?? ''];
      if (state === null) return { code: null, stdout: '', stderr: '', error: 'ENOENT' };
      return state === 'active'
        ? { code: 0, stdout: 'active\n', stderr: '' }
        : { code: 3, stdout: `${state ?? 'inactive'}\n`, stderr: '' };
    }
    if (cmd === 'ldconfig')
      return { code: 0, stdout: f.ldconfig ?? "1210 libs found in cache `/etc/ld.so.cache'\n", stderr: '' };
    // env(1) itself exits 127 for a missing binary: run directly when there is nothing to set.
    if (!f.env) return runCommand(cmd, args);
    return runCommand('env', [...Object.entries(f.env).map(([k, v]) => `${k}=${v}`), cmd, ...args]);
  };
}

function doctor(
  root: string,
  sys: string,
  o: Partial<DoctorOptions> & { fakes?: Fakes } = {},
): Promise<DoctorResult[]> {
  const { fakes, ...rest } = o;
  return runDoctor({
    nvidiaSmi: FAKE_SMI,
    fabrics: ['ib-a'],
    root: join(ROOTS, root),
    sysRoot: join(SYSFS, sys),
    sminfo: FAKE_SMINFO,
    exec: fakeExec(fakes),
    ...rest,
  });
}

const byId = (rs: DoctorResult[], id: string): DoctorResult => {
  const r = rs.find((x) => x.id === id);
  if (!r) throw new Error(`no check ${id} in ${rs.map((x) => x.id).join(', ')}`);
  return r;
};

describe('runDoctor', () => {
  it('passes every check on a healthy HGX H100 node', async () => {
    const rs = await doctor('hgx-h100', 'ndr-a', {
      fakes: { env: { FAKE_NVIDIA_GPUS: '8' }, units: { 'nvidia-fabricmanager': 'active' }, ldconfig: LDCONFIG_GOMP },
    });
    expect(rs.map((r) => r.id)).toEqual([
      'nvidia-smi',
      'cpu-flags',
      'libgomp',
      'fabrics',
      'subnet-manager/ib-a',
      'gpudirect-rdma',
      'fabric-manager',
      'imex',
    ]);
    expect(rs.filter((r) => r.status !== 'pass')).toEqual([]);
    expect(byId(rs, 'subnet-manager/ib-a').summary).toBe(
      'ib-a: master SM 0x98039b03009fa1c0 seen by mlx5_0 port 1, mlx5_1 port 1',
    );
    expect(byId(rs, 'fabric-manager').summary).toBe('4 NVSwitches; nvidia-fabricmanager is active');
    expect(byId(rs, 'nvidia-smi').summary).toContain('8 GPUs (NVIDIA A100-SXM4-80GB)');
    expect(doctorFailed(rs)).toBe(false);
  });
  it('fails nvidia-smi missing at the configured path, never "no GPUs"', async () => {
    const rs = await doctor('gpu-no-peermem', 'ndr-a', { nvidiaSmi: '/opt/none/nvidia-smi' });
    expect(byId(rs, 'nvidia-smi')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('nvidia-smi not found at /opt/none/nvidia-smi'),
      fix: expect.stringContaining('--nvidia-smi PATH'),
    });
    expect(doctorFailed(rs)).toBe(true);
  });
  it("points at the GPU Operator's driver container when that is where nvidia-smi is", async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-root-'));
    try {
      mkdirSync(join(root, 'run/nvidia/driver/usr/bin'), { recursive: true });
      writeFileSync(join(root, 'run/nvidia/driver/usr/bin/nvidia-smi'), '');
      const rs = await runDoctor({
        nvidiaSmi: '/opt/none/nvidia-smi',
        fabrics: [],
        root,
        sysRoot: join(SYSFS, 'none'),
        exec: fakeExec(),
      });
      expect(byId(rs, 'nvidia-smi').fix).toContain('chroot /run/nvidia/driver nvidia-smi');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
  it('names a failing driver by its exit code', async () => {
    const rs = await doctor('gpu-no-peermem', 'ndr-a', { fakes: { env: { FAKE_NVIDIA_FAIL: '1' } } });
    expect(byId(rs, 'nvidia-smi')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('(exit 9)'),
      fix: expect.stringContaining('load the NVIDIA driver'),
    });
  });
  it('warns on a GPU node with a fabric but no GPUDirect RDMA', async () => {
    const rs = await doctor('gpu-no-peermem', 'ndr-a');
    expect(byId(rs, 'gpudirect-rdma')).toMatchObject({
      status: 'warn',
      summary: expect.stringContaining('nvidia_peermem is not loaded'),
      fix: expect.stringMatching(/^modprobe nvidia_peermem/),
    });
    const noFabric = await doctor('gpu-no-peermem', 'ndr-a', { fabrics: [] });
    expect(byId(noFabric, 'gpudirect-rdma')).toMatchObject({ status: 'pass', summary: expect.stringContaining('n/a') });
  });
  it("fails a kvm64 guest's CPU flags with the fix, and a missing libgomp", async () => {
    const rs = await doctor('kvm64', 'none', { nvidiaSmi: null, fabrics: [] });
    expect(byId(rs, 'cpu-flags')).toEqual({
      id: 'cpu-flags',
      status: 'fail',
      summary:
        'a virtual CPU (Common KVM processor) lacks avx, avx2, fma, sse4_2: llama.cpp falls back to its scalar backend, and AVX2 builds die with SIGILL (exit 132)',
      fix: "set the VM's CPU type to host (Proxmox: qm set VMID --cpu host, then stop and start the VM)",
    });
    expect(byId(rs, 'libgomp')).toMatchObject({
      status: 'fail',
      fix: expect.stringContaining('apt-get install libgomp1'),
    });
    expect(byId(rs, 'nvidia-smi')).toMatchObject({ status: 'pass', summary: expect.stringContaining('--no-gpu') });
    expect(byId(rs, 'fabrics')).toMatchObject({ status: 'pass', summary: expect.stringContaining('island') });
    const vllmOnly = await doctor('kvm64', 'none', { nvidiaSmi: null, fabrics: [], engines: ['vllm'] });
    expect(byId(vllmOnly, 'libgomp').status).toBe('pass');
  });
  it('fails ports of one fabric that see two subnet managers', async () => {
    const rs = await doctor('hgx-h100', 'ndr-split', {
      fakes: { env: { FAKE_SMINFO_GUIDS: 'mlx5_1=0xb83fd20300c1d2e0' } },
    });
    expect(byId(rs, 'fabrics')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('mlx5_1 port 1 sees SM 0xb83fd20300c1d2e0'),
    });
    expect(byId(rs, 'subnet-manager').status).toBe('warn');
  });
  it('fails an adapter on two fabrics, a RoCE port and a down port, naming each', async () => {
    const two = await doctor('hgx-h100', 'ndr-a', { fabrics: ['ib-a:mlx5_0,mlx5_1', 'ib-b:mlx5_0'] });
    expect(byId(two, 'fabrics')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('adapter mlx5_0 is declared under two fabrics, ib-a and ib-b'),
    });
    const roce = await doctor('hgx-h100', 'roce-v2', { fabrics: ['ib-a:mlx5_0'] });
    expect(byId(roce, 'fabrics').summary).toContain('adapter mlx5_0 is an Ethernet (RoCE) port');
    const down = await doctor('hgx-h100', 'ndr-down', { fabrics: ['ib-a:mlx5_0,mlx5_1'] });
    expect(byId(down, 'fabrics').summary).toContain('adapter mlx5_1 port 1 is 1: DOWN');
  });
  it('warns an island that has active InfiniBand ports', async () => {
    const rs = await doctor('hgx-h100', 'ndr-a', { fabrics: [] });
    expect(byId(rs, 'fabrics')).toMatchObject({
      status: 'warn',
      summary: expect.stringContaining('mlx5_0, mlx5_1 are active InfiniBand ports'),
      fix: expect.stringContaining('--fabric NAME'),
    });
    expect(byId(rs, 'subnet-manager')).toMatchObject({ status: 'pass', summary: 'n/a: no fabric declared' });
  });
  it('warns when the SM cannot be read (no root) and fails when no SM answers', async () => {
    const perm = await doctor('hgx-h100', 'ndr-a', {
      fakes: { env: { FAKE_SMINFO_FAIL: 'permission' }, units: { 'nvidia-fabricmanager': 'active' } },
    });
    expect(byId(perm, 'subnet-manager/ib-a')).toMatchObject({
      status: 'warn',
      summary: expect.stringContaining('declared-only'),
      fix: expect.stringContaining('run as root'),
    });
    const nosm = await doctor('hgx-h100', 'ndr-a', { fakes: { env: { FAKE_SMINFO_FAIL: 'no-sm' } } });
    expect(byId(nosm, 'subnet-manager/ib-a')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('no subnet manager answered on mlx5_0 port 1'),
      fix: expect.stringContaining('opensm'),
    });
  });
  it('fails NVSwitches without a running Fabric Manager; warns when systemd cannot be asked', async () => {
    const rs = await doctor('hgx-h100', 'ndr-a', { fakes: { units: { 'nvidia-fabricmanager': 'failed' } } });
    expect(byId(rs, 'fabric-manager')).toMatchObject({
      status: 'fail',
      summary: expect.stringContaining('4 NVSwitches but nvidia-fabricmanager is failed: CUDA fails with error 802'),
      fix: expect.stringContaining('systemctl enable --now nvidia-fabricmanager'),
    });
    const noSystemd = await doctor('hgx-h100', 'ndr-a', { fakes: { units: { 'nvidia-fabricmanager': null } } });
    expect(byId(noSystemd, 'fabric-manager').status).toBe('warn');
  });
  it('counts NVSwitches from PCI class 0x068000 when /dev has none', async () => {
    const sys = mkdtempSync(join(tmpdir(), 'llmgw-sys-'));
    try {
      for (const [dev, vendor, cls] of [
        ['0000:05:00.0', '0x10de', '0x068000'],
        ['0000:06:00.0', '0x10de', '0x068000'],
        ['0000:18:00.0', '0x10de', '0x030200'],
      ]) {
        mkdirSync(join(sys, 'bus/pci/devices', dev), { recursive: true });
        writeFileSync(join(sys, 'bus/pci/devices', dev, 'vendor'), `${vendor}\n`);
        writeFileSync(join(sys, 'bus/pci/devices', dev, 'class'), `${cls}\n`);
      }
      const rs = await runDoctor({
        nvidiaSmi: null,
        fabrics: [],
        root: join(ROOTS, 'gpu-no-peermem'),
        sysRoot: sys,
        exec: fakeExec({ units: { 'nvidia-fabricmanager': 'inactive' } }),
      });
      expect(byId(rs, 'fabric-manager').summary).toContain('2 NVSwitches but nvidia-fabricmanager is inactive');
    } finally {
      rmSync(sys, { recursive: true, force: true });
    }
  });
  it('checks IMEX on a GB200 tray: nodes file and service', async () => {
    const gb200 = {
      kind: 'ok' as const,
      gpus: [0, 1, 2, 3].map((index) => ({
        index,
        name: 'NVIDIA GB200',
        memoryMiB: 189471,
        uuid: `GPU-gb200-${index}`,
      })),
    };
    const ok = await doctor('gb200', 'none', {
      fabrics: [],
      known: { gpus: gb200 },
      fakes: { units: { 'nvidia-imex': 'active' } },
    });
    expect(byId(ok, 'imex')).toMatchObject({
      status: 'pass',
      summary: '4 nodes in /etc/nvidia-imex/nodes_config.cfg; nvidia-imex is active',
    });
    expect(byId(ok, 'cpu-flags')).toMatchObject({ status: 'pass', summary: expect.stringContaining('not x86') });
    expect(byId(ok, 'libgomp').status).toBe('pass');
    const root = mkdtempSync(join(tmpdir(), 'llmgw-root-'));
    try {
      cpSync(join(ROOTS, 'gb200'), root, { recursive: true });
      rmSync(join(root, 'etc/nvidia-imex/nodes_config.cfg'));
      const missing = await runDoctor({
        nvidiaSmi: FAKE_SMI,
        fabrics: [],
        root,
        sysRoot: join(SYSFS, 'none'),
        known: { gpus: gb200 },
        exec: fakeExec(),
      });
      expect(byId(missing, 'imex')).toMatchObject({
        status: 'fail',
        summary: expect.stringContaining('/etc/nvidia-imex/nodes_config.cfg is missing'),
        fix: expect.stringContaining('every tray'),
      });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
    const notNvl = await doctor('gpu-no-peermem', 'ndr-a');
    expect(byId(notNvl, 'imex').summary).toMatch(/^n\/a/);
  });
});

describe('doctor output', () => {
  const rs: DoctorResult[] = [
    { id: 'nvidia-smi', status: 'pass', summary: '8 GPUs', fix: '' },
    { id: 'cpu-flags', status: 'fail', summary: 'lacks avx', fix: 'set the VM CPU type to host' },
    { id: 'gpudirect-rdma', status: 'warn', summary: 'not loaded', fix: 'modprobe nvidia_peermem' },
  ];
  it('reads /proc/modules by its first column only', () => {
    expect([
      ...loadedModules(
        'nvidia 54165504 2 nvidia_uvm,nvidia_peermem, Live 0x0 (POE)\nib_core 450560 1 mlx5_ib, Live 0x0\n',
      ),
    ]).toEqual(['nvidia', 'ib_core']);
  });
  it('prints each check, its fix and the counts', () => {
    expect(formatDoctor(rs)).toBe(
      [
        'PASS  nvidia-smi      8 GPUs',
        'FAIL  cpu-flags       lacks avx',
        '                      fix: set the VM CPU type to host',
        'WARN  gpudirect-rdma  not loaded',
        '                      fix: modprobe nvidia_peermem',
        '',
        '1 passed, 1 warned, 1 failed',
        '',
      ].join('\n'),
    );
  });
  it('summarises failing and warning checks for the node list', () => {
    expect(doctorColumn(rs)).toBe('fail: cpu-flags warn: gpudirect-rdma');
    expect(doctorColumn([rs[0] as DoctorResult])).toBe('ok');
    expect(doctorColumn(undefined)).toBe('-');
  });
});

describe('llmgw doctor', () => {
  it('prints JSON and exits 1 when a check fails (kvm64 CPU, nvidia-smi missing)', () => {
    const r = spawnSync(
      process.execPath,
      [
        join(__dirname, '../../bin/llmgw.js'),
        'doctor',
        '--json',
        '--root',
        join(ROOTS, 'kvm64'),
        '--ib-root',
        join(SYSFS, 'ndr-a'),
        '--nvidia-smi',
        '/opt/none/nvidia-smi',
        '--sminfo',
        FAKE_SMINFO,
        '--fabric',
        'ib-a',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(r.stderr).toBe('');
    const results = JSON.parse(r.stdout) as DoctorResult[];
    expect(byId(results, 'nvidia-smi')).toMatchObject({
      status: 'fail',
      summary:
        'nvidia-smi not found at /opt/none/nvidia-smi: the agent will not register this node as one without GPUs',
    });
    expect(byId(results, 'cpu-flags').status).toBe('fail');
    expect(byId(results, 'subnet-manager/ib-a').status).toBe('pass');
    expect(r.status).toBe(1);
  });
});

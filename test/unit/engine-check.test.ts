/**
 * engine-check's logic. The help texts written inline here are SYNTHETIC (a few lines made up for the case
 * under test); the real captured help of the pinned versions is in test/fixtures/engine-help/.
 */
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineCheck, runHelp } from '../../cli/ctl/engine-check';
import { PINNED_ENGINES } from '../../config/defaults';
import { checkFlags, flagsOf, helpDocuments, widestFlags } from '../../lib/engines/check';
import type { ModelSpec } from '../../lib/types';

const catalog: ModelSpec[] = [
  {
    name: 'qwen',
    source: '/m/qwen.gguf',
    replicas: 1,
    profiles: [
      { name: 'cpu', engine: 'llamacpp', nodes: 1, gpusPerNode: 0, args: ['--ctx-size', '8192', '--threads=8'] },
    ],
  },
  {
    name: 'big',
    source: '/m/big',
    replicas: 1,
    profiles: [
      { name: 'pp2', engine: 'vllm', nodes: 2, gpusPerNode: 8, args: ['--max-model-len', '4096', '--enforce-eager'] },
      { name: 'tp8', engine: 'vllm', nodes: 1, gpusPerNode: 8, args: ['--max-model-len', '8192'] },
    ],
  },
];

describe('a flag matches on a word boundary only', () => {
  const help =
    'options:\n  -h, --help            show this help\n  --port-range RANGE    ports\n  --model FNAME\n  --port=PORT\n';
  it('--port is not satisfied by --port-range, -m not by --model', () => {
    expect(helpDocuments(help, '--port-range')).toBe(true);
    expect(helpDocuments('  --port-range RANGE\n', '--port')).toBe(false);
    expect(helpDocuments(help, '--port')).toBe(true); // `--port=PORT`
    expect(helpDocuments(help, '-m')).toBe(false);
    expect(helpDocuments('  -m,    --model FNAME\n', '-m')).toBe(true);
    expect(helpDocuments('  --no-port\n', '--port')).toBe(false);
  });
  it('takes flags from arguments: --name=value is --name, negative numbers are values', () => {
    expect(flagsOf(['serve', '/m', '--seed', '-1', '--threads=8', '-ngl', '99'])).toEqual([
      '--seed',
      '--threads',
      '-ngl',
    ]);
  });
});

describe('the widest command', () => {
  it("holds every rank's flags of llmgw, and each profile's own under its name", () => {
    const vllm = widestFlags('vllm', catalog).get('vllm');
    expect(vllm?.get('--headless')).toEqual(new Set(['llmgw'])); // only on a worker rank of a multi-node replica
    expect(vllm?.get('--master-port')).toEqual(new Set(['llmgw']));
    expect(vllm?.get('--max-model-len')).toEqual(new Set(['big/pp2', 'big/tp8']));
    expect(vllm?.get('--enforce-eager')).toEqual(new Set(['big/pp2']));
  });
  it("llama.cpp: llama-server gets the profile's args and --rpc; ggml-rpc-server its own two flags", () => {
    const w = widestFlags('llamacpp', catalog);
    expect([...(w.get('llama-server')?.keys() ?? [])]).toEqual([
      '--model',
      '--host',
      '--port',
      '--alias',
      '--metrics',
      '--rpc',
      '--ctx-size',
      '--threads',
    ]);
    expect([...(w.get('ggml-rpc-server')?.keys() ?? [])]).toEqual(['--host', '--port']);
  });
  it("SGLang: python's own -m is not checked against SGLang", () => {
    const w = widestFlags('sglang', []).get('python');
    expect(w?.has('-m')).toBe(false);
    expect([...(w?.keys() ?? [])]).toEqual([
      '--model-path',
      '--host',
      '--port',
      '--served-model-name',
      '--enable-metrics',
      '--tp-size',
      '--nnodes',
      '--node-rank',
      '--dist-init-addr',
    ]);
  });
});

describe('the check', () => {
  // SYNTHETIC: a vLLM-like help that lost --headless and --enforce-eager.
  const help = [
    'usage: vllm serve [model_tag] [options]',
    '  -h, --help',
    '  --host HOST',
    '  --port PORT',
    '  --served-model-name NAME',
    '  --tensor-parallel-size, -tp N',
    '  --pipeline-parallel-size, -pp N',
    '  --nnodes, -n N',
    '  --node-rank, -r N',
    '  --master-addr A',
    '  --master-port P',
    '  --max-model-len N',
    '  --enforce-eager-mode',
  ].join('\n');
  it('lists each missing flag and who uses it, and fails', () => {
    const { report, failed } = engineCheck({ engine: 'vllm', version: '0.33.0', catalog, helpOf: () => help });
    expect(failed).toBe(true);
    expect(report).toContain('vllm 0.33.0 vllm: --headless is not in its help (used by llmgw)');
    expect(report).toContain('vllm 0.33.0 vllm: --enforce-eager is not in its help (used by big/pp2)');
    expect(report).not.toContain('--max-model-len is not');
    expect(report).not.toContain('warning');
  });
  it('passes a help that has every flag', () => {
    const { report, failed } = engineCheck({
      engine: 'vllm',
      version: '0.33.0',
      catalog,
      helpOf: () => `${help}\n  --headless\n  --enforce-eager\n`,
    });
    expect(failed).toBe(false);
    expect(report).toMatch(/vllm: all \d+ flags documented/);
  });
  it('warns when the help does not document --help itself (cut short)', () => {
    const cut = help
      .split('\n')
      .filter((l) => !l.includes('--help'))
      .join('\n');
    const [c] = checkFlags(widestFlags('vllm', []), () => cut);
    expect(c?.warnings.join()).toContain('does not document --help itself');
  });
  it('says when a program has no help to check against, and notes a catalog without the engine', () => {
    const { report } = engineCheck({
      engine: 'llamacpp',
      version: 'b11434',
      catalog: [],
      helpOf: (p) => (p === 'ggml-rpc-server' ? null : '-h, --help\n--model --host --port --alias --rpc\n'),
    });
    expect(report).toContain('no catalog profile uses llamacpp');
    expect(report).toContain('warning: ggml-rpc-server: not checked, no help text for it (flags: --host --port)');
  });
});

describe('against the real help of the pinned versions (test/fixtures/engine-help)', () => {
  const dir = join(__dirname, '../fixtures/engine-help');
  const files = existsSync(dir) ? readdirSync(dir) : [];
  // Each fixture's first line says how it was captured; the help is the rest.
  const real = (name: string): string => {
    if (!files.includes(name))
      throw new Error(
        `fixture test/fixtures/engine-help/${name} is missing: capture it from the pinned version (see the first line of the others)`,
      );
    return readFileSync(join(dir, name), 'utf8').replace(/^.*\n/, '');
  };
  const llamaServer = real(`llamacpp-${PINNED_ENGINES.llamacpp}.txt`);
  const rpcServer = real(`llamacpp-rpc-server-${PINNED_ENGINES.llamacpp}.txt`);
  it(`llama.cpp ${PINNED_ENGINES.llamacpp}: every flag llmgw gives is documented, without a truncation warning`, () => {
    const { report, failed } = engineCheck({
      engine: 'llamacpp',
      version: PINNED_ENGINES.llamacpp,
      catalog,
      helpOf: (p) => (p === 'ggml-rpc-server' ? rpcServer : llamaServer),
    });
    expect(report).not.toContain('warning');
    expect([failed, report]).toEqual([false, expect.stringContaining('llama-server: all 8 flags documented')]);
  });
  for (const engine of ['vllm', 'sglang'] as const) {
    const help = real(`${engine}-${PINNED_ENGINES[engine]}.txt`);
    it(`${engine} ${PINNED_ENGINES[engine]}: every flag llmgw gives is documented, without a truncation warning`, () => {
      const { report, failed } = engineCheck({ engine, version: PINNED_ENGINES[engine], catalog, helpOf: () => help });
      expect(report).not.toContain('warning');
      expect([failed, report]).toEqual([false, expect.stringMatching(/all \d+ flags documented/)]);
      // SGLang's examples' `--tp` is argparse abbreviating --tp-size: no flag of its own, so llmgw writes the full name.
      if (engine === 'sglang')
        expect([helpDocuments(help ?? '', '--tp'), helpDocuments(help ?? '', '--tp-size')]).toEqual([false, true]);
    });
  }
  const summary = real(`vllm-${PINNED_ENGINES.vllm}-summary.txt`);
  it("vLLM's real --help (without =all) is its summary: flags missing, and a warning that says to use --help=all", () => {
    const { report, failed } = engineCheck({
      engine: 'vllm',
      version: PINNED_ENGINES.vllm,
      catalog,
      helpOf: () => summary,
    });
    expect(failed).toBe(true);
    expect(report).toContain('--tensor-parallel-size is not in its help');
    expect(report).toContain('warning: this is the summary vllm serve --help prints');
  });
  it('the real llama-server help without its first lines (where --help is) is reported as cut short', () => {
    const cut = (llamaServer ?? '').split('\n');
    const { report } = engineCheck({
      engine: 'llamacpp',
      version: PINNED_ENGINES.llamacpp,
      catalog,
      helpOf: () => cut.slice(Math.floor(cut.length * 0.6)).join('\n'),
    });
    expect(report).toContain('does not document --help itself');
  });
});

describe('--bin runs the help the way each engine gives it whole', () => {
  // A stand-in program (not an engine): it prints how it was called, so the test sees the argv and environment.
  const dir = mkdtempSync(join(tmpdir(), 'engine-check-'));
  const fake = (name: string): string => {
    const p = join(dir, name);
    writeFileSync(p, `#!/bin/sh\necho "${name} $* VLLM_TARGET_DEVICE=\${VLLM_TARGET_DEVICE:-unset}"\n`);
    chmodSync(p, 0o755);
    return p;
  };
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  it('vLLM: vllm serve --help=all with VLLM_TARGET_DEVICE=cpu (without it vLLM prints nothing on a machine with no accelerator)', async () => {
    const saved = process.env.VLLM_TARGET_DEVICE;
    delete process.env.VLLM_TARGET_DEVICE;
    try {
      expect((await runHelp('vllm', 'vllm', fake('vllm'))).trim()).toBe('vllm serve --help=all VLLM_TARGET_DEVICE=cpu');
    } finally {
      if (saved !== undefined) process.env.VLLM_TARGET_DEVICE = saved;
    }
  });
  it('llama.cpp: llama-server --help, and the ggml-rpc-server beside it; SGLang: its python -m sglang.launch_server --help', async () => {
    const server = fake('llama-server');
    fake('ggml-rpc-server');
    expect((await runHelp('llamacpp', 'llama-server', server)).trim()).toBe(
      'llama-server --help VLLM_TARGET_DEVICE=unset',
    );
    expect((await runHelp('llamacpp', 'ggml-rpc-server', server)).trim()).toBe(
      'ggml-rpc-server --help VLLM_TARGET_DEVICE=unset',
    );
    expect((await runHelp('sglang', 'python', fake('python3'))).trim()).toBe(
      'python3 -m sglang.launch_server --help VLLM_TARGET_DEVICE=unset',
    );
  });
});

/** How a node runs the sim engine as a child process, and how the engine reads its flags. */
import { parseArgs } from 'node:util';
import { ownEntryArgv } from '../paths';
import { releaseSelfArgv } from '../release';
import { DEFAULT_PREFIX_CACHE_TOKENS, type SimOptions } from './server';

/**
 * The argv prefix of the sim engine: node with tsx's CommonJS loader and the entrypoint, all absolute
 * so it works from any working directory. `--require tsx/cjs` rather than `--import tsx`: the project
 * is CommonJS, and it starts twice as fast. Measured spawn → `serving` on stderr (Node 20, tsx 4.23):
 * about 260 ms with a cold tsx cache, about 120 ms warm (`--import tsx` is about 250 ms warm). From a release
 * artefact: its own Node and bundled program, `sim-engine`.
 */
export function simEngineArgv(): string[] {
  return releaseSelfArgv('sim-engine') ?? ownEntryArgv('cli/sim-engine');
}

/** A sim engine flag that is missing or wrong (the engine exits 2 with it and its usage). */
export class SimArgvError extends Error {}

const FLAGS = [
  'model',
  'host',
  'port',
  'rank',
  'world',
  'dist-host',
  'dist-port',
  'tokens-per-second',
  'gpu-lock-dir',
  'slots',
  'prefix-cache-tokens',
  'prefill-tokens-per-second',
] as const;

/** Parses argv into engine options; throws a SimArgvError naming the bad flag. */
export function parseSimArgv(argv: string[]): Omit<SimOptions, 'log'> {
  let v: Partial<Record<(typeof FLAGS)[number], string>>;
  try {
    v = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: Object.fromEntries(FLAGS.map((k) => [k, { type: 'string' as const }])),
    }).values;
  } catch (err) {
    throw new SimArgvError((err as Error).message);
  }
  const int = (k: (typeof FLAGS)[number], min: number, max: number, d?: number): number => {
    const raw = v[k];
    if (raw === undefined) {
      if (d === undefined) throw new SimArgvError(`--${k} is required`);
      return d;
    }
    const n = Number(raw);
    if (raw.trim() === '' || !Number.isInteger(n) || n < min || n > max)
      throw new SimArgvError(`--${k}: expected an integer from ${min} to ${max}, got "${raw}"`);
    return n;
  };
  if (!v.model) throw new SimArgvError('--model is required');
  const world = int('world', 1, 1024, 1);
  const rank = int('rank', 0, world - 1, 0);
  const port = rank === 0 ? int('port', 0, 65535) : int('port', 0, 65535, 0);
  const distPort = world > 1 ? int('dist-port', 1, 65535) : int('dist-port', 0, 65535, 0);
  const tps = v['tokens-per-second'] === undefined ? 50 : Number(v['tokens-per-second']);
  if (!Number.isFinite(tps) || tps < 0)
    throw new SimArgvError(`--tokens-per-second: expected a number >= 0, got "${v['tokens-per-second']}"`);
  const prefill = v['prefill-tokens-per-second'] === undefined ? 0 : Number(v['prefill-tokens-per-second']);
  if (!Number.isFinite(prefill) || prefill < 0)
    throw new SimArgvError(
      `--prefill-tokens-per-second: expected a number >= 0 (0: no prefill time), got "${v['prefill-tokens-per-second']}"`,
    );
  const host = v.host ?? '127.0.0.1';
  return {
    model: v.model,
    host,
    port,
    rank,
    world,
    distHost: v['dist-host'] ?? host,
    distPort,
    tokensPerSecond: tps,
    slots: int('slots', 1, 100_000, 64),
    prefixCacheTokens: int('prefix-cache-tokens', 0, 100_000_000, DEFAULT_PREFIX_CACHE_TOKENS),
    prefillTokensPerSecond: prefill,
    ...(v['gpu-lock-dir'] ? { gpuLockDir: v['gpu-lock-dir'] } : {}),
  };
}

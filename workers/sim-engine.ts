/** The sim engine process: `llmgw sim-engine --model M --host H --port P --rank R --world W --dist-host DH --dist-port DP`. */
import { parseArgs } from 'node:util';
import { startSimEngine } from '../lib/sim/server';

const USAGE = `usage: sim-engine --model M --host H --port P [--rank R --world W --dist-host DH --dist-port DP] [--tokens-per-second N]
  rank 0 serves the OpenAI API on H:P and binds DH:DP for the other ranks; ranks ≥ 1 join it and serve nothing.`;

const line = (msg: string, fields?: Record<string, unknown>): void => void process.stderr.write(`${JSON.stringify({ t: new Date().toISOString(), c: 'sim-engine', msg, ...fields })}\n`);

/** Runs the engine until SIGTERM (exit 0) or until its group breaks (exit 3). */
export async function main(argv: string[]): Promise<void> {
  let v: Record<string, string | undefined>;
  try {
    v = parseArgs({ args: argv, strict: true, options: Object.fromEntries(['model', 'host', 'port', 'rank', 'world', 'dist-host', 'dist-port', 'tokens-per-second'].map((k) => [k, { type: 'string' as const }])) }).values as Record<string, string | undefined>;
  } catch (err) {
    process.stderr.write(`sim-engine: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  const num = (k: string, d: number): number => {
    const raw = v[k];
    if (raw === undefined) return d;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < 0) {
      process.stderr.write(`sim-engine: --${k} must be a number ≥ 0, got "${raw}"\n${USAGE}\n`);
      process.exit(2);
    }
    return n;
  };
  if (!v.model) {
    process.stderr.write(`sim-engine: --model is required\n${USAGE}\n`);
    process.exit(2);
  }
  const engine = await startSimEngine({
    model: v.model, host: v.host ?? '127.0.0.1', port: num('port', 8000), rank: num('rank', 0), world: num('world', 1),
    distHost: v['dist-host'] ?? v.host ?? '127.0.0.1', distPort: num('dist-port', 0), tokensPerSecond: num('tokens-per-second', 50), log: line,
  });
  const stop = (): void => void engine.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const { code, reason } = await engine.exited;
  line('exiting', { code, reason });
  process.stderr.write(`sim-engine rank ${v.rank ?? 0}: ${reason}\n`);
  process.exit(code);
}

if (require.main === module) void main(process.argv.slice(2));

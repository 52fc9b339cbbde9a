/** The sim engine process: `sim-engine --model M --host H --port P --rank R --world W --dist-host DH --dist-port DP`. */
import { SIM_ENGINE_VERSION } from '../lib/engines/sim';
import { visibleDevices } from '../lib/sim/gpu-locks';
import { parseSimArgv } from '../lib/sim/argv';
import { DEFAULT_PREFIX_CACHE_TOKENS, startSimEngine, type SimOptions } from '../lib/sim/server';

const USAGE = `usage: sim-engine --model M --host H --port P --rank R --world W --dist-host DH --dist-port DP [--tokens-per-second N]
                  [--gpu-lock-dir DIR] [--slots N] [--prefix-cache-tokens N] [--prefill-tokens-per-second N]
  rank 0 binds DH:DP for the other ranks and serves the OpenAI API on H:P once all have joined;
  ranks >= 1 join DH:DP and serve nothing. Defaults: --host 127.0.0.1 --rank 0 --world 1 --dist-host <host>
  --tokens-per-second 50 (0 = as fast as possible). Its GPUs are CUDA_VISIBLE_DEVICES (indices; /health reports
  them); with --gpu-lock-dir it holds a lock file per GPU there and refuses one another live engine holds.
  --slots N (default 64): the requests it says it serves at once (GET /props total_slots, as llama.cpp);
  the gateway sends it no more than that at a time. It does not enforce them.
  --prefix-cache-tokens N (default ${DEFAULT_PREFIX_CACHE_TOKENS}; 0 = no cache): a prefix cache as vLLM's, blocks
  of 16 tokens (words) in an LRU of N tokens; answers report usage.prompt_tokens_details.cached_tokens.
  --prefill-tokens-per-second N (default 0 = prefill takes no time): one prompt at a time, first come first
  served, each taking (its tokens - cached tokens) / N seconds before its first token. GET /metrics reports
  the queue and the cache as vLLM does (vllm:num_requests_waiting, vllm:gpu_cache_usage_perc, ...).
  Exit codes: 0 stopped, 1 failed to start, 2 bad flags, 3 group broken.`;

/** One JSON line per event on stderr. */
const line = (msg: string, fields?: Record<string, unknown>): void =>
  void process.stderr.write(`${JSON.stringify({ t: new Date().toISOString(), c: 'sim-engine', msg, ...fields })}\n`);

/** Runs the engine until SIGTERM/SIGINT (exit 0) or until its group breaks (exit 3). */
export async function main(argv: string[]): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${USAGE}\n  --help     print this and exit\n  --version  print the version and exit\n`);
    return;
  }
  if (argv.includes('--version')) {
    process.stdout.write(`sim-engine ${SIM_ENGINE_VERSION}\n`);
    return;
  }
  let opts: Omit<SimOptions, 'log'>;
  try {
    opts = { ...parseSimArgv(argv), devices: visibleDevices(process.env.CUDA_VISIBLE_DEVICES) };
  } catch (err) {
    process.stderr.write(`sim-engine: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  line('starting', {
    rank: opts.rank,
    world: opts.world,
    model: opts.model,
    distHost: opts.distHost,
    distPort: opts.distPort,
    devices: opts.devices,
  });
  const engine = await startSimEngine({ ...opts, log: line }).catch((err: Error) => {
    line('failed to start', { rank: opts.rank, error: err.message });
    process.stderr.write(`sim-engine rank ${opts.rank}: ${err.message}\n`);
    process.exit(1);
  });
  const stop = (signal: string): void => {
    line('stopping', { signal, inFlight: engine.inFlight() });
    void engine.close();
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  const { code, reason } = await engine.exited;
  line('exiting', { code, reason });
  if (code !== 0) process.stderr.write(`sim-engine rank ${opts.rank}: ${reason}\n`);
  process.exit(code);
}

if (require.main === module) void main(process.argv.slice(2));

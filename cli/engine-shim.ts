/**
 * The engine shim: `engine-shim --state-dir D --key K --replica R --rank N --generation G --port P -- CMD ARGS…`.
 * Started detached by runShard, so the engine outlives the agent. It runs the engine with its output appended
 * to `<key>.log`, records the engine's pid and start time in `<key>.json`, passes SIGTERM/SIGINT on, and
 * when the engine exits records `{code, signal, at}` in `<key>.exit.json` and exits itself.
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { enginePaths, procStartTime, writeJsonAtomic, type EngineExit, type EngineState } from '../lib/engine-state';

/** Runs the shim over `argv` (its flags, `--`, the engine command); `llmgw engine-shim` in a release artefact. */
export function engineShimMain(argv: string[]): void {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      'state-dir': { type: 'string' },
      key: { type: 'string' },
      replica: { type: 'string' },
      rank: { type: 'string' },
      generation: { type: 'string' },
      port: { type: 'string' },
    },
  });
  const dir = values['state-dir'];
  const key = values.key;
  const [bin, ...args] = positionals;
  if (!dir || !key || !values.replica || !bin) {
    process.stderr.write(
      'usage: engine-shim --state-dir D --key K --replica R --rank N --generation G --port P -- CMD ARGS...\n',
    );
    process.exit(2);
  }
  mkdirSync(dir, { recursive: true });
  const paths = enginePaths(dir, key);
  rmSync(paths.exit, { force: true });
  const exited = (e: Omit<EngineExit, 'at'>): never => {
    writeJsonAtomic(paths.exit, { ...e, at: new Date().toISOString() } satisfies EngineExit);
    process.exit(0);
  };

  const log = openSync(paths.log, 'a');
  const engine = spawn(bin, args, { stdio: ['ignore', log, log] });
  closeSync(log);
  engine.once('error', (err) => exited({ code: null, signal: null, error: err.message }));
  engine.once('exit', (code, signal) => exited({ code, signal }));
  // Before any 'exit' can fire (events come on a later tick): the state is on disk before the exit record.
  const engineStart = engine.pid === undefined ? null : procStartTime(engine.pid);
  const shimStart = procStartTime(process.pid);
  if (engine.pid !== undefined && engineStart !== null && shimStart !== null) {
    writeJsonAtomic(paths.state, {
      key,
      replicaId: values.replica,
      rank: Number(values.rank ?? 0),
      generation: Number(values.generation ?? 0),
      port: Number(values.port ?? 0),
      shimPid: process.pid,
      shimStartTime: shimStart,
      enginePid: engine.pid,
      engineStartTime: engineStart,
      command: [bin, ...args].join(' '),
      devices: process.env.CUDA_VISIBLE_DEVICES ?? null,
      startedAt: new Date().toISOString(),
    } satisfies EngineState);
  }
  // The shim stays up until the engine is gone (its exit record is the last thing it does).
  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => engine.kill(sig));
}

if (require.main === module) engineShimMain(process.argv.slice(2));

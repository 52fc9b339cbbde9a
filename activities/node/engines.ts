/**
 * Engine processes behind their shims: launch one detached, find one again, watch it and stop it. A pid is
 * only ever signalled after its start time proved it is still the process the state file names.
 */
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import {
  readEngineExit,
  readEngineState,
  removeEngineFiles,
  sameProcess,
  type EngineExit,
  type EngineState,
} from '../../lib/engine-state';

/** What the state directory says about one key. */
export type Found =
  | { kind: 'none' }
  | { kind: 'live'; state: EngineState }
  | { kind: 'exited'; state: EngineState | null; exit: EngineExit }
  /** A state file whose shim and engine are both gone (or whose pids now belong to other processes). */
  | { kind: 'vanished'; state: EngineState };

/** Which of an engine's two processes are still the ones recorded. */
export function liveness(st: EngineState): { engine: boolean; shim: boolean } {
  return { engine: sameProcess(st.enginePid, st.engineStartTime), shim: sameProcess(st.shimPid, st.shimStartTime) };
}

/** Looks `key` up in `dir`. An exit record wins: the engine died, whatever the pids say now. */
export function findEngine(dir: string, key: string): Found {
  const state = readEngineState(dir, key);
  const exit = readEngineExit(dir, key);
  if (exit) return { kind: 'exited', state, exit };
  if (!state) return { kind: 'none' };
  const live = liveness(state);
  return live.engine || live.shim ? { kind: 'live', state } : { kind: 'vanished', state };
}

export interface LaunchInput {
  stateDir: string;
  key: string;
  replicaId: string;
  rank: number;
  generation: number;
  port: number;
  /** argv of the shim (without its flags) */
  shimArgv: string[];
  /** argv of the engine */
  command: string[];
  /** Added to the engine's environment (the shim passes its own on): a rank's NCCL_IB_HCA */
  env?: Record<string, string>;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Starts the shim in a session of its own (it and its engine survive the agent: no shared process group, no
 * pipes to break) and waits for it to record the running engine — or the exit of one that never started.
 */
export async function launchEngine(
  l: LaunchInput,
  timeoutMs = 30_000,
): Promise<{ kind: 'running'; state: EngineState } | { kind: 'exited'; exit: EngineExit }> {
  mkdirSync(l.stateDir, { recursive: true });
  removeEngineFiles(l.stateDir, l.key);
  const [bin, ...pre] = l.shimArgv;
  if (!bin) throw new Error('no engine shim command');
  const flags = [
    '--state-dir',
    l.stateDir,
    '--key',
    l.key,
    '--replica',
    l.replicaId,
    '--rank',
    String(l.rank),
    '--generation',
    String(l.generation),
    '--port',
    String(l.port),
  ];
  const shim = spawn(bin, [...pre, ...flags, '--', ...l.command], {
    detached: true,
    stdio: 'ignore',
    env: { ...process.env, ...l.env },
  });
  shim.unref();
  const early: { exit?: EngineExit } = {};
  shim.once(
    'error',
    (err) =>
      void (early.exit = {
        code: null,
        signal: null,
        error: `engine shim: ${err.message}`,
        at: new Date().toISOString(),
      }),
  );
  shim.once(
    'exit',
    (code, signal) =>
      void (early.exit = {
        code,
        signal,
        error: `engine shim exited before the engine ran (code ${code}, signal ${signal})`,
        at: new Date().toISOString(),
      }),
  );
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const exit = readEngineExit(l.stateDir, l.key);
    if (exit) return { kind: 'exited', exit };
    const state = readEngineState(l.stateDir, l.key);
    if (state) return { kind: 'running', state };
    if (early.exit) return { kind: 'exited', exit: readEngineExit(l.stateDir, l.key) ?? early.exit };
    if (Date.now() > deadline) {
      shim.kill('SIGKILL');
      throw new Error(`the engine shim recorded no engine within ${timeoutMs / 1000}s`);
    }
    await sleep(5);
  }
}

/** How long a live shim may outlast its dead engine before the exit counts as unrecorded. */
const SHIM_LINGER_MS = 5000;

/**
 * Resolves with the engine's exit once it is gone (its exit record; or, when its shim died too, an exit with
 * code and signal null), or with null when `signal` aborts first. Polls: an adopted engine is not our child.
 */
export async function watchEngine(
  dir: string,
  st: EngineState,
  signal: AbortSignal,
  pollMs = 200,
): Promise<EngineExit | null> {
  let engineGoneAt = 0;
  while (!signal.aborted) {
    const exit = readEngineExit(dir, st.key);
    if (exit) return exit;
    const live = liveness(st);
    if (!live.engine) {
      engineGoneAt ||= Date.now();
      if (!live.shim || Date.now() - engineGoneAt > SHIM_LINGER_MS) {
        return (
          readEngineExit(dir, st.key) ?? {
            code: null,
            signal: null,
            error: 'gone without an exit record (its shim was gone too)',
            at: new Date().toISOString(),
          }
        );
      }
    }
    await new Promise<void>((r) => {
      const done = (): void => {
        clearTimeout(t);
        signal.removeEventListener('abort', done);
        r();
      };
      const t = setTimeout(done, live.engine ? pollMs : 20);
      signal.addEventListener('abort', done);
    });
  }
  return null;
}

/** Sends `sig` to `pid` only if it is still the process that started at `startTime`. */
function signalIfSame(pid: number, startTime: string, sig: NodeJS.Signals): void {
  if (!sameProcess(pid, startTime)) return;
  try {
    process.kill(pid, sig);
  } catch {
    /* exited meanwhile */
  }
}

/**
 * Stops an engine: SIGTERM through its shim (or to the engine itself when the shim is gone), SIGKILL after
 * `graceMs`; resolves once the engine and its shim are both gone.
 */
export async function stopEngine(st: EngineState, graceMs: number): Promise<void> {
  const first = liveness(st);
  // One SIGTERM only: the shim passes it on, and a second one would cut an engine's graceful stop short.
  if (first.shim) signalIfSame(st.shimPid, st.shimStartTime, 'SIGTERM');
  else signalIfSame(st.enginePid, st.engineStartTime, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  let killed = false;
  while (liveness(st).engine) {
    if (!killed && Date.now() > deadline) {
      signalIfSame(st.enginePid, st.engineStartTime, 'SIGKILL');
      killed = true;
    }
    await sleep(25);
  }
  // The shim writes the exit record and exits right after its engine.
  const shimDeadline = Date.now() + 2000;
  while (liveness(st).shim) {
    if (Date.now() > shimDeadline) signalIfSame(st.shimPid, st.shimStartTime, 'SIGKILL');
    await sleep(10);
  }
}

/**
 * How runShard reaches engine processes: the functions above (real processes behind their shims), or a stand-in
 * (llmgw sim-fleet runs each node's sim engines inside its own process: workers/sim-fleet/engines.ts).
 */
export interface EngineProcesses {
  find(dir: string, key: string): Found;
  launch(l: LaunchInput): ReturnType<typeof launchEngine>;
  watch(dir: string, st: EngineState, signal: AbortSignal): Promise<EngineExit | null>;
  stop(st: EngineState, graceMs: number): Promise<void>;
  liveness(st: EngineState): { engine: boolean; shim: boolean };
}

/** Engines as processes of their own, behind the engine shim (every real agent). */
export const ENGINE_PROCESSES: EngineProcesses = {
  find: findEngine,
  launch: (l) => launchEngine(l),
  watch: (dir, st, signal) => watchEngine(dir, st, signal),
  stop: stopEngine,
  liveness,
};

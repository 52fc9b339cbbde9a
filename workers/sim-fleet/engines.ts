/**
 * The simulated nodes' engines: the sim engine's own server (lib/sim/server.ts), started inside the fleet's process
 * instead of as a process behind the engine shim. Only the process is simulated: each shard's engine is launched
 * from the command the agent built for it, serves /health and completions on the node's address and port, and its
 * end (closed, or a broken group) is an exit the shard sees like a real one.
 */
import type { EngineProcesses, Found, LaunchInput } from '../../activities/node/engines';
import type { EngineExit, EngineState } from '../../lib/engine-state';
import { parseSimArgv } from '../../lib/sim/argv';
import { visibleDevices } from '../../lib/sim/gpu-locks';
import { startSimEngine, type SimEngine } from '../../lib/sim/server';
import { SIMULATED_SIM_ARGV } from '../agent';

interface Running {
  state: EngineState;
  engine: SimEngine;
  exit: EngineExit | null;
}

/** Every simulated node's in-process engines, and what the fleet asks of them. */
export interface InProcessEngines extends EngineProcesses {
  /** Engines serving now. */
  count(): number;
  /** Closes every engine of `stateDir` (a node's) at once, as a machine that lost power: no exit is recorded. */
  killNode(stateDir: string): Promise<void>;
  closeAll(): Promise<void>;
}

let nextPid = 1;

/** A registry of in-process sim engines, keyed by each node's state dir and the shard key. */
export function inProcessEngines(): InProcessEngines {
  const all = new Map<string, Running>();
  const id = (dir: string, key: string): string => `${dir}\u0000${key}`;

  const launch = async (l: LaunchInput): ReturnType<EngineProcesses['launch']> => {
    const [bin, ...args] = l.command;
    if (bin !== SIMULATED_SIM_ARGV[0])
      return { kind: 'exited', exit: { code: 1, signal: null, error: `not a sim engine: ${bin}`, at: now() } };
    const opts = parseSimArgv(args);
    let engine: SimEngine;
    try {
      // No GPU lock files: every engine of the fleet is one process, so a lock's owner could not tell them apart.
      engine = await startSimEngine({
        ...opts,
        gpuLockDir: undefined,
        devices: visibleDevices(l.env?.CUDA_VISIBLE_DEVICES),
      });
    } catch (err) {
      return { kind: 'exited', exit: { code: 1, signal: null, error: (err as Error).message, at: now() } };
    }
    const pid = nextPid++;
    const state: EngineState = {
      key: l.key,
      replicaId: l.replicaId,
      rank: l.rank,
      generation: l.generation,
      port: l.port,
      shimPid: -pid,
      shimStartTime: 'in-process',
      enginePid: -pid,
      engineStartTime: 'in-process',
      command: l.command.join(' '),
      devices: l.env?.CUDA_VISIBLE_DEVICES ?? null,
      startedAt: now(),
    };
    const r: Running = { state, engine, exit: null };
    all.set(id(l.stateDir, l.key), r);
    void engine.exited.then(({ code, reason }) => {
      r.exit = { code, signal: null, ...(code === 0 ? {} : { error: reason }), at: now() };
    });
    return { kind: 'running', state };
  };

  const find = (dir: string, key: string): Found => {
    const r = all.get(id(dir, key));
    if (!r) return { kind: 'none' };
    return r.exit ? { kind: 'exited', state: r.state, exit: r.exit } : { kind: 'live', state: r.state };
  };

  const byState = (st: EngineState): Running | undefined =>
    [...all.values()].find((r) => r.state.enginePid === st.enginePid);

  const forget = (r: Running): void => {
    for (const [k, v] of all) if (v === r) all.delete(k);
  };

  return {
    find,
    launch,
    async watch(_dir, st, signal) {
      const r = byState(st);
      if (!r) return { code: null, signal: null, error: 'gone without an exit record', at: now() };
      const aborted = new Promise<null>((res) => signal.addEventListener('abort', () => res(null), { once: true }));
      const exit = await Promise.race([r.engine.exited.then(() => r.exit), aborted]);
      return exit;
    },
    async stop(st) {
      const r = byState(st);
      if (!r) return;
      await r.engine.close();
      forget(r);
    },
    liveness(st) {
      const alive = byState(st)?.exit === null;
      return { engine: alive, shim: alive };
    },
    count: () => [...all.values()].filter((r) => !r.exit).length,
    async killNode(stateDir) {
      const mine = [...all.entries()].filter(([k]) => k.startsWith(`${stateDir}\u0000`));
      for (const [k] of mine) all.delete(k);
      await Promise.all(mine.map(([, r]) => r.engine.close()));
    },
    async closeAll() {
      const rs = [...all.values()];
      all.clear();
      await Promise.all(rs.map((r) => r.engine.close()));
    },
  };
}

const now = (): string => new Date().toISOString();

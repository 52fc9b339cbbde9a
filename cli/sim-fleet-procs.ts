/**
 * `llmgw sim-fleet --fleet-proc P`: the fleet's nodes spread over P child processes, each `llmgw sim-fleet` over its
 * share. One Node process runs every agent's timers, TLS and JSON on one event loop (and one Temporal runtime); past
 * a few hundred nodes that loop, not the control path being measured, is what falls behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EXIT_WITH_PARENT, stopProcess } from '../lib/process';
import type { Log } from './log';

/** The running children. */
export interface FleetChildren {
  pids: number[];
  close(): Promise<void>;
}

/** The `[first, count]` of each of `procs` shares of `nodes` nodes from index `first` (the first shares one larger). */
export function fleetShares(nodes: number, first: number, procs: number): [number, number][] {
  const out: [number, number][] = [];
  let at = first;
  for (let k = 0; k < procs; k++) {
    const count = Math.floor(nodes / procs) + (k < nodes % procs ? 1 : 0);
    out.push([at, count]);
    at += count;
  }
  return out;
}

/**
 * Starts the children (this CLI again, with `argv` and each one's --nodes/--first) and resolves once every one logs
 * `sim-fleet running`; their other lines pass through to this process's output. A child that exits first fails
 * the start (and the others are stopped).
 */
export async function startFleetChildren(o: {
  nodes: number;
  first: number;
  procs: number;
  argv: string[];
  log: Log;
}): Promise<FleetChildren> {
  const children: ChildProcess[] = [];
  let closing = false;
  const close = async (): Promise<void> => {
    closing = true;
    await Promise.all(children.map((c) => stopProcess(c, 30_000)));
  };
  const running = fleetShares(o.nodes, o.first, o.procs).map(([first, count], k) => {
    const child = spawn(
      process.execPath,
      [
        ...process.execArgv,
        process.argv[1] as string,
        'sim-fleet',
        ...['--nodes', String(count), '--first', String(first)],
        ...o.argv,
      ],
      // Gone with this process, also when it is SIGKILLed (the role checks its parent).
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, [EXIT_WITH_PARENT]: '1' } },
    );
    children.push(child);
    return new Promise<void>((resolve, reject) => {
      const pass = (stream: NodeJS.ReadableStream | null, to: NodeJS.WriteStream): void => {
        if (!stream) return;
        createInterface({ input: stream }).on('line', (line) => {
          // This process says when the whole fleet runs; a child's own "running" only counts it in.
          if (line.includes('"sim-fleet running"')) {
            o.log('fleet process running', { process: k, pid: child.pid, first, nodes: count });
            resolve();
          } else to.write(`${line}\n`);
        });
      };
      pass(child.stdout, process.stdout);
      pass(child.stderr, process.stderr);
      child.once('exit', (code, signal) =>
        reject(
          new Error(
            `fleet process ${k} (nodes ${first}…${first + count - 1}) exited (${signal ?? code}) before it ran`,
          ),
        ),
      );
    });
  });
  try {
    await Promise.all(running);
  } catch (err) {
    await close();
    throw err;
  }
  for (const [k, c] of children.entries())
    c.once('exit', (code, signal) => {
      if (closing) return;
      o.log('FLEET PROCESS EXITED: its nodes are gone', { level: 'error', process: k, code, signal });
    });
  return { pids: children.map((c) => c.pid ?? 0), close };
}

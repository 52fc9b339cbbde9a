/**
 * What the engine shim adds to an engine's start (it is on the rebuild path): spawn → /health 200 for the sim
 * engine spawned directly (as runShard did before) and through the shim (launchEngine), interleaved, N runs each.
 * `node --require tsx/cjs test/bench/engine-shim.ts [N]`
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchEngine, stopEngine } from '../../activities/node/engines';
import { engineShimArgv } from '../../lib/engine-state';
import { stopProcess } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';
import { freePort } from '../helpers/ports';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until200(port: number, t0: number): Promise<number> {
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return performance.now() - t0;
    } catch { /* not yet */ }
    if (performance.now() - t0 > 20_000) throw new Error(`port ${port} never served`);
    await sleep(2);
  }
}

const engineArgs = (port: number): string[] => [...simEngineArgv(), '--model', 'bench', '--port', String(port)];

async function direct(): Promise<number> {
  const port = await freePort();
  const t0 = performance.now();
  const [bin, ...args] = engineArgs(port);
  const child = spawn(bin as string, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const ms = await until200(port, t0);
  await stopProcess(child, 3000);
  return ms;
}

async function shimmed(dir: string, i: number): Promise<{ ready: number; recorded: number }> {
  const port = await freePort();
  const t0 = performance.now();
  const r = await launchEngine({ stateDir: dir, key: `bench-${i}.g0.r0`, replicaId: `bench-${i}`, rank: 0, generation: 0, port, shimArgv: engineShimArgv(), command: engineArgs(port) });
  const recorded = performance.now() - t0;
  if (r.kind !== 'running') throw new Error(`engine did not run: ${JSON.stringify(r.exit)}`);
  const ready = await until200(port, t0);
  await stopEngine(r.state, 3000);
  return { ready, recorded };
}

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length - 1) * p))] ?? NaN;
const fmt = (xs: number[]): string => `median ${pct(xs, 0.5).toFixed(0)} ms, p90 ${pct(xs, 0.9).toFixed(0)} ms`;

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? 20);
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-shim-'));
  // Warm tsx's compile cache for both entrypoints.
  await direct();
  await shimmed(dir, -1);
  const d: number[] = [];
  const s: number[] = [];
  const rec: number[] = [];
  const paired: number[] = [];
  for (let i = 0; i < n; i++) {
    const a = await direct();
    const b = await shimmed(dir, i);
    d.push(a);
    s.push(b.ready);
    rec.push(b.recorded);
    paired.push(b.ready - a);
  }
  rmSync(dir, { recursive: true, force: true });
  process.stdout.write([
    `sim engine spawn -> /health 200, ${n} runs each, interleaved:`,
    `  direct child         ${fmt(d)}`,
    `  through the shim     ${fmt(s)}   (engine recorded in the state dir: ${fmt(rec)})`,
    `  added by the shim    ${fmt(paired)} (paired)`,
    '',
  ].join('\n'));
}

void main();

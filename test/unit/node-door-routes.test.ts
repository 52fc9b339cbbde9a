/** The door process's routes, read from engine records as the agent's shims write them (workers/node-door/routes.ts). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { enginePaths, procStartTime, shardKey, writeJsonAtomic, type EngineState } from '../../lib/engine-state';
import { readRoutes, RouteWatch } from '../../workers/node-door/routes';
import { waitFor } from '../helpers/wait';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-door-routes-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Records an engine of `replicaId` (this test process stands in for a live one; pid 2^22-1 for a dead one). */
function record(replicaId: string, o: { generation?: number; rank?: number; port: number; live?: boolean }): string {
  const key = shardKey(replicaId, o.generation ?? 1, o.rank ?? 0);
  const pid = o.live === false ? 4_194_303 : process.pid;
  writeJsonAtomic(enginePaths(dir, key).state, {
    key,
    replicaId,
    rank: o.rank ?? 0,
    generation: o.generation ?? 1,
    port: o.port,
    shimPid: pid,
    shimStartTime: procStartTime(process.pid) ?? '',
    enginePid: pid,
    engineStartTime: procStartTime(process.pid) ?? '',
    command: 'sim',
    startedAt: new Date().toISOString(),
  } satisfies EngineState);
  return key;
}

test("every live rank 0 engine without an exit record, the newest generation of each replica; logs don't count", async () => {
  record('a', { port: 20001 });
  record('a', { port: 20002, rank: 1 }); // a worker rank: not served by the door
  record('b', { port: 20003, generation: 1 });
  record('b', { port: 20004, generation: 2 });
  record('c', { port: 20005, live: false }); // its processes are gone
  const d = record('d', { port: 20006 });
  writeJsonAtomic(enginePaths(dir, d).exit, { code: 1, signal: null, at: new Date().toISOString() });
  writeFileSync(enginePaths(dir, record('e', { port: 20007 })).log, 'engine output\n');
  expect(Object.fromEntries(readRoutes(dir))).toEqual({ a: 20001, b: 20004, e: 20007 });

  const seen: Record<string, number>[] = [];
  const watch = new RouteWatch(dir, (next) => void seen.push(Object.fromEntries(next)), 60_000);
  watch.start();
  try {
    expect(watch.port('b')).toBe(20004);
    // A new record is seen at once (inotify), not at the next period (a minute here).
    record('f', { port: 20008 });
    await waitFor(() => watch.port('f') === 20008, { timeoutMs: 2000, what: 'the new record routed' });
    expect(seen.at(-1)).toEqual({ a: 20001, b: 20004, e: 20007, f: 20008 });
  } finally {
    watch.stop();
  }
});

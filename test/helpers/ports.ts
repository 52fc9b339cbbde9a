/** A free TCP port on 127.0.0.1 (bind 0, read, close). */
import { createServer } from 'node:net';
import { portFree } from '../../lib/port-holder';

/** Asks the kernel for a free port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/**
 * Test port plan, below the kernel's ephemeral range (32768+, where every `listen(0)` and outgoing connection of
 * every test lands) and apart from the default local cluster (7233-9480, engines 20000-21999), so tests pass beside
 * a running cluster and never take each other's ports between a check and a listen:
 * - 10000-19999: test clusters (`--base-port`): their listeners at base+0 to +12 and their engines at +13 to +212;
 * - 22000-32699: the engine ranges of in-process test clusters (`testConfig`), 100 ports each, the jest workers'
 *   slots interleaved so two tests running at once never share one.
 * (Two flakes came from these overlapping: a test cluster's gateway port taken by another test's engine after the
 * cluster's port check, so its third start exited 1; and an engine range holding a test cluster's gateway, which
 * answered /health for a replica whose engine could not bind, then 404 for its model.)
 */
const CLUSTER_BASES = { first: 10_000, last: 19_780 };
const ENGINE_SLOTS = { first: 22_000, count: 107, size: 100 };

/**
 * A `--base-port` for a test cluster in 10000-19780 (above), with its listeners free now. Random, so tests beside a
 * running cluster do not meet.
 */
export async function clusterBasePort(): Promise<number> {
  const choices = (CLUSTER_BASES.last - CLUSTER_BASES.first) / 10 + 1;
  for (let tries = 0; tries < 50; tries++) {
    const base = CLUSTER_BASES.first + Math.floor(Math.random() * choices) * 10;
    // Every listener the cluster checks (cli/cluster/ports.ts): Temporal, UI, control plane, gateway, Temporal's
    // door, the five metrics listeners at +5 to +9, the node doors at +10 to +12.
    const ports = Array.from({ length: 13 }, (_, i) => base + i);
    if ((await Promise.all(ports.map(portFree))).every(Boolean)) return base;
  }
  throw new Error(`no free base port in ${CLUSTER_BASES.first}-${CLUSTER_BASES.last} after 50 tries`);
}

/** The next of this worker's slots to give out; the first is picked at random. */
let nextEngineSlot: number | null = null;
/**
 * The first of 100 engine ports for an in-process test cluster: this jest worker's slots only (worker w of the run
 * takes the slots ≡ w−1 mod the worker count, so tests in different workers never share a range), from a random
 * start, then the next of its slots for each further cluster of this process.
 */
export function testEnginePortBase(): number {
  const workers = Math.max(1, Number(process.env.LLMGW_JEST_WORKERS ?? 2));
  const worker = Math.max(0, Number(process.env.JEST_WORKER_ID ?? 1) - 1) % workers;
  const mine = Math.floor((ENGINE_SLOTS.count - 1 - worker) / workers) + 1;
  nextEngineSlot ??= Math.floor(Math.random() * mine);
  const slot = (nextEngineSlot++ % mine) * workers + worker;
  return ENGINE_SLOTS.first + slot * ENGINE_SLOTS.size;
}

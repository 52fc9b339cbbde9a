/**
 * A fleet of simulated nodes in one process: each runs the real agent (workers/agent: its certificate,
 * registration, heartbeats, the node worker through the door, shard supervision); only the hardware (the fake
 * nvidia-smi and sminfo of test/fixtures, a sysfs tree) and the engine process (workers/sim-fleet/engines.ts) are
 * simulated. Every node has a loopback address of its own (127.1.x.y), so its engine ports are its own as on a
 * machine. The agents share the process's one Temporal Runtime; each has its own connection and worker.
 */
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { programHelp } from '../../lib/engines/help';
import { PROJECT_ROOT } from '../../lib/paths';
import { simEngineArgv } from '../../lib/sim/argv';
import { parseNodeId } from '../../lib/types';
import { startAgent } from '../agent';
import type { Agent } from '../agent/options';
import { inProcessEngines, type InProcessEngines } from './engines';

// The checkout's, also when this runs from the compiled build (dist/build/ has no test/).
const FIXTURES = resolve(PROJECT_ROOT, 'test/fixtures');

/** What the fleet is made of and where it reports. */
export interface SimFleetOptions {
  /** How many nodes, and the index of the first (node ids are `fleet-<index>`, 4 digits) */
  nodes: number;
  first?: number;
  /** Fake GPUs per node */
  gpus: number;
  /** InfiniBand fabrics the nodes are spread over (node i on `ib-<i mod F>`); 0: every node an island */
  fabrics: number;
  /** Control plane URLs (the agents' --server) */
  servers: string[];
  /**
   * The cluster CA certificate, and each node's certificate and key (CN = node id), asked for as each node starts:
   * it must not hold the event loop (llmgw sim-fleet makes the key off it and has the CA sign a CSR).
   */
  caPem: string;
  certificate: (nodeId: string) => Promise<{ certPem: string; keyPem: string }>;
  /** Where the nodes' state dirs and hardware scripts go */
  dir: string;
  /** Agents starting at once (default 16) */
  parallel?: number;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** Each node's own log lines (default: only its warnings and errors, to `log`) */
  nodeLog?: (node: string, msg: string, fields?: Record<string, unknown>) => void;
}

/** A running fleet. */
export interface SimFleet {
  nodes: string[];
  engines: InProcessEngines;
  close(): Promise<void>;
}

/** The node id of fleet index `i`. */
export function fleetNodeId(i: number): string {
  return `fleet-${String(i).padStart(4, '0')}`;
}

/** Node `i`'s own loopback address: 127.1.0.1 upwards (every 127/8 address is this machine's). */
export function fleetNodeHost(i: number): string {
  const n = i + 1;
  return `127.${1 + ((n >> 16) & 255)}.${(n >> 8) & 255}.${n & 255}`;
}

/** A script at `file` that runs `fixture` with `env` (the fixtures read their fake hardware from the environment). */
function wrapper(file: string, fixture: string, env: Record<string, string>): string {
  const vars = Object.entries(env)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(' ');
  writeFileSync(file, `#!/bin/sh\n${vars} exec ${JSON.stringify(join(FIXTURES, fixture))} "$@"\n`);
  chmodSync(file, 0o755);
  return file;
}

/** The sim engine's real help, read once (one process) for every node's engine probe. */
function sharedHelp(): NonNullable<Parameters<typeof startAgent>[0]['simulated']>['programHelp'] {
  let once: ReturnType<typeof programHelp> | undefined;
  return (engine, program, prefix) =>
    engine === 'sim' ? (once ??= programHelp('sim', program, simEngineArgv())) : programHelp(engine, program, prefix);
}

/** Starts the fleet's agents, `parallel` at a time; resolves when every one has registered and runs its worker. */
export async function startSimFleet(o: SimFleetOptions): Promise<SimFleet> {
  const engines = inProcessEngines();
  const simulated = { processes: engines, programHelp: sharedHelp() };
  const first = o.first ?? 0;
  const ids = Array.from({ length: o.nodes }, (_, k) => fleetNodeId(first + k));
  const agents: Agent[] = [];
  let closing = false;
  const nodeLog =
    o.nodeLog ??
    ((node: string, msg: string, f?: Record<string, unknown>): void => {
      if (f?.level === 'warn' || f?.level === 'error') o.log(msg, { node, ...f });
    });

  const startOne = async (k: number): Promise<void> => {
    const i = first + k;
    const id = ids[k] as string;
    const cert = await o.certificate(id);
    const dir = join(o.dir, id);
    mkdirSync(dir, { recursive: true });
    const fabric = o.fabrics > 0 ? `ib-${i % o.fabrics}` : null;
    const nvidiaSmi = wrapper(join(dir, 'nvidia-smi'), 'nvidia-smi', {
      FAKE_NVIDIA_GPUS: String(o.gpus),
      FAKE_NVIDIA_SEED: id,
    });
    // One subnet manager per fabric: its GUID names the fabric, as on real cabling.
    const sminfo = wrapper(join(dir, 'sminfo'), 'sminfo', {
      FAKE_SMINFO_GUID: `0x98039b0300${(0x9fa1c0 + (i % Math.max(1, o.fabrics))).toString(16)}`,
    });
    const agent = await startAgent({
      nodeId: parseNodeId(id),
      server: o.servers,
      tls: { caPem: o.caPem, certPem: cert.certPem, keyPem: cert.keyPem },
      nvidiaSmi,
      noGpu: o.gpus === 0,
      ibRoot: join(FIXTURES, fabric ? 'sysfs/two-hdr' : 'sysfs/none'),
      sminfo,
      cpuinfo: '/proc/cpuinfo',
      fabrics: fabric ? [fabric] : [],
      advertiseHost: fleetNodeHost(i),
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'engines'),
      stopEnginesOnExit: true,
      simulated,
      log: (msg, f) => nodeLog(id, msg, f),
    });
    if (closing) await agent.close();
    else agents.push(agent);
  };

  const t0 = Date.now();
  let next = 0;
  let failed: unknown = null;
  const runner = async (): Promise<void> => {
    while (next < o.nodes && !closing) {
      const k = next++;
      await startOne(k).catch((err: unknown) => {
        failed ??= err;
        closing = true;
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(o.parallel ?? 16, o.nodes) }, runner));
  if (failed) {
    await Promise.all(agents.map((a) => a.close().catch(() => undefined)));
    await engines.closeAll();
    throw failed;
  }
  o.log('fleet registered', { nodes: o.nodes, first: ids[0], last: ids.at(-1), seconds: (Date.now() - t0) / 1000 });
  return {
    nodes: ids,
    engines,
    async close() {
      closing = true;
      await Promise.all(
        agents.map((a) => a.close().catch((err: Error) => o.log('agent close failed', { error: err.message }))),
      );
      await engines.closeAll();
    },
  };
}

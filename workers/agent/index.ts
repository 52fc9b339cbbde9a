/**
 * The node agent: discovers the node, registers and heartbeats with its control planes (failing over between
 * them), runs the node worker on `node-<id>` through the door of the control plane in use, and at start collects
 * engines a previous agent left that no shard wants. This file composes the parts; each lives beside it
 * (discovery, control-planes, control-client, renewal, weights, worker).
 */
import { EngineSignals } from './engine-signals';
import { join } from 'node:path';
import { createNodeActivities } from '../../activities/node';
import { createEngineSetup } from '../../activities/node/engine-setup';
import { collectOrphans, type Collection } from '../../activities/node/gc';
import { simEngineArgv } from '../../lib/sim/argv';
import { assignedShards, register, startHeartbeat } from './control-client';
import { ControlPlanes, controlClient } from './control-planes';
import { discover } from './discovery';
import { markCleanStop, previousAgentCrashed } from './handover';
import type { Agent, AgentOptions } from './options';
import { startRenewal } from './renewal';
import { startAgentDoor } from './node-door';
import { startAgentDoorProcess } from './door-process';
import { startNodeWeights } from './weights';
import { startRankFence, sweepFences } from './rank-fence';
import { nodeConnection, startNodeWorker } from './worker';
import { ensureWritableDir } from './writable-dir';
import { startMetricsListener } from '../../gateway/metrics';
import { agentMetrics } from './metrics';

/** The sim engine's argv prefix on a simulated node: its engines run in the fleet's process (opts.simulated). */
export const SIMULATED_SIM_ARGV = ['llmgw-sim-engine-in-process'];

/** Starts the agent: discovery, registration, heartbeat loop and node worker. */
export async function startAgent(agentOpts: AgentOptions): Promise<Agent> {
  // With --metrics, the agent's log also counts engine starts, exits and weights fetched (metrics.ts).
  const metrics = agentOpts.metrics ? agentMetrics() : null;
  const opts = metrics ? { ...agentOpts, log: metrics.countingLog(agentOpts.log) } : agentOpts;
  ensureWritableDir(opts.stateDir, '--state-dir', 'pass --state-dir DIR the agent may write to');
  const gpus = { count: 0, caps: [] as string[] };
  // What the last probe offered is offered again at once (and its shards' engines adopted); the control plane
  // has every registering node probe again (ensureEngines), which updates both.
  const engines = createEngineSetup({
    ...opts.engineSetup,
    stateDir: join(opts.stateDir, 'engine-setup'),
    sim: opts.simulated ? SIMULATED_SIM_ARGV : simEngineArgv(),
    ...(opts.simulated ? { programHelp: opts.simulated.programHelp } : {}),
    gpus: () => gpus.count,
    computeCaps: () => gpus.caps,
    log: opts.log,
  });
  const known = engines.statuses();
  const inventory = await discover(opts, known.length ? known.map((s) => s.engine) : undefined);
  inventory.engines = engines.offered();
  gpus.count = inventory.gpus.length;
  gpus.caps = inventory.gpus.flatMap((g) => (g.computeCap ? [g.computeCap] : []));
  let closing = false;
  const control = new ControlPlanes({
    servers: typeof opts.server === 'string' ? [opts.server] : opts.server,
    client: controlClient(opts.tls),
    log: opts.log,
  });
  // The node's door, before registering: its port is part of the inventory (placement routes replicas through it).
  // By default a process of its own that outlives the agent (door-process.ts): it reads its routes from the engine
  // records and gathers the engines' signals itself. In the agent (--door-in-agent), the node activities fill
  // `serving` and the agent gathers the signals.
  const serving = new Map<string, number>();
  const doorInAgent = opts.door !== undefined && (opts.doorInAgent === true || opts.simulated !== undefined);
  // Each rank 0 engine's queue and KV-cache use, read twice a second; the door serves them to gateways.
  const signals = new EngineSignals({ log: opts.log });
  const doorProcess =
    opts.door && !doorInAgent
      ? await startAgentDoorProcess({
          nodeId: opts.nodeId,
          stateDir: opts.stateDir,
          listen: opts.door,
          servers: typeof opts.server === 'string' ? [opts.server] : opts.server,
          tls: opts.tls,
          log: opts.log,
        }).catch(async (err: unknown) => {
          await control.close();
          throw err;
        })
      : null;
  const door =
    opts.door && doorInAgent
      ? await startAgentDoor({
          nodeId: opts.nodeId,
          listen: opts.door,
          tls: opts.tls,
          control,
          serving,
          signals: () => signals.snapshot(),
          log: opts.log,
        }).catch(async (err: unknown) => {
          await control.close();
          throw err;
        })
      : null;
  const doorPort = door?.port ?? doorProcess?.port;
  if (doorPort !== undefined) inventory.door = { port: doorPort };
  // Gathered only where a door in the agent serves them: it is the gateways' one way to this node's engines.
  if (door) signals.start();
  const afterCrash = previousAgentCrashed(opts.stateDir);
  const reg = await register(control, opts, inventory, () => closing, afterCrash).catch(async (err: unknown) => {
    signals.stop();
    await door?.close();
    await doorProcess?.close({ stopDoor: opts.stopEnginesOnExit });
    await control.close();
    throw err;
  });
  opts.log('registered', {
    node: opts.nodeId,
    server: control.current,
    gpus: inventory.gpus.length,
    fabrics: inventory.fabrics,
    temporal: reg.temporal.address,
    door: reg.temporal.mtls,
    inferenceDoor: doorPort !== undefined ? `${opts.advertiseHost}:${doorPort}` : null,
    ...(doorProcess ? { doorPid: doorProcess.pid() } : {}),
  });

  const connection = await nodeConnection(reg.temporal, opts.tls);
  const weights = opts.weights
    ? await startNodeWeights({
        nodeId: opts.nodeId,
        control,
        tls: opts.tls,
        dir: opts.weights.dir,
        listen: opts.weights.listen,
        advertiseHost: opts.advertiseHost,
        log: opts.log,
      }).catch(async (err: unknown) => {
        await connection.close();
        await control.close();
        throw err;
      })
    : null;
  const supervised = new Set<string>();
  if (metrics)
    Object.assign(metrics.sources, { engines: () => engines.statuses(), supervised, weightsDir: opts.weights?.dir });
  // Before the worker polls: a shard adopted from the last agent finds stale fences already gone.
  const fence = await startRankFence({
    enabled: opts.rankFence === true,
    ...(opts.nftArgv ? { nftArgv: opts.nftArgv } : {}),
    stateDir: opts.stateDir,
    supervised,
    log: opts.log,
  });
  const stopping = new AbortController();
  const activities = {
    ...createNodeActivities({
      nodeId: opts.nodeId,
      behindDoor: opts.door !== undefined,
      engineArgv: (engine, program) => engines.programs(engine, program) ?? [],
      engines,
      inventory,
      stateDir: opts.stateDir,
      stopEnginesOnExit: opts.stopEnginesOnExit,
      supervised,
      serving,
      ...(door ? { signals } : {}),
      assigned: () => assignedShards(control, opts.nodeId),
      stopping: stopping.signal,
      ...(fence ? { fence } : {}),
      ...(opts.simulated ? { processes: opts.simulated.processes } : {}),
      log: opts.log,
    }),
    ...weights?.activities,
  };
  const worker = await startNodeWorker({
    nodeId: opts.nodeId,
    temporal: reg.temporal,
    tls: opts.tls,
    connection,
    activities,
    closing: () => closing,
    log: opts.log,
  });
  // After the worker polls, so a shard rescheduled for this node is adopted rather than collected.
  let gc: Collection | undefined;
  void collectOrphans({
    stateDir: opts.stateDir,
    assigned: () => assignedShards(control, opts.nodeId),
    supervised,
    log: opts.log,
  }).then(
    (c) => {
      gc = c;
      if (closing) c.cancel();
      if (c.stopped.length || c.pending.length || c.removed.length)
        opts.log('engine records collected', { stopped: c.stopped, pending: c.pending, removed: c.removed });
      // Engines the collection stopped (now, or at their adoption deadline) take their fences with them.
      if (fence) {
        void sweepFences(fence, opts.stateDir, supervised, opts.log);
        void c.settled.then(() => (closing ? undefined : sweepFences(fence, opts.stateDir, supervised, opts.log)));
      }
    },
    (err: Error) => opts.log('engine collection failed', { error: err.message }),
  );

  const renewal = startRenewal(
    control,
    opts,
    () => closing,
    (creds) => {
      weights?.useCredentials(creds);
      door?.useCredentials(creds);
      doorProcess?.useCredentials(creds);
      void worker.renewed(creds).catch((err: Error) =>
        opts.log('NODE WORKER NOT MOVED to the renewed certificate: it keeps the old one until the agent restarts', {
          level: 'error',
          error: err.message,
        }),
      );
    },
  );
  // Each answer names the door of the control plane that gave it: after a failover, the worker follows.
  const heartbeat = startHeartbeat(control, opts, inventory, reg.heartbeatMs, () => closing, worker.follow);
  const metricsListener =
    metrics && opts.metrics ? await startMetricsListener({ ...opts.metrics, registry: metrics.registry }) : null;

  return {
    inventory,
    metricsUrl: metricsListener?.url ?? null,
    async close(): Promise<void> {
      closing = true;
      await metricsListener?.close();
      stopping.abort();
      heartbeat.stop();
      renewal.stop();
      gc?.cancel();
      await worker.stop();
      markCleanStop(opts.stateDir);
      await weights?.close();
      signals.stop();
      await door?.close();
      // The door serves on through the agent's restart, unless the node's engines stop with it.
      await doorProcess?.close({ stopDoor: opts.stopEnginesOnExit });
      await worker.disconnect();
      await control.close();
    },
  };
}

/** Activities on a node's own queue (`node-<id>`): supervising the engine processes of its shards. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { buildEngineCommand, type ShardLaunch } from '../../lib/engines/command';
import { ENGINE_SPECS, type EngineProgram } from '../../lib/engines/registry';
import type { SignalTargets } from '../../lib/engines/signals';
import { engineApiHost } from '../../lib/node-door';
import { describePortHolder, portHolder, tryListen } from '../../lib/port-holder';
import {
  engineShimArgv,
  logTail,
  removeEngineFiles,
  shardKey,
  type EngineExit,
  type EngineState,
} from '../../lib/engine-state';
import type { EngineName, EngineStatus, NodeInventory } from '../../lib/types';
import { hasCode, type ErrorCode, type LlmgwError } from '../../lib/errors';
import { SHARD_HEARTBEAT_S } from '../../lib/liveness';
import { peerAddresses, type RankFence, type ShardFence } from '../../lib/rank-fence';
import { createEngineSetup, type EngineSetup, type EnsureEnginesInput } from './engine-setup';
import { ENGINE_PROCESSES, type EngineProcesses } from './engines';
import { isAssigned, type AssignedShard } from './gc';
import { createListenActivities } from './listen';

export interface NodeDeps {
  nodeId: string;
  /** The node runs a door (llmgw agent --door): engines listen on loopback behind it */
  behindDoor?: boolean;
  /**
   * The argv prefix that runs one program of an engine on this node (sim: the sim engine entrypoint; llama.cpp:
   * its llama-server or, on worker ranks, its ggml-rpc-server); empty when the engine is not offered here.
   */
  engineArgv: (engine: EngineName, program: EngineProgram) => string[];
  /** Installs and probes the engines the control plane names (the agent's; default: sim only, from engineArgv). */
  engines?: EngineSetup;
  /**
   * This node's declared fabrics and adapters (the agent's inventory): a multi-node rank is launched with exactly
   * its fabric's adapters (NCCL_IB_HCA). Without it (tests), ranks get no NCCL environment.
   */
  inventory?: Pick<NodeInventory, 'fabrics' | 'adapters'>;
  /** Grace between SIGTERM and SIGKILL when a shard is stopped, ms. */
  stopGraceMs?: number;
  /**
   * Where engines are recorded so the next agent finds them again (the agent's `--state-dir`). Without it,
   * a fresh temp dir no later agent knows of — so engines then stop with the worker (see stopEnginesOnExit).
   */
  stateDir?: string;
  /** Where the node keeps one lock file per GPU index, passed to engines that honour it (default `<stateDir>/gpu-locks`). */
  gpuLockDir?: string;
  /** Stop engines when the worker shuts down, instead of leaving them for the next agent (default: no, or yes without a stateDir). */
  stopEnginesOnExit?: boolean;
  /** The argv prefix of the engine shim (default engineShimArgv()). */
  shimArgv?: string[];
  /** Filled with the key of every engine a runShard supervises right now (the agent's orphan collection reads it). */
  supervised?: Set<string>;
  /** Filled with replica id -> loopback port of every rank 0 engine running here now (the node's door reads it). */
  serving?: Map<string, number>;
  /** Told of every rank 0 engine that serves here now, so the agent reads its queue and cache (engine-signals.ts). */
  signals?: SignalTargets;
  /**
   * The shards the control plane places on this node (the agent asks it over HTTP). With it, a shard whose
   * activity Temporal timed out (heartbeats lost while Temporal was unreachable) keeps its engine serving
   * until the replica runs the shard again (and adopts it) or lets it go; without it, the engine stops at once.
   */
  assigned?: () => Promise<AssignedShard[]>;
  /** Aborted when the agent stops: ends the wait above. */
  stopping?: AbortSignal;
  /**
   * Fences each multi-node rank's ports (its engine's rankPorts) to its replica's nodes while its engine runs
   * (lib/rank-fence.ts); absent: those ports are open to whoever reaches the node (agent --no-rank-fence, tests).
   */
  fence?: Pick<RankFence, 'install' | 'remove'>;
  /** How engines are launched, found, watched and stopped (default: processes behind the shim; sim-fleet: in-process). */
  processes?: EngineProcesses;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface RunShardInput extends ShardLaunch {
  replicaId: string;
  /** The replica's rebuild count: a rebuilt shard is a new engine, never the old one adopted (default 0). */
  generation?: number;
}

/** Which shard `stopShard` stops: one rank of one generation of a replica (its engine's key). */
export interface StopShardInput {
  replicaId: string;
  generation?: number;
  rank: number;
}

/**
 * What `stopShard` found: the engine stopped by the runShard that supervised it (which then completed), stopped by
 * `stopShard` itself (recorded in the state dir, no runShard here: an agent that restarted and has not adopted it
 * yet), or none to stop (never started, already gone, or run by a later run of the replica than the stop's).
 */
export interface StopShardResult {
  engine: 'stopped' | 'stopped-unsupervised' | 'none';
}

/** What each heartbeat of a running shard carries (shown in the Temporal UI): what identifies the process. */
export interface ShardHeartbeat {
  /** The engine's pid (undefined until it runs). */
  pid: number | undefined;
  shimPid: number | undefined;
  /** `${replicaId}.g${generation}.r${rank}`: its files in the agent's state dir. */
  key: string;
  state: 'starting' | 'running';
  /** True when this agent found the engine running and took it over. */
  adopted: boolean;
  since: string;
  command: string;
  /** The GPU indices it runs on (its CUDA_VISIBLE_DEVICES), when placement gave it any. */
  gpus?: number[];
}

const TAIL_LINES = 15;
/** How long a stopped shard's key is remembered, so a run of it that reaches this agent after its stop does nothing. */
const STOPPED_KEEP_MS = 3600_000;

/** The runShard that supervises a key now, and how `stopShard` tells it to stop its engine. */
interface Claim {
  /** The workflow run (the replica's) that runs the shard: only its own stopShard stops it. */
  runId: string;
  stop: AbortController;
  /** Resolves once that runShard has ended (its engine gone, stopped or left for the next agent). */
  ended: Promise<void>;
  end: () => void;
}

/** True when a cancellation comes from this worker shutting down, not from the workflow. */
function isWorkerShutdown(err: unknown): boolean {
  return (
    Context.current().cancellationDetails?.workerShutdown === true ||
    (err instanceof Error && err.message === 'WORKER_SHUTDOWN')
  );
}

/** How long a new engine's port may stay held before its shard fails (an engine of this node still stopping). */
const PORT_WAIT_MS = 3000;

function describeExit(e: EngineExit): string {
  if (e.error) return `could not run (${e.error})`;
  if (e.signal) return `was killed by ${e.signal}`;
  return e.code === null ? 'exited' : `exited with code ${e.code}`;
}

/** Builds the node activities for one node. */
export function createNodeActivities(deps: NodeDeps) {
  const log = deps.log ?? ((): void => undefined);
  const stopGraceMs = deps.stopGraceMs ?? 15_000;
  const stateDir = deps.stateDir ?? mkdtempSync(join(tmpdir(), `llmgw-engines-${deps.nodeId}-`));
  const stopOnExit = deps.stopEnginesOnExit ?? deps.stateDir === undefined;
  const gpuLockDir = deps.gpuLockDir ?? join(stateDir, 'gpu-locks');
  const shimArgv = deps.shimArgv ?? engineShimArgv();
  const supervised = deps.supervised ?? new Set<string>();
  const {
    find: findEngine,
    launch: launchEngine,
    watch: watchEngine,
    stop: stopEngine,
    liveness,
  } = deps.processes ?? ENGINE_PROCESSES;
  const serving = deps.serving;
  /** Where the agent reads rank 0's engine: loopback behind a door, else the address it listens on. */
  const engineBase = (input: RunShardInput): string => {
    const h = engineApiHost({ host: input.host, behindDoor: deps.behindDoor === true });
    return `http://${h.includes(':') ? `[${h}]` : h}:${input.port}`;
  };
  /**
   * Before a new engine starts: its port must be free on the address it binds. An engine that cannot bind exits,
   * but one that binds late (vLLM, after loading its weights) leaves the port's holder answering the replica's
   * health check meanwhile, and the replica would be routed to it. A holder that lets go within PORT_WAIT_MS (an
   * engine of this node still stopping) is waited for; otherwise the shard fails, naming it, and the replica is
   * placed again (on other ports: a lease given up is the last one reused).
   */
  const portMustBeFree = async (input: RunShardInput, where: string): Promise<void> => {
    const host =
      input.rank === 0 ? engineApiHost({ host: input.host, behindDoor: deps.behindDoor === true }) : input.host;
    const until = Date.now() + PORT_WAIT_MS;
    // Only a refused bind counts: another error (an address this node does not have) is the engine's to report.
    const held = async (): Promise<boolean> => (await tryListen(input.port, host)) === 'EADDRINUSE';
    let taken = await held();
    while (taken && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 100));
      taken = await held();
    }
    if (taken) {
      const holder = portHolder(input.port);
      const by = describePortHolder(input.port, 'a process this agent cannot see', holder);
      throw ApplicationFailure.create({
        type: 'LLMGW_PORT_TAKEN' satisfies ErrorCode,
        nonRetryable: true,
        message: `${where}: port ${input.port} on ${host} is held by ${by}, not by this replica's engine, so it was not started; the replica is placed again on other ports. Stop that process, or move server.yaml enginePorts to a range nothing else on the node uses`,
        details: [{ port: input.port, host, pid: holder?.pid ?? null }],
      });
    }
  };
  // The runShard that supervises each key now: a re-run of a shard adopts its engine from an earlier run
  // that is still winding down, and the earlier one must then leave the engine (and the key) alone.
  const claims = new Map<string, Claim>();
  // Shards stopShard stopped, by `<workflow run>/<key>`, when: a run of one that reaches this agent later (scheduled
  // before the stop, picked up after it) starts nothing. Per workflow run, as a replica id and its generation come
  // back when a model is scaled down and up again.
  const stoppedShards = new Map<string, number>();
  // Ends early when the agent stops; the abort listener goes with each sleep (a long wait sleeps every second).
  const sleep = (ms: number): Promise<void> =>
    new Promise((r) => {
      const wake = (): void => {
        clearTimeout(t);
        r();
      };
      const t = setTimeout(() => {
        deps.stopping?.removeEventListener('abort', wake);
        r();
      }, ms);
      deps.stopping?.addEventListener('abort', wake, { once: true });
    });

  /** The shard's command; a rank placed on a fabric this node does not declare fails for good (no retry fixes it). */
  const buildCommand = (input: RunShardInput): ReturnType<typeof buildEngineCommand> => {
    try {
      return buildEngineCommand(
        { ...input, gpuLockDir, ...(deps.behindDoor ? { behindDoor: true } : {}) },
        deps.inventory ? { nodeId: deps.nodeId, inventory: deps.inventory } : undefined,
      );
    } catch (err) {
      if (hasCode(err, 'LLMGW_BAD_REQUEST'))
        throw ApplicationFailure.nonRetryable((err as LlmgwError).message, 'LLMGW_BAD_REQUEST' satisfies ErrorCode);
      throw err;
    }
  };

  /** The fence a shard's engine needs (its rank ports, its replica's nodes), or null when it needs none. */
  const shardFence = async (input: RunShardInput, key: string): Promise<ShardFence | null> => {
    const ports = ENGINE_SPECS[input.profile.engine].rankPorts(input);
    if (!deps.fence || ports.length === 0) return null;
    const hosts = [...new Set((input.peers ?? []).map((p) => p.host))];
    if (hosts.length === 0) {
      log('RANK FENCE SKIPPED: the shard names no peers, so its rank ports stay open', { key, ports });
      return null;
    }
    return { key, ports, peers: await peerAddresses(hosts) };
  };

  /** Removes a shard's fence once its engine is gone; a failure is logged (the next agent start sweeps it). */
  const unfence = async (key: string): Promise<void> => {
    try {
      await deps.fence?.remove(key);
    } catch (err) {
      log('RANK FENCE NOT REMOVED', { level: 'error', key, error: (err as Error).message });
    }
  };

  /** After a server-side timeout: waits until the engine is adopted, let go, stopped, gone, or the agent stops. */
  async function outliveTimeout(
    key: string,
    token: Claim,
    st: EngineState,
  ): Promise<'adopted' | 'released' | 'stopped' | 'exited' | 'stopping'> {
    for (;;) {
      if (claims.get(key) !== token) return 'adopted';
      if (token.stop.signal.aborted) return 'stopped';
      if (!liveness(st).engine) return 'exited';
      if (deps.stopping?.aborted) return 'stopping';
      try {
        if (!isAssigned(await (deps.assigned as () => Promise<AssignedShard[]>)(), st)) return 'released';
      } catch {
        /* the control plane is unreachable too: keep serving, ask again */
      }
      await sleep(1000);
    }
  }

  const engines =
    deps.engines ??
    createEngineSetup({
      enginesDir: join(stateDir, 'installs'),
      stateDir: join(stateDir, 'engine-setup'),
      bins: {},
      sim: deps.engineArgv('sim', 'sim'),
      gpus: () => 0,
      log,
    });

  return {
    ...createListenActivities({ nodeId: deps.nodeId, stateDir }),

    /**
     * Installs what server.yaml's engines name for this node, runs each engine's programs and checks their flags
     * (engine-check), and offers only what passed; returns every engine's status for the control plane to
     * record. Heartbeats what it is doing (a pip install of vLLM takes minutes).
     */
    async ensureEngines(input: EnsureEnginesInput): Promise<EngineStatus[]> {
      const ctx = Context.current();
      let last: unknown = { step: 'starting' };
      const timer = setInterval(() => ctx.heartbeat(last), 2000);
      try {
        return await engines.ensure(input, (p) => {
          last = p;
          ctx.heartbeat(p);
        });
      } finally {
        clearInterval(timer);
      }
    },

    /**
     * Runs one shard's engine for as long as the replica wants it, adopting the one a previous agent left
     * running under the same key. Heartbeats every SHARD_HEARTBEAT_S (a backstop: nothing waits on it; a fifth of
     * a shorter heartbeat timeout); fails with `LLMGW_ENGINE_EXITED` (exit code, output tail; no retry, the
     * replica rebuilds) when the engine dies, also while no agent watched it. Told to stop by `stopShard`: stops the engine, then completes. Cancelled
     * by the workflow (its fallback when stopShard could not run; the cancel arrives with the next heartbeat):
     * stops the engine, then throws the CancelledFailure. Cancelled because this worker shuts down: leaves the
     * engine running and fails with `LLMGW_AGENT_STOPPED` (unless stopEnginesOnExit).
     */
    async runShard(input: RunShardInput): Promise<void> {
      const ctx = Context.current();
      const cmd = buildCommand(input);
      const [bin, ...prefix] = deps.engineArgv(cmd.engine, cmd.program);
      if (!bin)
        throw ApplicationFailure.nonRetryable(
          `engine ${cmd.engine} (${cmd.program}) is not offered on node ${deps.nodeId}: it is not named in server.yaml engines, or its install or probe failed (llmgw ctl nodes says why)`,
          'LLMGW_ENGINE_MISSING' satisfies ErrorCode,
        );
      const generation = input.generation ?? 0;
      const key = shardKey(input.replicaId, generation, input.rank);
      const where = `engine ${cmd.engine} for ${input.replicaId} rank ${input.rank} on ${deps.nodeId}`;
      const fields = { replica: input.replicaId, rank: input.rank, key, port: input.port };
      if (stoppedShards.has(stopMark(key))) {
        log('shard already stopped by its replica: nothing started', fields);
        return;
      }
      const beat: ShardHeartbeat = {
        pid: undefined,
        shimPid: undefined,
        key,
        state: 'starting',
        adopted: false,
        since: new Date().toISOString(),
        command: `${cmd.engine} ${cmd.args.join(' ')}`,
        ...(input.gpus ? { gpus: input.gpus } : {}),
      };
      let end = (): void => undefined;
      const token: Claim = {
        runId: workflowRunId(),
        stop: new AbortController(),
        ended: new Promise<void>((r) => void (end = r)),
        end: () => end(),
      };
      claims.set(key, token);
      supervised.add(key);
      ctx.heartbeat(beat);
      // Every SHARD_HEARTBEAT_S, or five times within a shorter heartbeat timeout (tests schedule shards with 3 s).
      const beatMs = Math.min(SHARD_HEARTBEAT_S * 1000, (ctx.info.heartbeatTimeoutMs || Infinity) / 5);
      const timer = setInterval(() => ctx.heartbeat(beat), beatMs);
      const exitedFailure = (e: EngineExit, pid: number | undefined, unwatched: boolean): ApplicationFailure => {
        const tail = logTail(stateDir, key, TAIL_LINES);
        removeEngineFiles(stateDir, key, { keepLog: true });
        log('shard exited', { ...fields, pid, code: e.code, signal: e.signal, unwatched });
        return ApplicationFailure.create({
          message: `${where} ${describeExit(e)}${unwatched ? ` while no agent watched it (at ${e.at})` : ''}; last output:\n${tail}`,
          type: 'LLMGW_ENGINE_EXITED' satisfies ErrorCode,
          nonRetryable: true,
          details: [{ code: e.code, signal: e.signal, stderrTail: tail, key, pid }],
        });
      };
      let st: EngineState | undefined;
      try {
        // Before the engine listens (or, adopted, again: the table may have been flushed meanwhile).
        const fence = await shardFence(input, key).catch((err: Error) => {
          throw ApplicationFailure.nonRetryable(
            `${where}: its rank ports could not be fenced: ${err.message}`,
            'LLMGW_RANK_FENCE_FAILED' satisfies ErrorCode,
          );
        });
        if (fence) {
          await deps.fence?.install(fence).catch((err: Error) => {
            throw ApplicationFailure.nonRetryable(
              `${where}: its rank ports ${fence.ports.join(', ')} could not be fenced to its peers: ${err.message}`,
              'LLMGW_RANK_FENCE_FAILED' satisfies ErrorCode,
            );
          });
          log('rank fence installed', { ...fields, ports: fence.ports, peers: fence.peers });
        }
        const found = findEngine(stateDir, key);
        if (found.kind === 'exited') throw exitedFailure(found.exit, found.state?.enginePid, true);
        // The same engine only: its port, its arguments and its GPUs (a record from before GPU pinning has none to compare).
        const sameGpus =
          found.kind === 'live' &&
          (found.state.devices === undefined || found.state.devices === (cmd.env.CUDA_VISIBLE_DEVICES ?? null));
        if (
          found.kind === 'live' &&
          sameGpus &&
          found.state.port === input.port &&
          found.state.command.endsWith(cmd.args.join(' '))
        ) {
          st = found.state;
          beat.adopted = true;
          log('shard adopted', {
            ...fields,
            pid: st.enginePid,
            shimPid: st.shimPid,
            since: st.startedAt,
            gpus: st.devices,
          });
        } else {
          if (found.kind === 'live') {
            log("stopping a recorded engine that is not this shard's", {
              ...fields,
              pid: found.state.enginePid,
              recordedPort: found.state.port,
            });
            await stopEngine(found.state, stopGraceMs);
          } else if (found.kind === 'vanished') {
            log('recorded engine is gone without an exit record; starting a new one', {
              ...fields,
              pid: found.state.enginePid,
            });
          }
          await portMustBeFree(input, where);
          const launched = await launchEngine({
            stateDir,
            key,
            replicaId: input.replicaId,
            rank: input.rank,
            generation,
            port: input.port,
            shimArgv,
            command: [bin, ...prefix, ...cmd.args],
            env: cmd.env,
          });
          if (launched.kind === 'exited') throw exitedFailure(launched.exit, undefined, false);
          st = launched.state;
          log('shard started', {
            ...fields,
            pid: st.enginePid,
            shimPid: st.shimPid,
            gpus: cmd.env.CUDA_VISIBLE_DEVICES,
          });
        }
        Object.assign(beat, { pid: st.enginePid, shimPid: st.shimPid, state: 'running', since: st.startedAt });
        ctx.heartbeat(beat);
        if (input.rank === 0) {
          serving?.set(input.replicaId, input.port);
          deps.signals?.track(input.replicaId, input.profile.engine, engineBase(input));
        }

        const stopWatching = new AbortController();
        const outcome = await Promise.race([
          watchEngine(stateDir, st, stopWatching.signal).then((exit) => ({ kind: 'exited' as const, exit })),
          ctx.cancelled.then(
            () => ({ kind: 'cancelled' as const, err: undefined as unknown }),
            (err: unknown) => ({ kind: 'cancelled' as const, err }),
          ),
          aborted(token.stop.signal).then(() => ({ kind: 'stop' as const })),
        ]);
        stopWatching.abort();
        if (outcome.kind === 'exited' && outcome.exit) throw exitedFailure(outcome.exit, st.enginePid, false);
        if (outcome.kind === 'stop') {
          // stopShard: the replica stops this shard. The engine goes, then the activity completes.
          await stopEngine(st, stopGraceMs);
          removeEngineFiles(stateDir, key, { keepLog: true });
          log('shard stopped', fields);
          return;
        }
        const err = outcome.kind === 'cancelled' ? outcome.err : undefined;
        if (isWorkerShutdown(err) && !stopOnExit) {
          log('shard left running for the next agent', { ...fields, pid: st.enginePid, shimPid: st.shimPid });
          throw ApplicationFailure.create({
            type: 'LLMGW_AGENT_STOPPED' satisfies ErrorCode,
            nonRetryable: true,
            message: `agent on ${deps.nodeId} stopped; engine pid ${st.enginePid} left running for the next agent to adopt`,
            details: [{ key, pid: st.enginePid, shimPid: st.shimPid }],
          });
        }
        const why = ctx.cancellationDetails;
        if (outcome.kind === 'cancelled' && deps.assigned && (why?.timedOut || why?.notFound) && !why.cancelRequested) {
          // Temporal gave up on this activity (its heartbeats did not arrive: Temporal restarting or unreachable),
          // but the engine is healthy and may still be routed. Stopping it now would fail requests the replica
          // still sends it; it serves on until the shard runs again here (and adopts it) or is placed elsewhere.
          log(
            'shard timed out on the Temporal server; engine keeps serving until the replica adopts it again or lets it go',
            { ...fields, pid: st.enginePid, reason: why.timedOut ? 'timed out' : 'not found' },
          );
          const ended = await outliveTimeout(key, token, st);
          if (ended === 'released' || ended === 'stopped' || (ended === 'stopping' && stopOnExit)) {
            await stopEngine(st, stopGraceMs);
            removeEngineFiles(stateDir, key, { keepLog: true });
          }
          log(`timed-out shard's engine ${ended}`, { ...fields, pid: st.enginePid });
          throw err instanceof Error ? err : new CancelledFailure('shard timed out');
        }
        // A later run of this shard adopted the engine: it is that run's now.
        if (claims.get(key) !== token) throw err instanceof Error ? err : new CancelledFailure('shard handed over');
        // Cancelled by the workflow (or the agent stops its engines on exit): the engine goes, then the activity ends.
        await stopEngine(st, stopGraceMs);
        removeEngineFiles(stateDir, key, { keepLog: true });
        log('shard stopped', fields);
        throw err instanceof Error ? err : new CancelledFailure('shard stopped');
      } finally {
        clearInterval(timer);
        // The fence goes with the engine; one left running (for the next agent, or a later run) keeps it.
        if (claims.get(key) === token && !(st && liveness(st).engine)) await unfence(key);
        if (claims.get(key) === token) {
          claims.delete(key);
          supervised.delete(key);
          if (input.rank === 0 && serving?.get(input.replicaId) === input.port) serving.delete(input.replicaId);
          if (input.rank === 0) deps.signals?.untrack(input.replicaId, engineBase(input));
        }
        token.end();
      }
    },

    /**
     * Stops one shard's engine and answers once it is gone: how the replica stops a shard (a stop, a rebuild, a
     * drain's move) without waiting for its runShard's next heartbeat to carry a cancel. The runShard supervising
     * the engine here stops it and completes; an engine recorded in the state dir that no runShard supervises (its
     * agent restarted and has not adopted it yet) is stopped here. A run of the shard that reaches this agent
     * afterwards starts nothing. Only the workflow run that runs the shard stops it. Idempotent.
     */
    async stopShard(input: StopShardInput): Promise<StopShardResult> {
      const key = shardKey(input.replicaId, input.generation ?? 0, input.rank);
      const now = Date.now();
      for (const [k, at] of stoppedShards) if (now - at > STOPPED_KEEP_MS) stoppedShards.delete(k);
      stoppedShards.set(stopMark(key), now);
      const fields = { replica: input.replicaId, rank: input.rank, key };
      const claim = claims.get(key);
      if (claim && claim.runId !== workflowRunId()) {
        // A stop that waited in the queue (its agent down) while the replica ended and came back under the same id.
        log("not stopping shard: it belongs to a later run of its replica than the stop's", fields);
        return { engine: 'none' };
      }
      if (claim) {
        log('stopping shard', fields);
        claim.stop.abort();
        await claim.ended;
        return { engine: 'stopped' };
      }
      const found = findEngine(stateDir, key);
      if (found.kind !== 'live') return { engine: 'none' };
      log('stopping shard (no runShard supervises its engine here)', { ...fields, pid: found.state.enginePid });
      // Kept from the orphan collection meanwhile (it leaves supervised keys alone).
      supervised.add(key);
      try {
        await stopEngine(found.state, stopGraceMs);
        removeEngineFiles(stateDir, key, { keepLog: true });
        await unfence(key);
      } finally {
        if (!claims.has(key)) supervised.delete(key);
      }
      log('shard stopped', fields);
      return { engine: 'stopped-unsupervised' };
    },
  };
}

export type NodeActivities = ReturnType<typeof createNodeActivities>;

/** The workflow run of the current activity (a replica's run). */
function workflowRunId(): string {
  return Context.current().info.workflowExecution?.runId ?? '';
}

/** A stopped shard's mark: the workflow run that stopped it (and runs it) and its key. */
function stopMark(key: string): string {
  return `${workflowRunId()}/${key}`;
}

/** Resolves when `signal` is aborted (at once if it already is). */
function aborted(signal: AbortSignal): Promise<void> {
  return signal.aborted
    ? Promise.resolve()
    : new Promise((r) => signal.addEventListener('abort', () => r(), { once: true }));
}

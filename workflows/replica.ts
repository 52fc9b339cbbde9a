/** The replica workflow: place, start shards (rank 0 first), wait until it serves, route; rebuild on failure; drain and stop on request. */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  TimeoutFailure,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  patched,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';
import type { PlaceResult, ShardPlan } from '../activities/control';
import { ENGINE_SPECS } from '../lib/engines/registry';
import { placedText } from '../lib/placement';
import { DEFAULT_START_TIMEOUT_S } from '../lib/liveness';
import { needsWeights } from '../lib/weights/source';
import { searchAttributes } from '../lib/names';
import type { ReplicaId, ReplicaState } from '../lib/types';
import { replicaReadySignal } from './contracts/model';
import {
  agentRestartedSignal,
  nodeLostSignal,
  nodesChangedSignal,
  statusQuery,
  stopSignal,
  type ReplicaInput,
  type ReplicaStatus,
} from './contracts/replica';
import { control, inflightWait, nodeListen, nodeShards, nodeStop, nodeWeights, serving } from './proxies';

/** How long a stopping replica kept its engines after leaving the routing table, before it waited for the gateways' in-flight reports. */
const DRAIN_MS = 2000;
/** Marks histories whose stop path waits for the requests in flight (waitInflight) instead of DRAIN_MS. */
const INFLIGHT_WAIT_PATCH = 'stop-waits-for-inflight';
/** Marks histories where a workers-first engine's rank 0 starts only once each worker listens (waitListening). */
const RANK_ORDER_PATCH = 'workers-listen-before-rank-0';
/**
 * Marks histories whose stop and rebuild stop each shard with stopShard on its node (the runShard then completes)
 * beside the cancel, instead of the cancel alone (a cancel reaches a runShard only with its heartbeat).
 */
const STOP_SHARD_PATCH = 'stop-shard-by-activity';
/**
 * Marks histories whose placement records its own states (placing/rebuilding, then starting: placeReplica's
 * `record`) and whose health wait marks the replica ready (waitServing's `ready`), instead of a setReplicaState
 * activity for each: three Temporal activities and their workflow tasks less per replica start (issue 24).
 */
const RECORDS_IN_ACTIVITIES_PATCH = 'states-recorded-by-placement-and-health-wait';
/**
 * Marks histories whose health wait, when it ended other than by the start timeout, waits again for what is left
 * of that timeout instead of failing the replica: its heartbeat timing out (the control plane's waits worker
 * starved, or its path to Temporal slow), its worker shutting down (a control plane restarting) or MySQL refusing
 * the ready record are llmgw's own path, not the engine. At 500 nodes with both cores saturated the heartbeat
 * timeout alone rebuilt 8 healthy replicas of 2,500 in one deploy (docs/operations.md, "Timers").
 */
const HEALTH_REWAIT_PATCH = 'health-wait-rewaits-after-its-heartbeat-timeout';
/** The pause before a health wait that ended on llmgw's own path (not the start timeout) waits again. */
const REWAIT_PAUSE_MS = 2000;
const WAIT_RETRY = '10s';
const CRASH_BACKOFF_MAX_MS = 60_000;
/** A replica that served for this long before failing resets its crash count. */
const HEALTHY_RUN_MS = 60_000;
/** Runs of one shard in a row (each shorter than HEALTHY_RUN_MS) that may end in a lost agent or Temporal before the replica is rebuilt. */
const MAX_RERUNS = 3;

type Outcome = { kind: 'served' } | { kind: 'failed'; message: string; timedOutNode: string | null } | { kind: 'stop' };

/** Keeps one replica of a model running until asked to stop. */
export async function replica(input: ReplicaInput): Promise<ReplicaStatus> {
  const status: ReplicaStatus = {
    state: 'pending',
    reason: null,
    endpoint: null,
    shards: [],
    rebuilds: input.rebuilds ?? 0,
  };
  let stopRequested = false;
  let nodesChanged = false;
  let crashes = 0;
  const exclude = new Set<string>();
  setHandler(stopSignal, () => void (stopRequested = true));
  setHandler(nodesChangedSignal, () => void (nodesChanged = true));
  // Set while a placement runs; a node lost outside one needs nothing (the next placement excludes down nodes).
  let lostNode: ((nodeId: string, why: string) => void) | null = null;
  const lost = new Set<string>();
  setHandler(nodeLostSignal, ({ nodeId, why }) => lostNode?.(nodeId, why));
  const agentRestarts = new Map<string, number>();
  setHandler(
    agentRestartedSignal,
    ({ nodeId }) => void agentRestarts.set(nodeId, (agentRestarts.get(nodeId) ?? 0) + 1),
  );
  const startTimeoutS = input.startTimeoutS ?? DEFAULT_START_TIMEOUT_S;
  setHandler(statusQuery, () => status);
  upsertSearchAttributes([
    { key: searchAttributes.model, value: input.model },
    { key: searchAttributes.replica, value: input.replicaId },
  ]);

  // The profile placed last (profiles are tried in catalog order at each placement).
  let profile = input.profile;
  // The state as this workflow shows it (status query, the UI's details); `record` also writes it to MySQL.
  const show = (state: ReplicaState, reason: string | null, endpoint?: string | null): void => {
    status.state = state;
    status.reason = reason;
    if (endpoint !== undefined) status.endpoint = endpoint;
    setCurrentDetails(
      `**${state}**${reason ? ` — ${reason}` : ''}${status.endpoint ? `\n\nendpoint: ${status.endpoint}` : ''}`,
    );
  };
  const record = async (
    state: ReplicaState,
    reason: string | null,
    event?: string,
    endpoint?: string | null,
  ): Promise<void> => {
    show(state, reason, endpoint);
    await control.setReplicaState({
      replicaId: input.replicaId,
      model: input.model,
      profile: profile.name,
      state,
      reason,
      endpoint,
      event,
    });
  };

  while (!stopRequested) {
    lostNode = null;
    lost.clear();
    // A waiting replica retries quietly: it stays 'waiting' (one event per new reason), not placing/waiting every 10 s.
    const before = status.state !== 'waiting' ? (status.rebuilds ? 'rebuilding' : 'placing') : null;
    const recordsInActivities = patched(RECORDS_IN_ACTIVITIES_PATCH);
    if (before && !recordsInActivities) await record(before, status.reason);
    else if (before) show(before, status.reason);
    const placement: PlaceResult = await control.placeReplica({
      replicaId: input.replicaId,
      model: input.model,
      profile: input.profile,
      ...(input.profiles ? { profiles: input.profiles } : {}),
      exclude: [...exclude],
      ...(recordsInActivities
        ? { record: { before: before && { state: before, reason: status.reason }, profile: profile.name } }
        : {}),
    });
    if (placement.kind === 'unplaceable') {
      if (status.state !== 'waiting' || status.reason !== placement.reason)
        await record('waiting', placement.reason, placement.reason);
      nodesChanged = false;
      await condition(() => stopRequested || nodesChanged, WAIT_RETRY);
      exclude.clear();
      continue;
    }
    profile = placement.profile ?? input.profile;
    status.shards = placement.shards.map(({ rank, nodeId, port, gpus }) => ({
      rank,
      nodeId,
      port,
      ...(gpus ? { gpus } : {}),
    }));
    upsertSearchAttributes([{ key: searchAttributes.node, value: placement.shards.map((s) => s.nodeId) }]);
    if (recordsInActivities) show('starting', null, null);
    else await record('starting', null, placedText(placement, profile.name, (input.profiles?.length ?? 0) > 1), null);

    // One scope per shard, so a stop can take rank 0 (the one serving) down first and let it finish its requests
    // before the worker ranks leave (a worker leaving first would break rank 0's group mid-request).
    const scopes = placement.shards.map(() => new CancellationScope());
    const shards: Promise<void>[] = [];
    const shardNodes: (string | null)[] = [];
    // Per shard: its runShard was scheduled (a stop asks its node), its launch ended (nothing to stop).
    const scheduled = placement.shards.map(() => false);
    const ended = placement.shards.map(() => false);
    // Every node of this placement the control plane found gone, also after a failure (a stop waits for none of them).
    const gone = new Set<string>();
    const generation = status.rebuilds;
    let failure: Outcome | null = null;
    const startedAt = Date.now();
    // A shard's timeout is its node's (the node is excluded from the rebuild's placement); the health check's
    // is the engine's own: it did not serve within the model's start timeout, which counts as a crash.
    const onShardError =
      (nodeId: string | null) =>
      (err: unknown): void => {
        if (isCancellation(err) || failure) return;
        const cause = err instanceof ActivityFailure ? err.cause : undefined;
        const timedOut = cause instanceof TimeoutFailure;
        const message = timedOut
          ? nodeId
            ? `${nodeId}: ${timeoutText(cause.timeoutType)}`
            : `the engine did not serve within ${startTimeoutS}s (the model's startTimeoutS in the catalog)`
          : (cause?.message ?? (err as Error).message ?? String(err));
        failure = { kind: 'failed', message, timedOutNode: timedOut ? nodeId : null };
      };
    // The control plane found a node of this placement gone (no agent, no door call, engines unreachable).
    lostNode = (nodeId, why) => {
      if (!placement.shards.some((s) => s.nodeId === nodeId)) return;
      gone.add(nodeId);
      if (failure?.kind === 'failed') return;
      lost.add(nodeId);
      failure = { kind: 'failed', message: `${nodeId}: ${why}`, timedOutNode: nodeId };
    };
    // Every rank's address in rank order: llama.cpp's rank 0 reaches its workers' rpc-servers by them.
    const peers = [...placement.shards].sort((a, b) => a.rank - b.rank).map(({ host, port }) => ({ host, port }));
    // The health check starts once every shard has its weights: a large download is not a slow engine start.
    const fetched: Promise<void>[] = [];
    // llama.cpp's rank 0 connects to its workers as it starts: each worker must listen first (the engine's rankStart).
    const workersFirst =
      placement.shards.length > 1 &&
      ENGINE_SPECS[profile.engine].rankStart === 'workers-first' &&
      patched(RANK_ORDER_PATCH);
    const workersListening = async (): Promise<void> => {
      await Promise.all(
        placement.shards
          .filter((w) => w.rank > 0)
          .map((w) =>
            nodeListen(w.nodeId, startTimeoutS).waitListening({
              replicaId: input.replicaId,
              generation: status.rebuilds,
              rank: w.rank,
              host: w.host,
              port: w.port,
              timeoutS: startTimeoutS,
            }),
          ),
      );
    };
    const launch = (s: ShardPlan, i: number, weightsFetched: () => void) => async (): Promise<void> => {
      // A URL source is fetched into the node's cache first (resumable, coalesced, from a peer that holds it);
      // sim:// sources and engine-side ids fetch nothing, and schedule nothing.
      let modelPath: string | undefined;
      if (needsWeights(input.source, profile.engine, s.rank)) {
        const r = await nodeWeights(s.nodeId).fetchWeights({
          model: input.model,
          source: input.source,
          replicaId: input.replicaId,
          ...(input.sha256 ? { sha256: input.sha256 } : {}),
        });
        modelPath = r.path;
      }
      weightsFetched();
      if (workersFirst && s.rank === 0) await workersListening();
      let reruns = 0;
      for (;;) {
        const since = Date.now();
        const restartsBefore = agentRestarts.get(s.nodeId) ?? 0;
        scheduled[i] = true;
        try {
          const run = nodeShards(s.nodeId).runShard({
            replicaId: input.replicaId,
            model: input.model,
            source: input.source,
            profile,
            generation: status.rebuilds,
            rank: s.rank,
            world: placement.shards.length,
            host: s.host,
            port: s.port,
            distHost: placement.distHost,
            distPort: placement.distPort,
            fabric: placement.fabric,
            peers,
            ...(modelPath ? { modelPath } : {}),
            ...(s.gpus ? { gpus: s.gpus } : {}),
          });
          // The agent running this shard crashed and a new one registered: this run is orphaned (Temporal would
          // time it out only after SHARD_HEARTBEAT_TIMEOUT_S); run the shard again now for the new agent to adopt.
          // Not cancellable: a stop cancels the run, and must wait for its engine to be gone, not win this race.
          const restarted = CancellationScope.nonCancellable(() =>
            condition(() => (agentRestarts.get(s.nodeId) ?? 0) > restartsBefore),
          ).then(() => 'restarted' as const);
          if ((await Promise.race([run, restarted])) === 'restarted') {
            run.catch(() => undefined);
            reruns = Date.now() - since > HEALTHY_RUN_MS ? 1 : reruns + 1;
            if (reruns <= MAX_RERUNS) continue;
            throw ApplicationFailure.nonRetryable(
              `${s.nodeId}: its agent crashed ${reruns} times in a row`,
              'LLMGW_AGENT_STOPPED',
            );
          }
          return;
        } catch (err) {
          // The agent or Temporal went away but the engine did not: schedule the shard again and let the
          // agent adopt its engine, so the replica keeps serving through an agent restart or upgrade and
          // through a Temporal restart. Bounded, so a shard that keeps losing Temporal is rebuilt instead.
          reruns = Date.now() - since > HEALTHY_RUN_MS ? 1 : reruns + 1;
          if (!isCancellation(err) && reruns <= MAX_RERUNS && (await agentWillAdopt(err, s.nodeId))) continue;
          throw err;
        }
      }
    };
    // In rank order: a head-first engine's rank 0 binds the dist-init port the other ranks join; a workers-first
    // engine's rank 0 waits in its launch until every worker listens.
    placement.shards.forEach((s, i) => {
      let done = (): void => undefined;
      fetched.push(new Promise<void>((r) => void (done = r)));
      const p = (scopes[i] as CancellationScope).run(launch(s, i, done));
      p.catch(onShardError(s.nodeId));
      p.then(
        () => {
          ended[i] = true;
          // A runShard completes only when stopShard stopped it: outside a stop, its engine is gone all the same.
          if (!stopRequested) failure ??= { kind: 'failed', message: `${s.nodeId}: shard stopped`, timedOutNode: null };
        },
        () => void (ended[i] = true),
      );
      shards.push(p);
      shardNodes.push(s.nodeId);
    });
    const healthScope = new CancellationScope();
    const health = healthScope.run(async () => {
      // Cancellable: a shard whose weights never arrive (its fetch cancelled, its node lost) must not hold a stop.
      await Promise.race([Promise.all(fetched), CancellationScope.current().cancelRequested]);
      const rank0 = placement.shards.find((s) => s.rank === 0) ?? (placement.shards[0] as ShardPlan);
      const wait = {
        endpoint: placement.endpoint,
        ...(recordsInActivities
          ? {
              ready: {
                replicaId: input.replicaId,
                model: input.model,
                rank0: { nodeId: rank0.nodeId, port: rank0.port },
              },
            }
          : {}),
      };
      const deadline = Date.now() + startTimeoutS * 1000;
      for (;;) {
        const leftS = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
        try {
          return await serving(leftS).waitServing(wait);
        } catch (err) {
          // Only the start timeout running out is the engine's: the wait never fails on what the engine answers.
          // Anything else (its heartbeat lost, its worker stopping, MySQL) is llmgw's own path: wait again, after a
          // pause so a lasting outage costs a wait every few seconds, not a loop.
          if (isCancellation(err) || isStartTimeout(err) || Date.now() >= deadline || !patched(HEALTH_REWAIT_PATCH))
            throw err;
          await sleep(REWAIT_PAUSE_MS);
        }
      }
    });
    // Whether waitServing marked the replica ready itself (else the workflow records it below).
    let markedReady = false;
    shards.push(
      health.then((r) => {
        markedReady = r?.ready === true;
        failure ??= { kind: 'served' };
      }, onShardError(null)),
    );
    shardNodes.push(null);
    const healthDone = shards[shards.length - 1] as Promise<void>;
    // A shard on a lost node is not waited for: no agent there will ever report its cancellation.
    const stopAll = async (): Promise<void> => {
      healthScope.cancel();
      scopes.forEach((sc) => sc.cancel());
      await Promise.allSettled(shards.filter((_, i) => !lost.has(shardNodes[i] ?? '')));
    };
    // Shard i's engine goes, then its launch ends. stopShard on its node has the agent stop the engine, and its
    // runShard completes; a cancel goes out at once beside it, for what stopShard does not end: a run no agent has
    // picked up (the server cancels it at once), a weights fetch, a runShard on an agent that does not take the stop
    // (its cancel arrives with its next heartbeat, and it too ends only once its engine is gone). The wait is for the
    // shard's own end, never for stopShard (an agent that is down would hold it). A lost node is not waited for.
    const stopShard = async (i: number): Promise<void> => {
      const s = placement.shards[i] as ShardPlan;
      const isGone = (): boolean => gone.has(s.nodeId);
      if (scheduled[i] && !ended[i] && !isGone())
        void CancellationScope.nonCancellable(() =>
          nodeStop(s.nodeId).stopShard({ replicaId: input.replicaId, generation, rank: s.rank }),
        ).catch(() => undefined);
      (scopes[i] as CancellationScope).cancel();
      await Promise.race([(shards[i] as Promise<void>).catch(() => undefined), condition(isGone)]);
    };
    // Rank 0 first when `rankZeroFirst` (a stop: it drains its in-flight requests and exits, then the worker ranks).
    const stopShards = async (rankZeroFirst: boolean): Promise<void> => {
      healthScope.cancel();
      if (rankZeroFirst) await stopShard(0);
      await Promise.all([
        ...placement.shards.map((_, i) => (rankZeroFirst && i === 0 ? Promise.resolve() : stopShard(i))),
        healthDone,
      ]);
    };

    await condition(() => stopRequested || failure !== null);
    let outcome: Outcome = stopRequested ? { kind: 'stop' } : ((failure as Outcome | null) ?? { kind: 'stop' });
    if (outcome.kind === 'served') {
      if (markedReady) show('ready', null, placement.endpoint);
      else await record('ready', null, `serving at ${placement.endpoint}`, placement.endpoint);
      await tellParentReady(input.replicaId);
      failure = null;
      await condition(() => stopRequested || failure !== null);
      outcome = stopRequested ? { kind: 'stop' } : ((failure as Outcome | null) ?? { kind: 'stop' });
    }
    if (outcome.kind === 'stop') {
      await record('stopping', null, 'stop requested: left the routing table, draining');
      // Until no gateway routes it or has a request on it (bounded by the drain grace); before, a fixed 2 s.
      if (patched(INFLIGHT_WAIT_PATCH))
        await inflightWait.waitInflight({ replicaId: input.replicaId, model: input.model });
      else await sleep(DRAIN_MS);
      if (patched(STOP_SHARD_PATCH)) await stopShards(true);
      else {
        healthScope.cancel();
        // Rank 0 drains its in-flight requests and exits; then the worker ranks.
        scopes[0]?.cancel();
        await Promise.allSettled(shards.slice(0, 1));
        await stopAll();
      }
      break;
    }
    if (outcome.kind === 'failed') {
      // Unroutable at once, then stop what is left and build it again.
      await record('rebuilding', outcome.message, `shard failed: ${outcome.message}`, null);
      if (patched(STOP_SHARD_PATCH)) await stopShards(false);
      else await stopAll();
      await control.releaseReplica(input.replicaId);
      if (outcome.timedOutNode) exclude.add(outcome.timedOutNode);
      status.rebuilds++;
      // A lost node is not the replica crashing: it is rebuilt elsewhere at once and does not count toward backoff.
      if (!outcome.timedOutNode) crashes = Date.now() - startedAt > HEALTHY_RUN_MS ? 1 : crashes + 1;
      if (crashes > 1) {
        const backoff = Math.min(1000 * 2 ** (crashes - 1), CRASH_BACKOFF_MAX_MS);
        await record(
          'rebuilding',
          `crash-looping: failed ${crashes} times in a row, next try in ${Math.round(backoff / 1000)}s; last: ${outcome.message}`,
        );
        await condition(() => stopRequested, backoff);
      }
      if (workflowInfo().continueAsNewSuggested) {
        await continueAsNew<typeof replica>({ ...input, rebuilds: status.rebuilds });
      }
    }
  }
  await control.releaseReplica(input.replicaId);
  await record('stopped', null, 'stopped', null);
  return status;
}

/** Lets the deployment that started this replica know it serves (a replacement's original may now stop). */
async function tellParentReady(replicaId: ReplicaId): Promise<void> {
  const parent = workflowInfo().parent;
  if (!parent) return;
  await getExternalWorkflowHandle(parent.workflowId)
    .signal(replicaReadySignal, replicaId)
    .catch(() => undefined);
}

/**
 * True when a shard's failure means "the agent or Temporal went away, the engine did not": the agent said so
 * as it stopped (LLMGW_AGENT_STOPPED), or the shard's heartbeat timed out while the control plane — which judges
 * nodes by every signal it has — does not hold its node down (a wedged worker, a long Temporal outage).
 */
async function agentWillAdopt(err: unknown, nodeId: string): Promise<boolean> {
  const cause = err instanceof ActivityFailure ? err.cause : undefined;
  if (cause instanceof ApplicationFailure && cause.type === 'LLMGW_AGENT_STOPPED') return true;
  if (isHeartbeatTimeout(err)) return control.agentAlive({ nodeId });
  return false;
}

/** The kind of timeout an activity failed with, or null when it did not time out. */
function timeoutOf(err: unknown): TimeoutType | null {
  const cause = err instanceof ActivityFailure ? err.cause : undefined;
  return cause instanceof TimeoutFailure ? (cause.timeoutType ?? null) : null;
}

const isStartTimeout = (err: unknown): boolean => timeoutOf(err) === TimeoutType.START_TO_CLOSE;
const isHeartbeatTimeout = (err: unknown): boolean => timeoutOf(err) === TimeoutType.HEARTBEAT;

function timeoutText(t: TimeoutType | null | undefined): string {
  switch (t) {
    case TimeoutType.HEARTBEAT:
      return 'the shard stopped heartbeating (agent or node down)';
    case TimeoutType.SCHEDULE_TO_START:
      return 'no agent picked the shard up in time (agent down?)';
    default:
      return 'the shard timed out';
  }
}

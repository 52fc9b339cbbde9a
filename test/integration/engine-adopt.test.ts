/**
 * An agent restart restarts no engine: engines run under a detached shim that records them in the agent's
 * state dir; a node worker's shutdown (SIGTERM) or death (SIGKILL) leaves them serving; the next runShard for
 * the same key adopts them by pid and start time; one that died unobserved reports its exit code; a recycled
 * pid is never taken for ours; the agent stops at start the engines no shard wants. Real processes and sim
 * engines throughout; the cross-process case runs the activity through a real Temporal server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import {
  ActivityCancellationDetails,
  defaultPayloadConverter,
  type ApplicationFailure,
  type Payload,
} from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger, NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import type { FastifyInstance } from 'fastify';
import {
  createNodeActivities,
  type NodeDeps,
  type RunShardInput,
  type ShardHeartbeat,
  type StopShardInput,
  type StopShardResult,
} from '../../activities/node';
import { collectOrphans } from '../../activities/node/gc';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { buildControlServer } from '../../gateway/control/server';
import {
  enginePaths,
  procStartTime,
  readEngineExit,
  readEngineState,
  shardKey,
  writeJsonAtomic,
  type EngineState,
} from '../../lib/engine-state';
import { nodeQueue } from '../../lib/names';
import { pidAlive } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { parseNodeId } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent } from '../../workers/agent/options';
import { dropDatabase, startTestTemporal, testMysqlUrl } from '../helpers/cluster-parts';
import { freePort } from '../helpers/ports';
import { certClient, closeCertClients, testTls } from '../helpers/tls';
import type { ShardOutcome } from '../helpers/shard-workflow';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const shardInput = (replicaId: string, port: number, generation?: number): RunShardInput => ({
  replicaId,
  generation,
  model: 'adopt',
  source: 'sim://adopt',
  rank: 0,
  world: 1,
  host: '127.0.0.1',
  port,
  distHost: '127.0.0.1',
  distPort: 0,
  profile: { name: 'one', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '0'] },
});

async function health(port: number): Promise<number> {
  try {
    return (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })).status;
  } catch {
    return 0;
  }
}

/** Every process a test started, killed in afterAll whatever happened. */
const started = new Set<number>();
const track = (st: EngineState | null): void => void (st && [st.enginePid, st.shimPid].forEach((p) => started.add(p)));
const killAll = (): void => {
  for (const pid of started)
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
};
afterAll(killAll);

/** The workflow run of the mock activity contexts (a replica's): stopShard marks a shard stopped for its run. */
const MOCK_RUN_ID = '00000000-0000-0000-0000-00000000000a';

/** One stopShard in a mock activity context of the same workflow run as runInMock's. */
function stopInMock(acts: ReturnType<typeof createNodeActivities>, input: StopShardInput): Promise<StopShardResult> {
  const env = new MockActivityEnvironment(
    { workflowExecution: { workflowId: 'test', runId: MOCK_RUN_ID } },
    { logger: new DefaultLogger('ERROR') },
  );
  return env.run(acts.stopShard, input);
}

/** One runShard in a mock activity context: its heartbeats, its outcome (never an unhandled rejection). */
function runInMock(
  deps: NodeDeps | ReturnType<typeof createNodeActivities>,
  input: RunShardInput,
  workflowRunId = MOCK_RUN_ID,
) {
  // Quiet: the failures are what these tests expect.
  const env = new MockActivityEnvironment(
    { heartbeatTimeoutMs: 10_000, workflowExecution: { workflowId: 'test', runId: workflowRunId } },
    { logger: new DefaultLogger('ERROR') },
  );
  const beats: ShardHeartbeat[] = [];
  env.on('heartbeat', (d: ShardHeartbeat) => beats.push({ ...d }));
  const acts = 'runShard' in deps ? deps : createNodeActivities(deps);
  const outcome = env.run(acts.runShard, input).then(
    () => null,
    (err: unknown) => err as Error & Partial<ApplicationFailure>,
  );
  const running = (): Promise<ShardHeartbeat> =>
    waitFor(() => beats.find((b) => b.state === 'running'), {
      timeoutMs: 15_000,
      what: `runShard ${input.replicaId} to report its engine running`,
    }).then((b) => {
      started.add(b.pid ?? 0).add(b.shimPid ?? 0);
      return b;
    });
  const shutDown = (): void => env.cancel('WORKER_SHUTDOWN', new ActivityCancellationDetails({ workerShutdown: true }));
  const timedOut = (): void => env.cancel('TIMED_OUT', new ActivityCancellationDetails({ timedOut: true }));
  return { env, beats, outcome, running, shutDown, timedOut, cancel: (): void => env.cancel() };
}

describe('runShard in one process (mock activity context, real engines)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-adopt-'));
  const deps: NodeDeps = { nodeId: 'adopt-n1', engineArgv: () => simEngineArgv(), stateDir, stopGraceMs: 3000 };
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  test('a cancel from the workflow stops the engine, and the activity ends only once it is gone', async () => {
    const port = await freePort();
    const run = runInMock(deps, shardInput('cancel-0', port));
    const beat = await run.running();
    expect(beat).toMatchObject({
      key: 'cancel-0.g0.r0',
      adopted: false,
      command: expect.stringContaining(`--port ${port}`),
    });
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    run.cancel();
    const err = await run.outcome;
    expect(err?.name).toBe('CancelledFailure');
    expect([beat.pid, beat.shimPid].filter((p) => pidAlive(p ?? 0))).toEqual([]);
    expect(await health(port)).toBe(0);
    expect(readEngineState(stateDir, 'cancel-0.g0.r0')).toBeNull();
  });

  test('a port another process holds is refused before any engine starts, naming the holder (its health check would have answered for the replica); one let go within the wait is used', async () => {
    const port = await freePort();
    // A stranger that answers /health 200, as another service or a leftover engine would.
    const stranger = createServer((_req, res) => res.writeHead(200).end('{"status":"ok"}'));
    await new Promise<void>((r) => stranger.listen(port, '127.0.0.1', r));
    const held = runInMock(deps, shardInput('held-0', port));
    const err = await held.outcome;
    expect(err?.type).toBe('LLMGW_PORT_TAKEN');
    expect(err?.nonRetryable).toBe(true);
    expect(err?.message).toMatch(
      new RegExp(
        `^engine sim for held-0 rank 0 on adopt-n1: port ${port} on 127\\.0\\.0\\.1 is held by pid ${process.pid} \\(.*\\), not by this replica's engine, so it was not started; the replica is placed again on other ports\\. Stop that process`,
      ),
    );
    expect(held.beats.some((b) => b.state === 'running')).toBe(false);
    expect(readEngineState(stateDir, 'held-0.g0.r0')).toBeNull();
    // Let go a second after the shard asked (an engine of the node still stopping): the shard waits, then starts.
    const later = runInMock(deps, shardInput('held-1', port));
    setTimeout(() => stranger.close(), 1000);
    const beat = await later.running();
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    expect(beat.pid).toBeGreaterThan(0);
    later.cancel();
    expect((await later.outcome)?.name).toBe('CancelledFailure');
  });

  test('stopShard stops the engine its runShard supervises and answers once it is gone; the runShard completes, a late run of it starts nothing; another run of the replica is not touched', async () => {
    const acts = createNodeActivities(deps);
    const port = await freePort();
    const run = runInMock(acts, shardInput('stop-0', port));
    const beat = await run.running();
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    expect(await stopInMock(acts, { replicaId: 'stop-0', generation: 0, rank: 0 })).toEqual({ engine: 'stopped' });
    expect([beat.pid, beat.shimPid].filter((p) => pidAlive(p ?? 0))).toEqual([]);
    expect(await run.outcome).toBeNull(); // completed, not cancelled
    expect(await health(port)).toBe(0);
    expect(readEngineState(stateDir, 'stop-0.g0.r0')).toBeNull();

    // A run of the same shard scheduled before the stop and picked up after it (same workflow run): nothing starts.
    const late = runInMock(acts, shardInput('stop-0', port));
    expect(await late.outcome).toBeNull();
    expect(late.beats).toEqual([]);
    expect(await health(port)).toBe(0);
    // The same replica id and generation in a new workflow run (scaled down, then up again) starts as usual.
    const again = runInMock(acts, shardInput('stop-0', port), '00000000-0000-0000-0000-00000000000b');
    expect((await again.running()).adopted).toBe(false);
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the new run to serve' });
    // The old run's stop, late (it waited in the queue while the agent was down), leaves the new run's engine alone.
    expect(await stopInMock(acts, { replicaId: 'stop-0', generation: 0, rank: 0 })).toEqual({ engine: 'none' });
    expect(await health(port)).toBe(200);
    again.cancel();
    expect((await again.outcome)?.name).toBe('CancelledFailure');
  });

  test('stopShard stops an engine no runShard supervises (its agent stopped, the next one has not adopted it)', async () => {
    const port = await freePort();
    const first = runInMock(deps, shardInput('stop-1', port, 1));
    const beat = await first.running();
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    first.shutDown();
    expect((await first.outcome)?.type).toBe('LLMGW_AGENT_STOPPED');
    expect(await health(port)).toBe(200);
    const next = createNodeActivities(deps); // the next agent
    expect(await stopInMock(next, { replicaId: 'stop-1', generation: 1, rank: 0 })).toEqual({
      engine: 'stopped-unsupervised',
    });
    expect([beat.pid, beat.shimPid].filter((p) => pidAlive(p ?? 0))).toEqual([]);
    expect(readEngineState(stateDir, 'stop-1.g1.r0')).toBeNull();
    expect(await stopInMock(next, { replicaId: 'stop-1', generation: 1, rank: 0 })).toEqual({ engine: 'none' });
  });

  test('a worker shutdown leaves the engine serving; the next runShard adopts it (same pid) and reports its death', async () => {
    const port = await freePort();
    const first = runInMock(deps, shardInput('keep-0', port, 2));
    const beat = await first.running();
    expect(beat.key).toBe('keep-0.g2.r0');
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    first.shutDown();
    const stopped = await first.outcome;
    expect(stopped).toMatchObject({
      type: 'LLMGW_AGENT_STOPPED',
      nonRetryable: true,
      details: [{ key: 'keep-0.g2.r0', pid: beat.pid }],
    });
    expect(stopped?.message).toBe(
      `agent on adopt-n1 stopped; engine pid ${beat.pid} left running for the next agent to adopt`,
    );
    expect(pidAlive(beat.pid ?? 0)).toBe(true);
    expect(await health(port)).toBe(200);

    const second = runInMock(deps, shardInput('keep-0', port, 2));
    const again = await second.running();
    expect(again).toMatchObject({
      pid: beat.pid,
      shimPid: beat.shimPid,
      key: 'keep-0.g2.r0',
      adopted: true,
      since: beat.since,
    });
    expect(await health(port)).toBe(200);
    // No longer our child: its death is seen by polling, within a few hundred ms.
    const killedAt = Date.now();
    process.kill(beat.pid ?? 0, 'SIGKILL');
    const died = await second.outcome;
    expect(Date.now() - killedAt).toBeLessThan(1500);
    expect(died).toMatchObject({ type: 'LLMGW_ENGINE_EXITED', nonRetryable: true });
    expect(died?.message).toMatch(
      /engine sim for keep-0 rank 0 on adopt-n1 was killed by SIGKILL; last output:\n.*serving/s,
    );
  });

  test('a shard Temporal timed out keeps its engine serving while it stays placed: a re-run adopts it; unplaced, it stops', async () => {
    const port = await freePort();
    let placed = true;
    let asked = 0;
    // One agent's activities (shared claims), asking "its control plane" which shards stay placed here.
    const acts = createNodeActivities({
      ...deps,
      assigned: async () => (asked++, placed ? [{ replicaId: 'lost-0', rank: 0, port }] : []),
    });
    const first = runInMock(acts, shardInput('lost-0', port));
    const beat = await first.running();
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the engine to serve' });
    first.timedOut(); // heartbeats lost while Temporal restarted: the server gave up on the activity
    await waitFor(() => asked >= 2, {
      timeoutMs: 5000,
      what: 'the timed-out shard to ask twice whether it is still placed',
    });
    expect(await health(port)).toBe(200);

    const second = runInMock(acts, shardInput('lost-0', port));
    const again = await second.running();
    expect(again).toMatchObject({ pid: beat.pid, adopted: true });
    expect((await first.outcome)?.name).toBe('CancelledFailure');
    expect(await health(port)).toBe(200);

    second.timedOut();
    const askedBefore = asked;
    await waitFor(() => asked >= askedBefore + 2, { timeoutMs: 5000, what: 'the second timed-out run to ask again' });
    expect(await health(port)).toBe(200);
    placed = false; // the replica was rebuilt elsewhere: the engine goes
    expect((await second.outcome)?.name).toBe('CancelledFailure');
    expect(pidAlive(beat.pid ?? 0)).toBe(false);
    expect(await health(port)).toBe(0);
    expect(readEngineState(stateDir, 'lost-0.g0.r0')).toBeNull();
  });

  test('without a control plane to ask, a shard Temporal timed out stops its engine', async () => {
    const run = runInMock(deps, shardInput('lost-1', await freePort()));
    const beat = await run.running();
    run.timedOut();
    expect((await run.outcome)?.name).toBe('CancelledFailure');
    expect(pidAlive(beat.pid ?? 0)).toBe(false);
  });

  test('with stopEnginesOnExit a worker shutdown stops the engine', async () => {
    const port = await freePort();
    const run = runInMock({ ...deps, stopEnginesOnExit: true }, shardInput('exit-0', port));
    const beat = await run.running();
    run.shutDown();
    expect((await run.outcome)?.name).toBe('CancelledFailure');
    expect(pidAlive(beat.pid ?? 0)).toBe(false);
  });

  test('an engine that died while no agent watched reports its exit code and output from the exit file', async () => {
    const trigger = join(stateDir, 'die-now');
    // An "engine" that serves nothing, waits for the trigger file, then fails like a real one would.
    const script = 'echo "engine up"; while [ ! -f "$0" ]; do sleep 0.05; done; echo "CUDA out of memory" >&2; exit 7';
    const shDeps: NodeDeps = { ...deps, engineArgv: () => ['/bin/sh', '-c', script, trigger] };
    const first = runInMock(shDeps, shardInput('oom-0', await freePort()));
    const beat = await first.running();
    first.shutDown();
    expect((await first.outcome)?.type).toBe('LLMGW_AGENT_STOPPED');
    writeFileSync(trigger, '');
    const exit = await waitFor(() => readEngineExit(stateDir, 'oom-0.g0.r0'), {
      timeoutMs: 5000,
      what: 'the shim to record the exit',
    });
    expect(exit).toMatchObject({ code: 7, signal: null });
    expect(pidAlive(beat.shimPid ?? 0)).toBe(false);

    const second = runInMock(shDeps, shardInput('oom-0', 0));
    const err = await second.outcome;
    expect(err).toMatchObject({
      type: 'LLMGW_ENGINE_EXITED',
      nonRetryable: true,
      details: [{ code: 7, signal: null, key: 'oom-0.g0.r0', pid: beat.pid }],
    });
    expect(err?.message).toMatch(
      /exited with code 7 while no agent watched it \(at .*\); last output:\nengine up\nCUDA out of memory$/,
    );
    expect(second.beats.every((b) => b.state === 'starting')).toBe(true);
  });

  test('a recorded pid that now names another process is neither adopted nor signalled', async () => {
    const port = await freePort();
    const foreign = spawn('sleep', ['300'], { stdio: 'ignore' });
    started.add(foreign.pid ?? 0);
    const pid = foreign.pid ?? 0;
    const realStart = await waitFor(() => procStartTime(pid), {
      timeoutMs: 2000,
      what: 'the foreign process to start',
    });
    const key = shardKey('recycled-0', 0, 0);
    writeJsonAtomic(enginePaths(stateDir, key).state, {
      key,
      replicaId: 'recycled-0',
      rank: 0,
      generation: 0,
      port,
      shimPid: pid,
      shimStartTime: String(Number(realStart) - 5),
      enginePid: pid,
      engineStartTime: String(Number(realStart) - 5),
      command: `sim --port ${port}`,
      startedAt: new Date().toISOString(),
    } satisfies EngineState);
    const run = runInMock(deps, shardInput('recycled-0', port));
    const beat = await run.running();
    expect(beat.adopted).toBe(false);
    expect(beat.pid).not.toBe(pid);
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 10_000, what: 'the new engine to serve' });
    run.cancel();
    await run.outcome;
    expect(pidAlive(pid)).toBe(true);
    foreign.kill('SIGKILL');
  });
});

describe('engines across node-worker processes, through Temporal', () => {
  let temporal: DevServer;
  let client: Client;
  let wfWorker: Worker;
  let wfRunning: Promise<void>;
  let nativeConn: NativeConnection;
  const children: ChildProcess[] = [];
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-adopt-proc-'));
  const NODE = 'adopt-proc';
  const WF_QUEUE = 'engine-adopt-test';

  /** A node worker process (test/helpers/engine-node-worker.ts); resolves once it polls. */
  const nodeWorker = async (): Promise<{ child: ChildProcess; lines: string[] }> => {
    const child = spawn(
      process.execPath,
      [
        '--require',
        require.resolve('tsx/cjs'),
        join(ROOT, 'test/helpers/engine-node-worker.ts'),
        temporal.address,
        NODE,
        stateDir,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    const lines: string[] = [];
    child.stdout?.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
    child.stderr?.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
    await waitFor(
      () => {
        if (child.exitCode !== null) throw new Error(`node worker exited ${child.exitCode}: ${lines.join('\n')}`);
        return lines.some((l) => l.includes('"worker running"'));
      },
      { timeoutMs: 30_000, what: 'the node worker process to poll' },
    );
    return { child, lines };
  };
  const exited = (c: ChildProcess): Promise<unknown> =>
    waitFor(() => c.exitCode !== null || c.signalCode !== null, {
      timeoutMs: 15_000,
      what: 'the node worker process to exit',
    });
  const startShard = (id: string, input: RunShardInput) =>
    client.workflow.start('runShardOnce', { taskQueue: WF_QUEUE, workflowId: id, args: [nodeQueue(NODE), input] });
  /** The runShard's last heartbeat as the server (and the Temporal UI) has it. */
  const serverBeat = async (id: string): Promise<ShardHeartbeat | undefined> => {
    const d = await client.workflow.getHandle(id).describe();
    const p = d.raw.pendingActivities?.[0]?.heartbeatDetails?.payloads?.[0];
    return p ? defaultPayloadConverter.fromPayload<ShardHeartbeat>(p as Payload) : undefined;
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    client = new Client({ connection: await Connection.connect({ address: temporal.address }) });
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('../helpers/shard-workflow'),
      logger: {
        info: () => undefined,
        warn: () => undefined,
        error: console.error,
        debug: () => undefined,
        trace: () => undefined,
        log: () => undefined,
      },
    });
    nativeConn = await NativeConnection.connect({ address: temporal.address });
    wfWorker = await Worker.create({ connection: nativeConn, taskQueue: WF_QUEUE, workflowBundle: { code } });
    wfRunning = wfWorker.run();
  }, 60_000);

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    killAll();
    wfWorker?.shutdown();
    await wfRunning?.catch(() => undefined);
    await nativeConn?.close();
    await client?.connection.close();
    await temporal?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  test('SIGTERM and SIGKILL of the node worker leave the engine serving (health 200 every 50 ms); each next worker adopts it', async () => {
    const port = await freePort();
    const input = shardInput('proc-0', port);
    const key = 'proc-0.g0.r0';
    const a = await nodeWorker();
    const first = await startShard('shard-1', input);
    await waitFor(async () => (await health(port)) === 200, { timeoutMs: 15_000, what: 'the engine to serve' });
    const st = readEngineState(stateDir, key);
    track(st);
    expect(st).not.toBeNull();
    const pid = st?.enginePid;
    expect(
      await waitFor(() => serverBeat('shard-1').then((b) => b?.state === 'running' && b), {
        timeoutMs: 5000,
        what: 'a running heartbeat at the server',
      }),
    ).toMatchObject({ pid, shimPid: st?.shimPid, key, adopted: false });

    const probe = { stop: false, total: 0, bad: [] as string[] };
    const probing = (async () => {
      while (!probe.stop) {
        const s = await health(port);
        probe.total++;
        if (s !== 200) probe.bad.push(`${new Date().toISOString()}: ${s}`);
        await sleep(50);
      }
    })();

    // SIGTERM: the worker shuts down, the activity fails LLMGW_AGENT_STOPPED, the engine stays.
    a.child.kill('SIGTERM');
    const out1 = (await first.result()) as ShardOutcome;
    expect(out1).toMatchObject({ kind: 'failed', type: 'LLMGW_AGENT_STOPPED', details: [{ key, pid }] });
    await exited(a.child);
    expect(a.child.exitCode).toBe(0);
    expect(pidAlive(pid ?? 0)).toBe(true);

    const b = await nodeWorker();
    await startShard('shard-2', input);
    expect(
      await waitFor(() => serverBeat('shard-2').then((x) => x?.state === 'running' && x), {
        timeoutMs: 10_000,
        what: 'the second worker to adopt',
      }),
    ).toMatchObject({ pid, shimPid: st?.shimPid, key, adopted: true });
    expect(b.lines.some((l) => l.includes('"shard adopted"') && l.includes(`"pid":${pid}`))).toBe(true);

    // SIGKILL: nothing is reported; the server times the heartbeat out; the engine stays.
    b.child.kill('SIGKILL');
    const out2 = (await client.workflow.getHandle('shard-2').result()) as ShardOutcome;
    expect(out2).toMatchObject({ kind: 'timeout', timeoutType: expect.stringMatching(/HEARTBEAT|3/) });
    expect(pidAlive(pid ?? 0)).toBe(true);

    await nodeWorker();
    const third = await startShard('shard-3', input);
    expect(
      await waitFor(() => serverBeat('shard-3').then((x) => x?.state === 'running' && x), {
        timeoutMs: 10_000,
        what: 'the third worker to adopt',
      }),
    ).toMatchObject({ pid, key, adopted: true });
    probe.stop = true;
    await probing;
    expect(probe.total).toBeGreaterThan(50);
    expect(probe.bad).toEqual([]);

    // A cancel from the workflow stops the adopted engine; the workflow's result comes after it is gone.
    await third.cancel();
    expect((await third.result()) as ShardOutcome).toEqual({ kind: 'cancelled' });
    expect([pid, st?.shimPid].filter((p) => pidAlive(p ?? 0))).toEqual([]);
    expect(existsSync(enginePaths(stateDir, key).state)).toBe(false);
  });
});

describe('orphan collection at agent start', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-adopt-gc-'));
  const deps: NodeDeps = { nodeId: 'gc-n1', engineArgv: () => simEngineArgv(), stateDir, stopGraceMs: 3000 };
  const mysqlUrl = testMysqlUrl();
  let temporal: DevServer | undefined;
  let app: FastifyInstance | undefined;
  let pool: Awaited<ReturnType<typeof openDatabase>> | undefined;
  let agent: Agent | undefined;
  afterAll(async () => {
    await agent?.close();
    await app?.close();
    await closeCertClients();
    await pool?.end();
    await temporal?.stop();
    await dropDatabase(mysqlUrl);
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** Starts an engine and leaves it as a stopped agent would. */
  const leftRunning = async (replicaId: string): Promise<{ port: number; beat: ShardHeartbeat }> => {
    const port = await freePort();
    const run = runInMock(deps, shardInput(replicaId, port));
    const beat = await run.running();
    run.shutDown();
    expect((await run.outcome)?.type).toBe('LLMGW_AGENT_STOPPED');
    return { port, beat };
  };

  test('the agent asks GET /v1/agent/shards, stops the engines no shard wants, keeps the wanted ones, removes day-old records', async () => {
    const wanted = await leftRunning('gc-0');
    const unwanted = await leftRunning('gc-1');
    // A finished engine's records from two days ago.
    const old = enginePaths(stateDir, 'old-0.g0.r0');
    writeFileSync(old.log, 'bye\n');
    writeJsonAtomic(old.exit, { code: 0, signal: null, at: new Date(Date.now() - 2 * 86_400_000).toISOString() });
    const twoDaysAgo = new Date(Date.now() - 2 * 86_400_000);
    for (const f of [old.log, old.exit]) utimesSync(f, twoDaysAgo, twoDaysAgo);

    pool = await openDatabase(mysqlUrl);
    const store = new Store(pool);
    await store.setShards('gc-0', [
      { replicaId: 'gc-0', rank: 0, nodeId: parseNodeId('gc-n1'), port: wanted.port, gpus: [0] },
    ]);
    await store.setShards('gc-1', [
      { replicaId: 'gc-1', rank: 0, nodeId: parseNodeId('gc-n2'), port: unwanted.port, gpus: [0] },
    ]);
    temporal = await startTestTemporal();
    const tls = { tls: testTls() };
    const read = (f: string): string => readFileSync(f, 'utf8');
    ({ app } = await buildControlServer({
      store,
      tls: { caPem: read(tls.tls.ca), certPem: read(tls.tls.serverCert), keyPem: read(tls.tls.serverKey) },
      log: () => undefined,
      temporal: { address: temporal.address, namespace: 'default' },
      heartbeatMs: 2000,
    }));
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const node = await certClient(tls, store, 'gc-n1');
    const res = await node.fetch(`${url}/v1/agent/shards?node=gc-n1`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ shards: [{ replicaId: 'gc-0', rank: 0, port: wanted.port }] });
    expect((await node.fetch(`${url}/v1/agent/shards`)).status).toBe(400);
    expect((await node.fetch(`${url}/v1/agent/shards?node=gc-n2`)).status).toBe(403);

    const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
    agent = await startAgent({
      nodeId: parseNodeId('gc-n1'),
      server: url,
      tls: node.cert,
      nvidiaSmi: 'nvidia-smi',
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(stateDir, 'installs'), bins: {} },
      stateDir,
      stopEnginesOnExit: false,
      log: (msg, fields) => lines.push({ msg, fields }),
    });
    const stopLine = await waitFor(() => lines.find((l) => l.msg === 'stopping an engine no shard wants'), {
      timeoutMs: 10_000,
      what: 'the agent to stop the unwanted engine',
    });
    expect(stopLine.fields).toMatchObject({
      key: 'gc-1.g0.r0',
      pid: unwanted.beat.pid,
      why: `no shard gc-1 rank 0 on port ${unwanted.port} is placed on this node`,
    });
    await waitFor(() => lines.find((l) => l.msg === 'engine records collected'), {
      timeoutMs: 20_000,
      what: 'the collection to finish',
    });
    expect(pidAlive(unwanted.beat.pid ?? 0)).toBe(false);
    expect(await health(wanted.port)).toBe(200);
    expect(lines.find((l) => l.msg === 'engine left for adoption')?.fields).toMatchObject({
      key: 'gc-0.g0.r0',
      pid: wanted.beat.pid,
    });
    expect(existsSync(old.exit) || existsSync(old.log)).toBe(false);
  });

  test('a wanted engine no runShard adopts in time is stopped; an adopted one is not; without an answer nothing is stopped at once', async () => {
    const lonely = await leftRunning('gc-2');
    const adopted = await leftRunning('gc-3');
    const supervised = new Set<string>();
    const assigned = [
      { replicaId: 'gc-2', rank: 0, port: lonely.port },
      { replicaId: 'gc-3', rank: 0, port: adopted.port },
    ];
    const log = (): void => undefined;

    const unknown = await collectOrphans({
      stateDir,
      assigned: () => Promise.reject(new Error('control plane down')),
      supervised,
      adoptWithinMs: 60_000,
      log,
    });
    expect(unknown.stopped).toEqual([]);
    expect(unknown.pending).toEqual(expect.arrayContaining(['gc-2.g0.r0', 'gc-3.g0.r0']));
    unknown.cancel();
    await unknown.settled;

    const c = await collectOrphans({
      stateDir,
      assigned: async () => assigned,
      supervised,
      adoptWithinMs: 1500,
      stopGraceMs: 3000,
      log,
    });
    expect(c.pending).toEqual(expect.arrayContaining(['gc-2.g0.r0', 'gc-3.g0.r0']));
    const adopter = runInMock({ ...deps, supervised }, shardInput('gc-3', adopted.port));
    expect((await adopter.running()).adopted).toBe(true);
    await c.settled;
    expect(pidAlive(lonely.beat.pid ?? 0)).toBe(false);
    expect(pidAlive(adopted.beat.pid ?? 0)).toBe(true);
    adopter.cancel();
    await adopter.outcome;
    expect(pidAlive(adopted.beat.pid ?? 0)).toBe(false);
  });
});

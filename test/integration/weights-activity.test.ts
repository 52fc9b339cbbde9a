/**
 * fetchWeights under a real Temporal worker (the pinned dev server) against a real HTTP origin: its heartbeats
 * carry the progress (bytes done, total, rate, where from) to the server, where the Temporal UI and `llmgw ctl
 * weights` read them; a connection cut halfway fails the attempt and the retry resumes from the partial; a
 * wrong sha256 fails at once (non-retryable) naming both hashes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { createWeightsActivities } from '../../activities/node/weights';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { formatFetch, weightsFetches } from '../../cli/ctl/views/weights';
import { nodeQueue } from '../../lib/names';
import { WeightsCache } from '../../lib/weights/cache';
import { NODE_WORKER_OPTIONS } from '../../workers/agent/worker';
import { startTestTemporal } from '../helpers/cluster-parts';
import { startOrigin, type Origin } from '../helpers/origin';
import { waitFor } from '../helpers/wait';
import type { FetchOutcome } from '../helpers/weights-workflow';

const SIZE = 6 << 20;
const WF_QUEUE = 'weights-test-workflows';
const NODE = 'w1';

describe('fetchWeights under a real Temporal worker', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-weights-activity-'));
  let temporal: DevServer;
  let client: Client;
  let nativeConn: NativeConnection;
  let workers: Worker[] = [];
  let running: Promise<void>[] = [];
  let origin: Origin;
  let n = 0;
  const start = (input: { source: string; sha256?: string }) =>
    client.workflow.start('fetchWeightsOnce', {
      taskQueue: WF_QUEUE,
      workflowId: `fetch-${++n}`,
      args: [nodeQueue(NODE), { model: 'tiny', replicaId: 'tiny-0', ...input }],
    });

  beforeAll(async () => {
    temporal = await startTestTemporal();
    origin = await startOrigin({ size: SIZE });
    client = new Client({ connection: await Connection.connect({ address: temporal.address }) });
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('../helpers/weights-workflow'),
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
    const cache = new WeightsCache({ dir, nodeId: NODE });
    workers = [
      await Worker.create({ connection: nativeConn, taskQueue: WF_QUEUE, workflowBundle: { code } }),
      await Worker.create({
        ...NODE_WORKER_OPTIONS,
        connection: nativeConn,
        taskQueue: nodeQueue(NODE),
        activities: createWeightsActivities({ nodeId: NODE, cache }),
      }),
    ];
    running = workers.map((w) => w.run());
  }, 90_000);

  afterAll(async () => {
    for (const w of workers) w.shutdown();
    await Promise.allSettled(running);
    await nativeConn?.close();
    await client?.connection.close();
    await temporal?.stop();
    await origin?.close();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  beforeEach(() =>
    Object.assign(origin.behave, { cutAfter: null, ignoreRange: false, status: null, bytesPerSecond: null }),
  );

  test('heartbeats carry bytes done, total and rate to the server, where ctl weights reads them; the result is the path', async () => {
    origin.behave.bytesPerSecond = 2 << 20; // about 3 s
    const h = await start({ source: `${origin.fileUrl}?t=1`, sha256: origin.sha256 });
    const seen = await waitFor(
      async () => {
        const fs = await weightsFetches(client, { types: ['fetchWeightsOnce'] });
        const p = fs[0]?.progress;
        return p && p.phase === 'downloading' && p.bytesDone > 0 && p.bytesDone < SIZE && p.rateBps > 0
          ? fs[0]
          : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200, what: 'a downloading heartbeat on the server' },
    );
    expect(seen.workflowId).toBe(h.workflowId);
    expect(seen.progress).toMatchObject({
      node: NODE,
      model: 'tiny',
      replicaId: 'tiny-0',
      from: 'origin',
      total: SIZE,
      url: `${origin.fileUrl}?t=1`,
    });
    // 2 MiB/s as the origin sends it, give or take the window.
    expect(seen.progress?.rateBps).toBeGreaterThan(0.5 * (2 << 20));
    expect(seen.progress?.rateBps).toBeLessThan(4 * (2 << 20));
    expect(formatFetch(seen)).toMatch(
      /^w1 tiny \(fetch-\d+\): downloading from origin: [\d.]+ MiB of 6\.0 MiB \(\d+%\), [\d.]+ MiB\/s$/,
    );
    const out = (await h.result()) as FetchOutcome;
    expect(out).toMatchObject({
      kind: 'fetched',
      result: {
        how: 'fetched',
        from: 'origin',
        size: SIZE,
        sha256: origin.sha256,
        verified: true,
        transferred: SIZE,
        resumedFrom: 0,
      },
    });
    expect(out.kind === 'fetched' && out.result.path).toMatch(
      new RegExp(`^${dir}/sha256-${origin.sha256}/tiny\\.gguf$`),
    );
  });

  test('a connection cut halfway fails the attempt; Temporal retries and the retry resumes from the partial', async () => {
    origin.behave.cutAfter = SIZE / 2;
    const before = origin.requests.length;
    const h = await start({ source: `${origin.fileUrl}?t=2` });
    await waitFor(() => origin.requests.length > before, {
      timeoutMs: 20_000,
      what: 'the first attempt to reach the origin',
    });
    origin.behave.cutAfter = null;
    const out = (await h.result()) as FetchOutcome;
    expect(out).toMatchObject({
      kind: 'fetched',
      result: { how: 'fetched', resumedFrom: SIZE / 2, transferred: SIZE / 2 },
    });
    expect(origin.requests.slice(before).map((r) => [r.range, r.sent])).toEqual([
      [null, SIZE / 2],
      [`bytes=${SIZE / 2}-`, SIZE / 2],
    ]);
  });

  test('a wrong sha256 fails at once, not retried, naming both hashes', async () => {
    const before = origin.requests.length;
    const wrong = '0'.repeat(64);
    const out = (await (await start({ source: `${origin.fileUrl}?t=3`, sha256: wrong })).result()) as FetchOutcome;
    expect(out).toMatchObject({ kind: 'failed', type: 'LLMGW_WEIGHTS_SHA_MISMATCH', nonRetryable: true });
    expect(out.kind === 'failed' && out.message).toContain(
      `w1: weights ${origin.fileUrl}?t=3: sha256 ${origin.sha256} is not the catalog's ${wrong}`,
    );
    expect(origin.requests.length - before).toBe(1);
  });
});

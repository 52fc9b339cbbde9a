/**
 * The pure parts of weights: the catalog's sha256 (validated with the file, key and fix), sources and which ranks
 * need weights, range headers both ways, the rate meter and progress lines, cache keys and names; and the
 * fetchWeights activity's heartbeats and failures under @temporalio/testing's MockActivityEnvironment (a real
 * local origin).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { type ApplicationFailure } from '@temporalio/common';
import { createWeightsActivities, type WeightsHeartbeat } from '../../activities/node/weights';
import { parseWeightsListen } from '../../workers/agent/weights';
import { parseServerConfig, type ConfigError } from '../../config/load';
import { cacheFileName, isWeightsKey, weightsKey, WeightsCache } from '../../lib/weights/cache';
import { parseContentRange } from '../../lib/weights/http';
import { formatBytes, formatProgress, RateMeter } from '../../lib/weights/progress';
import { parseRange } from '../../lib/weights/serve';
import { classifySource, needsWeights } from '../../lib/weights/source';
import { thrownWithCode } from '../helpers/errors';
import { startOrigin, type Origin } from '../helpers/origin';

const catalog = (extra: string, source = 'https://example.com/m/tiny.gguf'): string => `catalog:
  - name: tiny
    source: ${source}
${extra}
    replicas: 1
    profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 0 }]
`;

describe('catalog sha256', () => {
  test('64 hex digits, kept lowercased; absent stays absent', () => {
    const sha = 'AB'.repeat(32);
    expect(parseServerConfig(catalog(`    sha256: "${sha}"`), 'server.yaml').catalog[0]?.sha256).toBe(
      sha.toLowerCase(),
    );
    expect(parseServerConfig(catalog(''), 'server.yaml').catalog[0]).not.toHaveProperty('sha256');
  });
  test('anything else is refused naming the key and the fix', () => {
    const e = thrownWithCode<ConfigError>(
      () => parseServerConfig(catalog('    sha256: "sha256:abc"'), 'server.yaml'),
      'LLMGW_CONFIG_INVALID',
    );
    expect(e.message).toMatch(
      /^server\.yaml:\d+:\d+: catalog\[0\]\.sha256: "sha256:abc" is not a sha256; give the 64 hex digits sha256sum prints for the file \(no "sha256:" prefix\)$/m,
    );
  });
  test('a sha256 on a source that is not a URL is refused', () => {
    const e = thrownWithCode<ConfigError>(
      () => parseServerConfig(catalog(`    sha256: "${'0'.repeat(64)}"`, 'sim://sim-small'), 'server.yaml'),
      'LLMGW_CONFIG_INVALID',
    );
    expect(e.message).toContain(
      'catalog[0].sha256: is set, but source "sim://sim-small" is not an http(s) URL; remove sha256 (only a fetched file is verified), or give the model a URL source',
    );
  });
});

describe('sources', () => {
  test('classified by scheme', () => {
    expect(classifySource('sim://sim-small')).toEqual({ kind: 'sim', source: 'sim://sim-small' });
    expect(classifySource('HTTPS://x/y.gguf')).toEqual({ kind: 'url', url: 'HTTPS://x/y.gguf' });
    expect(classifySource('/models/a b.gguf')).toEqual({ kind: 'path', path: '/models/a b.gguf' });
    expect(classifySource('file:///models/a%20b.gguf')).toEqual({ kind: 'path', path: '/models/a b.gguf' });
    expect(classifySource('Qwen/Qwen2.5-0.5B')).toEqual({ kind: 'engine', source: 'Qwen/Qwen2.5-0.5B' });
  });
  test('which ranks need the weights on their node', () => {
    const url = 'https://x/m.gguf';
    expect([0, 1].map((r) => needsWeights(url, 'llamacpp', r))).toEqual([true, false]);
    expect([0, 1].map((r) => needsWeights(url, 'vllm', r))).toEqual([true, true]);
    expect([0, 1].map((r) => needsWeights(url, 'sglang', r))).toEqual([true, true]);
    expect(needsWeights('sim://sim-small', 'sim', 0)).toBe(false);
    expect(needsWeights('Qwen/Qwen2.5-0.5B', 'vllm', 0)).toBe(false);
    expect(needsWeights('/models/m', 'vllm', 1)).toBe(true);
  });
  test('cache keys and file names', () => {
    expect(weightsKey('https://x/m.gguf', 'AA'.repeat(32))).toBe(`sha256-${'aa'.repeat(32)}`);
    expect(weightsKey('https://x/m.gguf')).toMatch(/^url-[0-9a-f]{32}$/);
    expect(isWeightsKey(weightsKey('https://x/m.gguf'))).toBe(true);
    expect(isWeightsKey('../etc')).toBe(false);
    expect(cacheFileName('https://huggingface.co/org/repo/resolve/main/model%20q4.gguf?download=true')).toBe(
      'model_q4.gguf',
    );
    expect(cacheFileName('https://x/')).toBe('weights');
    expect(cacheFileName('https://x/.hidden')).toBe('weights');
  });
});

describe('range headers', () => {
  test('Content-Range as a client reads it', () => {
    expect(parseContentRange('bytes 100-199/1000')).toEqual({ start: 100, total: 1000 });
    expect(parseContentRange('bytes */1000')).toEqual({ start: null, total: 1000 });
    expect(parseContentRange('bytes 0-9/*')).toEqual({ start: 0, total: null });
    expect(parseContentRange('items 1-2/3')).toBeNull();
  });
  test('Range as the weights endpoint reads it', () => {
    expect(parseRange(undefined, 10)).toBeNull();
    expect(parseRange('bytes=4-', 10)).toEqual({ start: 4, end: 9 });
    expect(parseRange('bytes=2-5', 10)).toEqual({ start: 2, end: 5 });
    expect(parseRange('bytes=2-50', 10)).toEqual({ start: 2, end: 9 });
    expect(parseRange('bytes=10-', 10)).toBe('bad');
    expect(parseRange('bytes=-5', 10)).toBe('bad');
  });
});

describe('progress', () => {
  test('the rate over the window', () => {
    let t = 0;
    const m = new RateMeter(5000, () => t);
    expect(m.add(0)).toBe(0);
    t = 1000;
    expect(m.add(10 << 20)).toBe(10 << 20);
    t = 9000;
    m.add(50 << 20);
    t = 10_000;
    expect(m.add(60 << 20)).toBe(10 << 20); // the window holds only 9 s and 10 s now
  });
  test('lines a person reads', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(300 << 20)).toBe('300 MiB');
    expect(
      formatProgress({
        phase: 'downloading',
        key: 'k',
        url: 'u',
        from: 'peer n1',
        bytesDone: 2 ** 30,
        total: 4 * 2 ** 30,
        rateBps: 85.3 * (1 << 20),
        resumedFrom: 512 << 20,
        waiters: 2,
      }),
    ).toBe('downloading from peer n1: 1.0 GiB of 4.0 GiB (25%), 85.3 MiB/s, resumed at 512 MiB, 2 waiting on it');
    expect(
      formatProgress({
        phase: 'hashing-partial',
        key: 'k',
        url: 'u',
        from: 'origin',
        bytesDone: 10,
        total: null,
        rateBps: 0,
        resumedFrom: 0,
        waiters: 1,
      }),
    ).toBe('hashing-partial from origin: 10 B');
  });
});

describe('fetchWeights under MockActivityEnvironment', () => {
  let origin: Origin;
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-weights-unit-'));
  beforeAll(async () => {
    origin = await startOrigin({ size: 3 << 20 });
  });
  afterAll(async () => {
    await origin.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('heartbeats carry the node, model and progress; the last one is done', async () => {
    origin.behave.bytesPerSecond = 4 << 20;
    const env = new MockActivityEnvironment();
    const beats: WeightsHeartbeat[] = [];
    env.on('heartbeat', (d: unknown) => void beats.push(d as WeightsHeartbeat));
    const { fetchWeights } = createWeightsActivities({
      nodeId: 'u1',
      cache: new WeightsCache({ dir, nodeId: 'u1' }),
      heartbeatMs: 100,
    });
    const r = await env.run(fetchWeights, {
      model: 'tiny',
      source: origin.fileUrl,
      sha256: origin.sha256,
      replicaId: 'tiny-0',
    });
    origin.behave.bytesPerSecond = null;
    expect(r).toMatchObject({ how: 'fetched', from: 'origin', size: 3 << 20, verified: true });
    expect(beats[0]).toMatchObject({ phase: 'checking', node: 'u1', model: 'tiny', replicaId: 'tiny-0' });
    const mid = beats.filter((b) => b.phase === 'downloading' && b.bytesDone > 0 && b.bytesDone < 3 << 20);
    expect(mid.length).toBeGreaterThan(2);
    expect(mid.at(-1)?.rateBps).toBeGreaterThan(0);
    expect(beats.at(-1)).toMatchObject({ phase: 'done', bytesDone: 3 << 20, total: 3 << 20 });
  });

  test('failures are ApplicationFailures of the catalogue type, non-retryable where no retry helps', async () => {
    const { fetchWeights } = createWeightsActivities({ nodeId: 'u1', cache: new WeightsCache({ dir, nodeId: 'u1' }) });
    const run = async (source: string): Promise<ApplicationFailure> => {
      try {
        await new MockActivityEnvironment().run(fetchWeights, { model: 'tiny', source });
      } catch (err) {
        return err as ApplicationFailure;
      }
      throw new Error('expected a failure');
    };
    expect(await run('/nowhere/m.gguf')).toMatchObject({
      type: 'LLMGW_WEIGHTS_NOT_FOUND',
      nonRetryable: true,
      message: expect.stringMatching(/^u1: weights \/nowhere\/m\.gguf: no such file/),
    });
    expect(await run(`${origin.url}/models/other.gguf`)).toMatchObject({
      type: 'LLMGW_WEIGHTS_FETCH_FAILED',
      nonRetryable: true,
    });
    origin.behave.status = 502;
    expect(await run(`${origin.fileUrl}?x=1`)).toMatchObject({
      type: 'LLMGW_WEIGHTS_FETCH_FAILED',
      nonRetryable: false,
    });
    origin.behave.status = null;
  });

  test('a cancelled activity ends as cancelled and its download stops', async () => {
    origin.behave.bytesPerSecond = 1 << 20;
    const cache = new WeightsCache({ dir, nodeId: 'u1' });
    const env = new MockActivityEnvironment();
    const { fetchWeights } = createWeightsActivities({ nodeId: 'u1', cache });
    env.on('heartbeat', (d: unknown) => {
      if ((d as WeightsHeartbeat).bytesDone > 0) env.cancel();
    });
    await expect(env.run(fetchWeights, { model: 'tiny', source: `${origin.fileUrl}?c=1` })).rejects.toMatchObject({
      name: 'CancelledFailure',
    });
    origin.behave.bytesPerSecond = null;
    expect(cache.inFlight()).toBe(0);
  });
});

describe('--weights-listen', () => {
  test('HOST:PORT, [v6]:PORT; anything else names the flag and an example', () => {
    expect(parseWeightsListen('0.0.0.0:0')).toEqual({ host: '0.0.0.0', port: 0 });
    expect(parseWeightsListen('[::]:7450')).toEqual({ host: '::', port: 7450 });
    const e = thrownWithCode(() => parseWeightsListen('7450'), 'LLMGW_BAD_REQUEST');
    expect(e.message).toBe(
      '--weights-listen "7450" is not HOST:PORT; give e.g. 0.0.0.0:0 (any free port, reported to the control plane) or 10.0.0.5:7450',
    );
    thrownWithCode(() => parseWeightsListen('h:70000'), 'LLMGW_BAD_REQUEST');
  });
});

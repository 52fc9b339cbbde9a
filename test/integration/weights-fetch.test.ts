/**
 * The weights cache against a real HTTP origin on loopback (a generated 6 MiB file): a fetch cut halfway resumes
 * from its partial; an origin that ignores Range is fetched whole again; a wrong sha256 is refused with both
 * hashes and nothing is left in the cache; concurrent requests share one download; a waiter that gives up does
 * not stop the others'; a redirect is followed; errors name the URL and the cause (HTTP status, connection refused, disk full); a local
 * path is used where found and named where not.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hasCode, type LlmgwError } from '../../lib/errors';
import { cacheFileName, weightsKey, WeightsCache } from '../../lib/weights/cache';
import type { WeightsProgress } from '../../lib/weights/progress';
import { freePort } from '../helpers/ports';
import { startOrigin, type Origin } from '../helpers/origin';

const SIZE = 6 << 20;

describe('weights cache over real HTTP', () => {
  let origin: Origin;
  const dirs: string[] = [];
  const cacheDir = (): string => {
    const d = mkdtempSync(join(tmpdir(), 'llmgw-weights-'));
    dirs.push(d);
    return d;
  };
  const filesUnder = (d: string): string[] =>
    readdirSync(d, { recursive: true })
      .map(String)
      .filter((f) => !f.endsWith('.manifest.json'));

  beforeAll(async () => {
    origin = await startOrigin({ size: SIZE });
  });
  beforeEach(() => {
    Object.assign(origin.behave, { cutAfter: null, ignoreRange: false, status: null, bytesPerSecond: null });
    origin.requests.length = 0;
  });
  afterAll(async () => {
    await origin.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  async function rejection(p: Promise<unknown>): Promise<LlmgwError> {
    try {
      await p;
    } catch (err) {
      return err as LlmgwError;
    }
    throw new Error('expected the fetch to fail');
  }

  test('a fetch cut halfway leaves a partial; the next one resumes from it with Range and sends less than the whole file', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    origin.behave.cutAfter = SIZE / 2;
    const err = await rejection(cache.ensure({ source: origin.fileUrl, sha256: origin.sha256 }));
    expect(err.code).toBe('LLMGW_WEIGHTS_FETCH_FAILED');
    expect(err.message).toContain(origin.fileUrl);
    expect(err.message).toMatch(/connection closed after \d+ of 6291456 bytes/);
    expect(err.context.retryable).toBe(true);
    const part = join(cache.dir, weightsKey(origin.fileUrl, origin.sha256), `${cacheFileName(origin.fileUrl)}.part`);
    expect(readFileSync(part).length).toBe(SIZE / 2);

    origin.behave.cutAfter = null;
    const before = origin.bytesSent();
    const progress: WeightsProgress[] = [];
    const r = await cache.ensure(
      { source: origin.fileUrl, sha256: origin.sha256 },
      { onProgress: (p) => void progress.push(p) },
    );
    const second = origin.bytesSent() - before;
    expect(second).toBeLessThan(SIZE);
    expect(second).toBe(SIZE / 2);
    expect(origin.requests.at(-1)).toMatchObject({ range: `bytes=${SIZE / 2}-`, status: 206 });
    expect(r).toMatchObject({ kind: 'fetched', resumedFrom: SIZE / 2, transferred: SIZE / 2 });
    if (r.kind !== 'fetched') throw new Error('unreachable');
    expect(r.file).toMatchObject({ size: SIZE, sha256: origin.sha256, verified: true, from: 'origin' });
    expect(readFileSync(r.path).equals(origin.data)).toBe(true);
    expect(existsSync(part)).toBe(false);
    expect(progress.some((p) => p.phase === 'hashing-partial')).toBe(true);
    expect(progress.some((p) => p.phase === 'downloading' && p.resumedFrom === SIZE / 2 && p.total === SIZE)).toBe(
      true,
    );
    expect(progress.at(-1)).toMatchObject({ phase: 'done', bytesDone: SIZE });

    // Fetched once per node: the next request is the cache's.
    const n = origin.requests.length;
    expect(await cache.ensure({ source: origin.fileUrl, sha256: origin.sha256 })).toMatchObject({
      kind: 'cached',
      path: r.path,
    });
    expect(origin.requests.length).toBe(n);
  });

  test('an origin that ignores Range (200 to a resume) is fetched whole from the start, and the file is right', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    origin.behave.cutAfter = SIZE / 3;
    await rejection(cache.ensure({ source: origin.fileUrl }));
    Object.assign(origin.behave, { cutAfter: null, ignoreRange: true });
    const before = origin.bytesSent();
    const r = await cache.ensure({ source: origin.fileUrl });
    expect(origin.bytesSent() - before).toBe(SIZE);
    expect(origin.requests.at(-1)).toMatchObject({ range: expect.stringMatching(/^bytes=\d+-$/), status: 200 });
    expect(r).toMatchObject({ kind: 'fetched', resumedFrom: 0, transferred: SIZE });
    expect(readFileSync(r.path).equals(origin.data)).toBe(true);
    // No sha256 in the catalog: the file is recorded with the hash computed on the way, not as verified.
    if (r.kind === 'fetched') expect(r.file).toMatchObject({ sha256: origin.sha256, verified: false });
  });

  test('a wrong sha256 is refused with both hashes; neither the file nor a partial is left in the cache', async () => {
    const dir = cacheDir();
    const cache = new WeightsCache({ dir, nodeId: 'n1' });
    const wrong = 'ab'.repeat(32);
    const err = await rejection(cache.ensure({ source: origin.fileUrl, sha256: wrong }));
    expect(err.code).toBe('LLMGW_WEIGHTS_SHA_MISMATCH');
    expect(err.message).toContain(wrong);
    expect(err.message).toContain(origin.sha256);
    expect(err.message).toContain(origin.fileUrl);
    expect(err.context).toMatchObject({ expected: wrong, actual: origin.sha256, retryable: false });
    expect(filesUnder(dir).filter((f) => f.includes('.'))).toEqual([]);
    expect(await cache.held()).toEqual([]);
  });

  test('five concurrent requests for one file make one download, and all get the same path', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    origin.behave.bytesPerSecond = 24 << 20; // about 250 ms: the requests overlap for sure
    const seen: number[] = [];
    const rs = await Promise.all(
      Array.from({ length: 5 }, () =>
        cache.ensure(
          { source: origin.fileUrl, sha256: origin.sha256 },
          { onProgress: (p) => void seen.push(p.waiters) },
        ),
      ),
    );
    expect(origin.requests.filter((q) => q.path.startsWith('/models/'))).toHaveLength(1);
    expect(new Set(rs.map((r) => r.path)).size).toBe(1);
    expect(rs.map((r) => r.kind === 'fetched' && r.shared)).toEqual([false, true, true, true, true]);
    expect(Math.max(...seen)).toBe(5);
    expect(cache.inFlight()).toBe(0);
  });

  test('a waiter that gives up leaves the download to the others; when the last one goes, it stops and its partial stays', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    origin.behave.bytesPerSecond = 8 << 20;
    const quitter = new AbortController();
    const a = cache.ensure({ source: origin.fileUrl }, { signal: quitter.signal });
    const b = cache.ensure({ source: origin.fileUrl });
    setTimeout(() => quitter.abort(), 100);
    await expect(a).rejects.toMatchObject({ name: 'AbortError' });
    const rb = await b;
    expect(readFileSync(rb.path).equals(origin.data)).toBe(true);
    expect(origin.requests.filter((q) => q.path.startsWith('/models/'))).toHaveLength(1);

    const other = new WeightsCache({ dir: cacheDir(), nodeId: 'n2' });
    const alone = new AbortController();
    const c = other.ensure(
      { source: origin.fileUrl },
      {
        signal: alone.signal,
        onProgress: (p) => {
          if (p.bytesDone > SIZE / 8) alone.abort();
        },
      },
    );
    await expect(c).rejects.toMatchObject({ name: 'AbortError' });
    // The stopped download lets go of its partial before a new one starts on it: that one resumes.
    origin.behave.bytesPerSecond = null;
    const rc = await other.ensure({ source: origin.fileUrl });
    expect(rc.kind === 'fetched' && rc.resumedFrom).toBeGreaterThan(0);
    expect(readFileSync(rc.path).equals(origin.data)).toBe(true);
  });

  test('a redirect (302, as a Hugging Face URL answers) is followed, Range and all', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    const moved = origin.fileUrl.replace('/models/', '/moved/');
    origin.behave.cutAfter = SIZE / 4;
    await rejection(cache.ensure({ source: moved, sha256: origin.sha256 }));
    origin.behave.cutAfter = null;
    const r = await cache.ensure({ source: moved, sha256: origin.sha256 });
    expect(origin.requests.map((q) => [q.path.split('/')[1], q.status])).toEqual([
      ['moved', 302],
      ['models', 200],
      ['moved', 302],
      ['models', 206],
    ]);
    expect(origin.requests.at(-1)?.range).toBe(`bytes=${SIZE / 4}-`);
    expect(readFileSync(r.path).equals(origin.data)).toBe(true);
  });

  test('failures name the URL and the cause: HTTP 404 and 503 (retryable or not), connection refused', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n1' });
    const missing = `${origin.url}/models/nope.gguf`;
    const e404 = await rejection(cache.ensure({ source: missing }));
    expect(e404.code).toBe('LLMGW_WEIGHTS_FETCH_FAILED');
    expect(e404.message).toMatch(
      new RegExp(`weights ${missing}: HTTP 404 \\(no such model here\\); check the catalog's source URL`),
    );
    expect(e404.context).toMatchObject({ status: 404, retryable: false });

    origin.behave.status = 503;
    const e503 = await rejection(cache.ensure({ source: origin.fileUrl }));
    expect(e503.message).toContain(`weights ${origin.fileUrl}: HTTP 503`);
    expect(e503.context).toMatchObject({ status: 503, retryable: true });

    const closed = `http://127.0.0.1:${await freePort()}/m.gguf`;
    const refused = await rejection(cache.ensure({ source: closed }));
    expect(refused.code).toBe('LLMGW_WEIGHTS_FETCH_FAILED');
    expect(refused.message).toContain(`weights ${closed}: connection refused`);
    expect(refused.context.retryable).toBe(true);
  });

  test('a full disk (ENOSPC while writing) is LLMGW_WEIGHTS_DISK_FULL naming the directory', async () => {
    const dir = cacheDir();
    const cache = new WeightsCache({ dir, nodeId: 'n1' });
    // The partial is /dev/full: every write to it fails with ENOSPC from the kernel.
    const keyDir = join(dir, weightsKey(origin.fileUrl));
    mkdirSync(keyDir);
    const part = join(keyDir, `${cacheFileName(origin.fileUrl)}.part`);
    symlinkSync('/dev/full', part);
    writeFileSync(`${part}.json`, JSON.stringify({ url: origin.fileUrl, total: SIZE })); // a partial of this URL: kept, written on
    const err = await rejection(cache.ensure({ source: origin.fileUrl }));
    expect(hasCode(err, 'LLMGW_WEIGHTS_DISK_FULL')).toBe(true);
    expect(err.message).toContain(`no room in ${keyDir}`);
    expect(err.message).toContain('--weights-dir');
    expect(err.message).toContain(origin.fileUrl);
  });

  test('a local path is used where found, and named where not; sim:// and engine ids pass through', async () => {
    const cache = new WeightsCache({ dir: cacheDir(), nodeId: 'n7' });
    const here = join(cacheDir(), 'm.gguf');
    writeFileSync(here, 'gguf');
    expect(await cache.ensure({ source: here })).toEqual({ kind: 'local', path: here });
    expect(await cache.ensure({ source: `file://${here}` })).toEqual({ kind: 'local', path: here });
    const gone = '/models/not-here.gguf';
    const err = await rejection(cache.ensure({ source: gone }));
    expect(err.code).toBe('LLMGW_WEIGHTS_NOT_FOUND');
    expect(err.message).toBe(
      `weights ${gone}: no such file or directory on node n7; put the model there on every node that may run it, or give the catalog a URL source to fetch`,
    );
    expect(await cache.ensure({ source: 'sim://sim-small' })).toEqual({ kind: 'none', path: 'sim://sim-small' });
    expect(await cache.ensure({ source: 'Qwen/Qwen2.5-0.5B' })).toEqual({ kind: 'none', path: 'Qwen/Qwen2.5-0.5B' });
  });
});

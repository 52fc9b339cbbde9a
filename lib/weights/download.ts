/**
 * One resumable transfer into a partial file: continue a `.part` from where it stopped with `Range` (restarting
 * when the server ignores it and answers 200, or the file changed under `If-Range`), hash everything that ends up
 * in the file, check the disk can hold the rest, and fsync. Failures are LlmgwErrors naming the URL and cause,
 * with `context.retryable`. The cache decides where to fetch from, verifies the hash and renames into place.
 */
import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readFile, rm, stat, statfs, writeFile, rename, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { LlmgwError } from '../errors';
import {
  describeTransportError,
  parseContentRange,
  rangeGet,
  TransportError,
  type PeerTls,
  type RangeResponse,
} from './http';
import { formatBytes, type WeightsPhase } from './progress';

/** What a transfer reports as it goes (the cache adds where from and the rate). */
export interface TransferProgress {
  phase: Extract<WeightsPhase, 'hashing-partial' | 'downloading'>;
  bytesDone: number;
  total: number | null;
  resumedFrom: number;
}

export interface TransferInput {
  /** where the bytes come from (the origin, or a peer's weights endpoint) */
  url: string;
  /** the partial file */
  part: string;
  /** false: whatever partial is there is thrown away first */
  resume: boolean;
  /** the validator the partial began with (sent as If-Range) */
  ifRange?: string;
  tls?: PeerTls;
  signal?: AbortSignal;
  idleTimeoutMs?: number;
  onProgress?: (p: TransferProgress) => void;
}

export interface TransferResult {
  size: number;
  /** sha256 (hex) of the whole file */
  sha256: string;
  /** bytes received this time */
  transferred: number;
  /** bytes of the partial that were kept */
  resumedFrom: number;
  /** the server ignored Range (200) or the file changed: the partial was dropped and the file fetched whole */
  restarted: boolean;
}

/** What is known about a partial file, beside it as `<part>.json`. */
export interface PartMeta {
  /** the URL its bytes came from */
  url: string;
  /** a strong ETag or the Last-Modified of the response it began with */
  validator?: string;
  total: number | null;
}

const metaFile = (part: string): string => `${part}.json`;

/** The partial's meta, or null when there is none (or it is unreadable). */
export async function readPartMeta(part: string): Promise<PartMeta | null> {
  try {
    return JSON.parse(await readFile(metaFile(part), 'utf8')) as PartMeta;
  } catch {
    return null;
  }
}

/** Removes a partial and its meta. */
export async function dropPart(part: string): Promise<void> {
  await rm(part, { force: true });
  await rm(metaFile(part), { force: true });
}

async function sizeOf(file: string): Promise<number> {
  return stat(file).then(
    (s) => s.size,
    () => 0,
  );
}

/** Hashes the partial already on disk, reporting as it reads. */
async function hashPartial(
  part: string,
  size: number,
  hash: Hash,
  onProgress: TransferInput['onProgress'],
  signal?: AbortSignal,
): Promise<void> {
  let done = 0;
  await pipeline(
    createReadStream(part, { end: size - 1, highWaterMark: 1 << 20 }),
    async function* (src: AsyncIterable<Buffer>) {
      for await (const chunk of src) {
        hash.update(chunk);
        done += chunk.length;
        onProgress?.({ phase: 'hashing-partial', bytesDone: done, total: size, resumedFrom: 0 });
      }
      yield* [];
    },
    { signal },
  );
}

function fetchFailed(
  url: string,
  cause: string,
  retryable: boolean,
  fix: string,
  context: Record<string, unknown> = {},
): LlmgwError {
  return new LlmgwError('LLMGW_WEIGHTS_FETCH_FAILED', `weights ${url}: ${cause}; ${fix}`, {
    url,
    cause,
    retryable,
    ...context,
  });
}

/** Reads up to 300 characters of an error response's body, for the message. */
async function bodySnippet(res: RangeResponse): Promise<string> {
  let text = '';
  for await (const chunk of res.body) {
    if (text.length < 300) text += String(chunk);
  }
  return text.replace(/\s+/g, ' ').trim().slice(0, 300);
}

async function checkDiskRoom(part: string, need: number, url: string): Promise<void> {
  const dir = dirname(part);
  const fs = await statfs(dir);
  const free = fs.bavail * fs.bsize;
  if (need > free) throw diskFull(dir, need, free, url);
}

function diskFull(dir: string, need: number, free: number | null, url: string): LlmgwError {
  const room =
    free === null ? 'the disk is full (ENOSPC)' : `needs ${formatBytes(need)} more, ${formatBytes(free)} free`;
  return new LlmgwError(
    'LLMGW_WEIGHTS_DISK_FULL',
    `weights ${url}: no room in ${dir}: ${room}; free space there or start the agent with --weights-dir on a larger disk (the partial file is kept, the next attempt resumes)`,
    { url, dir, need, free, retryable: false },
  );
}

/** A strong validator for If-Range (a weak ETag may not be used there). */
function validatorOf(res: RangeResponse): string | undefined {
  const etag = res.headers.etag;
  if (etag && !etag.startsWith('W/')) return etag;
  return res.headers['last-modified'];
}

/** Resolves with the response to GET from `offset`, or throws naming the URL and the transport's cause. */
async function get(input: TransferInput, offset: number): Promise<RangeResponse> {
  try {
    return await rangeGet(input.url, {
      offset,
      ifRange: input.ifRange,
      tls: input.tls,
      signal: input.signal,
      idleTimeoutMs: input.idleTimeoutMs,
    });
  } catch (err) {
    if (input.signal?.aborted) throw err;
    if (err instanceof TransportError)
      throw fetchFailed(input.url, err.reason, true, 'it is retried; check the URL and that the server is up', {
        transport: true,
      });
    throw err;
  }
}

/** Continues (or starts) `input.part` from `input.url` until the file is whole; see the module comment. */
export async function transfer(input: TransferInput): Promise<TransferResult> {
  const { url, part } = input;
  if (!input.resume) await dropPart(part);
  let offset = await sizeOf(part);
  let hash = createHash('sha256');
  if (offset > 0) await hashPartial(part, offset, hash, input.onProgress, input.signal);
  const resumedFrom = offset;
  let restarted = false;
  const restart = (): void => {
    offset = 0;
    hash = createHash('sha256');
    restarted = true;
  };

  let res = await get(input, offset);
  if (res.statusCode === 416 && offset > 0) {
    res.body.resume();
    // The partial is the whole file already (a crash after the last byte, before the rename).
    const cr = parseContentRange(res.headers['content-range']);
    if (cr?.total === offset)
      return { size: offset, sha256: hash.digest('hex'), transferred: 0, resumedFrom, restarted: false };
    restart();
    res = await get(input, 0);
  }
  let total: number | null;
  if (res.statusCode === 206) {
    const cr = parseContentRange(res.headers['content-range']);
    if (!cr || cr.start !== offset) {
      res.body.resume();
      restart();
      res = await get(input, 0);
    }
  }
  if (res.statusCode === 206) {
    total = parseContentRange(res.headers['content-range'])?.total ?? null;
  } else if (res.statusCode === 200) {
    // The server ignored Range (or If-Range said the file changed): the whole file is coming, start over.
    if (offset > 0) restart();
    const len = res.headers['content-length'];
    total = len === undefined ? null : Number(len);
  } else {
    const status = res.statusCode ?? 0;
    const snippet = await bodySnippet(res).catch(() => '');
    const retryable = status >= 500 || status === 408 || status === 429;
    const fix = retryable
      ? 'it is retried (the partial is kept)'
      : status === 404
        ? "check the catalog's source URL"
        : "check the URL and the origin's access rules";
    throw fetchFailed(url, `HTTP ${status}${snippet ? ` (${snippet})` : ''}`, retryable, fix, { status });
  }
  await writeMetaAtomic(part, { url, validator: validatorOf(res), total });
  if (total !== null) await checkDiskRoom(part, total - offset, url);

  let done = offset;
  let transferred = 0;
  const fh = await open(part, offset > 0 ? 'a' : 'w');
  const out = batchedWriter(fh);
  input.onProgress?.({ phase: 'downloading', bytesDone: done, total, resumedFrom: offset });
  let readError: unknown = null;
  try {
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        hash.update(chunk);
        done += chunk.length;
        transferred += chunk.length;
        await out.write(chunk);
        input.onProgress?.({ phase: 'downloading', bytesDone: done, total, resumedFrom: offset });
      }
    } catch (err) {
      if ((err as { fromWriter?: boolean }).fromWriter) throw err;
      // The connection broke: what was received (and hashed) is still written, so the next attempt resumes after it.
      readError = err;
    }
    await out.flush();
    await fh.sync();
  } catch (err) {
    res.body.destroy();
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ENOSPC') throw diskFull(dirname(part), (total ?? done) - done, null, url);
    throw err;
  } finally {
    await fh.close().catch(() => undefined);
  }
  if (readError) {
    if (input.signal?.aborted) throw readError;
    throw shortRead(input, done, total, transferred, describeTransportError(readError as NodeJS.ErrnoException));
  }
  if (total !== null && done !== total) throw shortRead(input, done, total, transferred, 'the body ended early');
  return { size: done, sha256: hash.digest('hex'), transferred, resumedFrom: offset, restarted };
}

/**
 * Writes to the partial in batches of 4 MiB or 512 chunks (one writev per batch, the next batch filling while it runs: fewer
 * thread-pool round trips than a write stream's 64 KiB chunks), and flushes it to disk every 64 MiB so the fsync
 * before the rename finds little left (writeback overlaps the transfer instead of following it: on a 256 MiB
 * file that fsync alone took 0.4-0.55 s here). A failed write rejects the next write() or flush() (`fromWriter`).
 */
function batchedWriter(
  fh: FileHandle,
  batchBytes = 4 << 20,
  syncEvery = 64 << 20,
): { write(chunk: Buffer): Promise<void>; flush(): Promise<void> } {
  let batch: Buffer[] = [];
  let size = 0;
  let sinceSync = 0;
  let inflight: Promise<void> = Promise.resolve();
  const mark = (err: unknown): never => {
    throw Object.assign(err as Error, { fromWriter: true });
  };
  const send = async (): Promise<void> => {
    await inflight.catch(mark);
    const b = batch;
    const n = size;
    batch = [];
    size = 0;
    sinceSync += n;
    const sync = sinceSync >= syncEvery;
    if (sync) sinceSync = 0;
    inflight = writeAll(fh, b, n).then(() => (sync ? fh.datasync() : undefined));
    // Handled now: a write that fails at once (ENOSPC) before the next write() or flush() awaits it would otherwise
    // be an unhandled rejection, which ends the process; the next write() or flush() still rejects with it.
    inflight.catch(() => undefined);
  };
  return {
    async write(chunk) {
      batch.push(chunk);
      size += chunk.length;
      if (size >= batchBytes || batch.length >= 512) await send();
    },
    async flush() {
      if (size > 0) await send();
      await inflight.catch(mark);
    },
  };
}

/** writev, then whatever a short write left (a regular file rarely writes less, but may). */
async function writeAll(fh: FileHandle, bufs: Buffer[], n: number): Promise<void> {
  const { bytesWritten } = await fh.writev(bufs);
  if (bytesWritten >= n) return;
  let rest = Buffer.concat(bufs).subarray(bytesWritten);
  while (rest.length > 0) {
    const w = await fh.write(rest);
    rest = rest.subarray(w.bytesWritten);
  }
}

function shortRead(
  input: TransferInput,
  done: number,
  total: number | null,
  transferred: number,
  why: string,
): LlmgwError {
  const of = total === null ? '' : ` of ${total}`;
  return fetchFailed(
    input.url,
    `the connection closed after ${done}${of} bytes (${transferred} this time: ${why})`,
    true,
    `it is retried and resumes from byte ${done}`,
    { done, total, transferred },
  );
}

async function writeMetaAtomic(part: string, meta: PartMeta): Promise<void> {
  await writeFile(`${metaFile(part)}.tmp`, JSON.stringify(meta));
  await rename(`${metaFile(part)}.tmp`, metaFile(part));
}

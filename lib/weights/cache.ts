/**
 * A node's weights cache: each URL source fetched once into `<dir>/<key>/<file>`, from a peer that holds it when
 * the control plane knows one, else from the origin. Concurrent requests for one file share one download (each
 * waiter sees its progress; the download stops, its partial kept, only when every waiter has gone). A file is
 * renamed into place only once whole and, when the catalog gives a sha256, verified — so a file at its final
 * path is always complete, and a crash leaves at most a `.part` that the next fetch continues.
 */
import { createHash } from 'node:crypto';
import { mkdir, open, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LlmgwError } from '../errors';
import { dropPart, readPartMeta, transfer, type TransferProgress, type TransferResult } from './download';
import type { PeerTls } from './http';
import { RateMeter, type WeightsProgress } from './progress';
import { classifySource } from './source';

/** What to fetch: a catalog model's source and, optionally, its sha256. */
export interface WeightsSpec {
  source: string;
  sha256?: string;
}

/** Another node holding a file, as the control plane reports it. */
export interface PeerCandidate {
  nodeId: string;
  /** its weights endpoint, e.g. https://10.0.0.5:7444 */
  endpoint: string;
  sha256: string;
  size: number;
}

/** A whole file in the cache (its manifest). */
export interface HeldFile {
  key: string;
  url: string;
  path: string;
  size: number;
  sha256: string;
  /** true when it matched the catalog's sha256 (false: the catalog gave none) */
  verified: boolean;
  storedAt: string;
  /** `origin` or `peer <node>` */
  from: string;
}

/** What ensure() gives back. */
export type EnsureResult =
  /** sim:// or an engine-resolved id: nothing to fetch, the engine is given the source */
  | { kind: 'none'; path: string }
  /** a path found on this node */
  | { kind: 'local'; path: string }
  /** already in the cache */
  | { kind: 'cached'; path: string; file: HeldFile }
  /** fetched now (by this call or a concurrent one it joined) */
  | {
      kind: 'fetched';
      path: string;
      file: HeldFile;
      transferred: number;
      resumedFrom: number;
      ms: number;
      shared: boolean;
    };

export interface WeightsCacheOptions {
  dir: string;
  /** this node's id, for messages */
  nodeId: string;
  /** other nodes holding a key (the control plane); absent: origin only */
  peers?: (key: string) => Promise<PeerCandidate[]>;
  /** this node's certificate, key and CA, for peers' endpoints (read per fetch: it is renewed) */
  peerTls?: () => Omit<PeerTls, 'expectCn'>;
  /** told about each file once it is in place (the agent reports it to the control plane) */
  onStored?: (file: HeldFile) => Promise<void>;
  /** peers tried before the origin (default 2) */
  maxPeers?: number;
  idleTimeoutMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface EnsureOptions {
  onProgress?: (p: WeightsProgress) => void;
  /** this waiter gives up (the download goes on while others wait) */
  signal?: AbortSignal;
}

interface Flight {
  promise: Promise<{ file: HeldFile; r: TransferResult; ms: number }>;
  listeners: Set<(p: WeightsProgress) => void>;
  waiters: number;
  abort: AbortController;
  last: WeightsProgress;
}

const KEY_RE = /^(sha256-[0-9a-f]{64}|url-[0-9a-f]{32})$/;
const MANIFEST = '.manifest.json';

/** The cache key of a URL source: its sha256 when the catalog gives one (same bytes, one copy), else the URL's hash. */
export function weightsKey(url: string, sha256?: string): string {
  return sha256
    ? `sha256-${sha256.toLowerCase()}`
    : `url-${createHash('sha256').update(url).digest('hex').slice(0, 32)}`;
}

/** True for a string that is a cache key (what the weights endpoint accepts). */
export function isWeightsKey(s: string): boolean {
  return KEY_RE.test(s);
}

/** The file's name in the cache: the URL's last path segment, made safe (engines may look at the extension). */
export function cacheFileName(url: string): string {
  const seg = decodeURIComponent(new URL(url).pathname.split('/').pop() ?? '')
    .replace(/[^A-Za-z0-9._-]/g, '_')
    .slice(-200);
  return !seg || seg.startsWith('.') ? 'weights' : seg;
}

function aborted(): Error {
  return Object.assign(new Error('the weights fetch was cancelled'), { name: 'AbortError' });
}

function shuffle<T>(xs: T[]): T[] {
  const a = [...xs];
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j] as T, a[i] as T];
  }
  return a;
}

/** The weights cache of one node. */
export class WeightsCache {
  private readonly flights = new Map<string, Flight>();
  /** Downloads every waiter left, still closing their partial: a new one for the key starts after. */
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly log: NonNullable<WeightsCacheOptions['log']>;

  constructor(private readonly o: WeightsCacheOptions) {
    this.log = o.log ?? ((): void => undefined);
  }

  get dir(): string {
    return this.o.dir;
  }

  /** Makes the model's weights available on this node and returns their path; see the module comment. */
  async ensure(spec: WeightsSpec, opts: EnsureOptions = {}): Promise<EnsureResult> {
    const src = classifySource(spec.source);
    switch (src.kind) {
      case 'sim':
      case 'engine':
        return { kind: 'none', path: spec.source };
      case 'path': {
        const found = await stat(src.path).then(
          () => true,
          () => false,
        );
        if (!found)
          throw new LlmgwError(
            'LLMGW_WEIGHTS_NOT_FOUND',
            `weights ${src.path}: no such file or directory on node ${this.o.nodeId}; put the model there on every node that may run it, or give the catalog a URL source to fetch`,
            { path: src.path, node: this.o.nodeId, retryable: false },
          );
        return { kind: 'local', path: src.path };
      }
      case 'url':
        break;
      default: {
        const never: never = src;
        throw new Error(`unknown source ${String(never)}`);
      }
    }
    const key = weightsKey(src.url, spec.sha256);
    const held = await this.file(key);
    if (held) {
      opts.onProgress?.({
        phase: 'done',
        key,
        url: src.url,
        from: 'cache',
        bytesDone: held.size,
        total: held.size,
        rateBps: 0,
        resumedFrom: held.size,
        waiters: 1,
      });
      return { kind: 'cached', path: held.path, file: held };
    }
    const joined = this.flights.get(key);
    return this.wait(joined ?? this.start(key, src.url, spec.sha256), opts, joined !== undefined);
  }

  /** A whole file of the cache by key, or null. */
  async file(key: string): Promise<HeldFile | null> {
    if (!isWeightsKey(key)) return null;
    try {
      const m = JSON.parse(await readFile(join(this.o.dir, key, MANIFEST), 'utf8')) as HeldFile;
      const s = await stat(m.path);
      return s.size === m.size ? m : null;
    } catch {
      return null;
    }
  }

  /** Every whole file in the cache (what the agent reports at start). */
  async held(): Promise<HeldFile[]> {
    const keys = await readdir(this.o.dir).catch(() => [] as string[]);
    const files = await Promise.all(keys.map((k) => this.file(k)));
    return files.filter((f): f is HeldFile => f !== null);
  }

  /** How many downloads are under way (for tests and logs). */
  inFlight(): number {
    return this.flights.size;
  }

  private async wait(flight: Flight, opts: EnsureOptions, shared: boolean): Promise<EnsureResult> {
    if (opts.signal?.aborted) throw aborted();
    flight.waiters++;
    flight.last.waiters = flight.waiters;
    const listener = opts.onProgress;
    if (listener) {
      flight.listeners.add(listener);
      listener(flight.last);
    }
    let onAbort: (() => void) | undefined;
    const gaveUp = new Promise<never>((_, reject) => {
      onAbort = (): void => reject(aborted());
      opts.signal?.addEventListener('abort', onAbort, { once: true });
    });
    gaveUp.catch(() => undefined);
    try {
      const { file, r, ms } = await Promise.race([flight.promise, gaveUp]);
      return {
        kind: 'fetched',
        path: file.path,
        file,
        transferred: r.transferred,
        resumedFrom: r.resumedFrom,
        ms,
        shared,
      };
    } finally {
      if (onAbort) opts.signal?.removeEventListener('abort', onAbort);
      if (listener) flight.listeners.delete(listener);
      flight.waiters--;
      flight.last.waiters = flight.waiters;
      // The last waiter gone: stop the download (its partial stays for the next fetch).
      const key = flight.last.key;
      if (flight.waiters === 0 && this.flights.get(key) === flight) {
        flight.abort.abort();
        this.flights.delete(key);
        const closed = flight.promise.then(
          () => undefined,
          () => undefined,
        );
        this.stopping.set(key, closed);
        void closed.then(() => this.stopping.get(key) === closed && this.stopping.delete(key));
      }
    }
  }

  private start(key: string, url: string, sha256: string | undefined): Flight {
    const flight: Flight = {
      promise: Promise.resolve() as never,
      listeners: new Set(),
      waiters: 0,
      abort: new AbortController(),
      last: {
        phase: 'checking',
        key,
        url,
        from: 'origin',
        bytesDone: 0,
        total: null,
        rateBps: 0,
        resumedFrom: 0,
        waiters: 0,
      },
    };
    const started = Date.now();
    // A download being stopped (every waiter left) still owns the partial: the new one begins when it is done.
    const after = this.stopping.get(key) ?? Promise.resolve();
    flight.promise = after.then(() => this.run(flight, url, sha256)).then((x) => ({ ...x, ms: Date.now() - started }));
    const forget = (): void => void (this.flights.get(key) === flight && this.flights.delete(key));
    flight.promise.then(forget, forget);
    this.flights.set(key, flight);
    return flight;
  }

  /** Reports one transfer's progress to every waiter (at most every 100 ms, and each phase change). */
  private reporter(flight: Flight, from: string): (p: TransferProgress) => void {
    const meter = new RateMeter();
    let lastAt = 0;
    return (p) => {
      const now = Date.now();
      if (p.phase === flight.last.phase && now - lastAt < 100 && p.bytesDone !== p.total) return;
      lastAt = now;
      const rateBps = p.phase === 'downloading' ? meter.add(p.bytesDone) : 0;
      flight.last = { ...flight.last, ...p, from, rateBps, waiters: flight.waiters };
      for (const l of flight.listeners) l(flight.last);
    };
  }

  private async run(
    flight: Flight,
    url: string,
    sha256: string | undefined,
  ): Promise<{ file: HeldFile; r: TransferResult }> {
    const key = flight.last.key;
    const dir = join(this.o.dir, key);
    await mkdir(dir, { recursive: true });
    const final = join(dir, cacheFileName(url));
    const part = `${final}.part`;
    const signal = flight.abort.signal;
    const common = { part, signal, idleTimeoutMs: this.o.idleTimeoutMs };

    for (const peer of await this.candidates(key, sha256)) {
      const peerUrl = `${peer.endpoint.replace(/\/$/, '')}/v1/weights/${key}`;
      const from = `peer ${peer.nodeId}`;
      const meta = await readPartMeta(part);
      // A partial from elsewhere is continued only when the catalog's sha256 will check the whole file.
      const resume = meta !== null && (sha256 !== undefined || meta.url === peerUrl);
      try {
        const tls = this.o.peerTls?.();
        const r = await transfer({
          ...common,
          url: peerUrl,
          resume,
          tls: tls ? { ...tls, expectCn: peer.nodeId } : undefined,
          onProgress: this.reporter(flight, from),
        });
        const expected = sha256 ?? peer.sha256;
        if (r.sha256 === expected)
          return { file: await this.finish(flight, final, part, url, r, sha256 !== undefined, from), r };
        this.log('weights from a peer do not match, trying the next source', {
          key,
          peer: peer.nodeId,
          expected,
          got: r.sha256,
        });
        await dropPart(part);
      } catch (err) {
        if (signal.aborted) throw aborted();
        this.log('weights fetch from a peer failed, trying the next source', {
          key,
          peer: peer.nodeId,
          error: (err as Error).message,
        });
      }
    }

    const meta = await readPartMeta(part);
    const sameOrigin = meta?.url === url;
    const resume = meta !== null && (sameOrigin || sha256 !== undefined);
    const onProgress = this.reporter(flight, 'origin');
    let r = await transfer({ ...common, url, resume, ifRange: sameOrigin ? meta?.validator : undefined, onProgress });
    if (sha256 && r.sha256 !== sha256 && r.resumedFrom > 0) {
      // The kept bytes may be what is wrong (another source's, or a file changed without a validator): once whole.
      this.log('resumed weights do not match the catalog sha256, fetching them whole once more', {
        key,
        url,
        got: r.sha256,
      });
      r = await transfer({ ...common, url, resume: false, onProgress });
    }
    if (sha256 && r.sha256 !== sha256) {
      await dropPart(part);
      throw new LlmgwError(
        'LLMGW_WEIGHTS_SHA_MISMATCH',
        `weights ${url}: sha256 ${r.sha256} is not the catalog's ${sha256}; the file was deleted. Check the catalog's sha256 against the origin (sha256sum), or correct the URL`,
        { url, expected: sha256, actual: r.sha256, size: r.size, retryable: false },
      );
    }
    return { file: await this.finish(flight, final, part, url, r, sha256 !== undefined, 'origin'), r };
  }

  private async candidates(key: string, sha256: string | undefined): Promise<PeerCandidate[]> {
    if (!this.o.peers) return [];
    try {
      const all = (await this.o.peers(key)).filter(
        (p) => p.nodeId !== this.o.nodeId && (!sha256 || p.sha256 === sha256),
      );
      return shuffle(all).slice(0, this.o.maxPeers ?? 2);
    } catch (err) {
      this.log('could not ask the control plane for peers holding weights; fetching from the origin', {
        key,
        error: (err as Error).message,
      });
      return [];
    }
  }

  /** Manifest first, then the rename: a file at its final path is whole, and its manifest is already there. */
  private async finish(
    flight: Flight,
    final: string,
    part: string,
    url: string,
    r: TransferResult,
    verified: boolean,
    from: string,
  ): Promise<HeldFile> {
    const key = flight.last.key;
    const file: HeldFile = {
      key,
      url,
      path: final,
      size: r.size,
      sha256: r.sha256,
      verified,
      storedAt: new Date().toISOString(),
      from,
    };
    const manifest = join(this.o.dir, key, MANIFEST);
    await writeFile(`${manifest}.tmp`, JSON.stringify(file, null, 2));
    await rename(`${manifest}.tmp`, manifest);
    await rename(part, final);
    await rm(`${part}.json`, { force: true });
    // The renames last through a power cut only once the directory itself is on disk.
    const d = await open(join(this.o.dir, key), 'r');
    await d.sync().finally(() => d.close());
    flight.last = { ...flight.last, phase: 'done', bytesDone: r.size, total: r.size, rateBps: 0 };
    for (const l of flight.listeners) l(flight.last);
    this.log('weights stored', {
      key,
      url,
      from,
      size: r.size,
      sha256: r.sha256,
      verified,
      transferred: r.transferred,
      resumedFrom: r.resumedFrom,
    });
    await this.o
      .onStored?.(file)
      .catch((err: Error) =>
        this.log('could not report stored weights to the control plane', { key, error: err.message }),
      );
    return file;
  }
}

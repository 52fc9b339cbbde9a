/**
 * Affinity routing's two parts: a request's key (a hash of its session id or of a bounded prefix of its prompt,
 * read from the bytes the request check already located, never more than the bound) and the hash ring that maps a
 * key to a replica. The ring is built from replica ids alone, so every gateway maps a key to the same replica.
 */
import { ROUTING_DEFAULTS, type ModelRouting, type RoutingPolicy } from '../../lib/types';
import type { JsonSlice } from './json-scan';

/** A model's routing with every field set. */
export interface ResolvedRouting {
  policy: RoutingPolicy;
  sessionHeader: string;
  prefixBytes: number;
  loadFactor: number;
}

/** The catalog's routing of a model with the defaults filled in (least outstanding when it sets none). */
export function resolveRouting(r: ModelRouting | undefined): ResolvedRouting {
  return {
    policy: r?.policy ?? ROUTING_DEFAULTS.policy,
    sessionHeader: r?.sessionHeader ?? ROUTING_DEFAULTS.sessionHeader,
    prefixBytes: r?.prefixBytes ?? ROUTING_DEFAULTS.prefixBytes,
    loadFactor: r?.loadFactor ?? ROUTING_DEFAULTS.loadFactor,
  };
}

/** True for a policy that routes by key on a hash ring. */
export const byKey = (p: RoutingPolicy): boolean => p === 'session' || p === 'prefix';

const FNV_OFFSET = 0x811c9dc5;
/** The most bytes of a session id hashed: ids are short, a longer `user` is hashed by its start. */
const MAX_SESSION_BYTES = 256;

/** FNV-1a over bytes [start, end) of `b`, continuing from `h`. */
export function fnv1a(b: Uint8Array, start: number, end: number, h = FNV_OFFSET): number {
  for (let i = start; i < end; i++) h = Math.imul(h ^ (b[i] as number), 0x01000193);
  return h >>> 0;
}

/** FNV-1a over a string's UTF-16 units. */
function fnv1aText(s: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Murmur3's finalizer: spreads FNV's low-entropy high bits over the whole ring. */
function mix(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * Where the hashed prefix of a prompt value ends: at most `maxBytes` from its start and, for a chat's `messages`
 * array, no further than the end of its first message (the system prompt, or the conversation's opening turn: what
 * every later request of it repeats). A bounded scan of a body the request check already found to be valid JSON.
 */
export function prefixEnd(body: Uint8Array, s: JsonSlice, maxBytes: number): number {
  const limit = Math.min(s.end, s.start + maxBytes);
  if (s.kind !== 'array') return limit;
  let depth = 0;
  for (let i = s.start; i < limit; i++) {
    const c = body[i] as number;
    if (c === 0x22) {
      // Skip the string, escapes included.
      for (i++; i < limit; i++) {
        const d = body[i] as number;
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) depth++;
    else if (c === 0x5d || c === 0x7d) {
      depth--;
      // The first element closed back to the array's own level: stop after it.
      if (depth === 1) return i + 1;
    } else if (c === 0x2c && depth === 1) return i; // a scalar first element
  }
  return limit;
}

/** The parts of a request a key is read from: its body, the slices the request check located, its headers. */
export interface KeySource {
  body: Uint8Array;
  /** `messages` (chat) or `prompt` (completions); absent for embeddings */
  prompt?: JsonSlice;
  user?: JsonSlice;
  headers: Record<string, string | string[] | undefined>;
}

/**
 * The request's affinity key under `r`, or null when it has none (then the pick is least outstanding): for
 * `session`, the session header, else a string `user`; for `prefix`, the prompt's first bytes (prefixEnd).
 */
export function affinityKey(r: ResolvedRouting, src: KeySource): number | null {
  if (r.policy === 'session') {
    const h = src.headers[r.sessionHeader];
    const v = Array.isArray(h) ? h[0] : h;
    if (v) return mix(fnv1aText(v.length > MAX_SESSION_BYTES ? v.slice(0, MAX_SESSION_BYTES) : v));
    const u = src.user;
    if (u?.kind === 'string' && u.end - u.start > 2)
      return mix(fnv1a(src.body, u.start, Math.min(u.end, u.start + MAX_SESSION_BYTES)));
    return null;
  }
  if (r.policy === 'prefix' && src.prompt) {
    return mix(fnv1a(src.body, src.prompt.start, prefixEnd(src.body, src.prompt, r.prefixBytes)));
  }
  return null;
}

/** Points each replica has on the ring: enough that 4 replicas share it within a few percent. */
const VNODES = 160;

/**
 * A consistent-hash ring over a model's replicas, by id. It keeps only the ids' order: a walk is handed the table's
 * current replicas (a refresh makes new objects for the same replicas; the ring stays as long as their ids do).
 */
export class HashRing {
  private readonly points: Uint32Array;
  private readonly owners: Uint16Array;
  private readonly seen: Uint8Array;
  private readonly ids: string[];

  constructor(members: readonly { id: string }[]) {
    const n = Math.min(members.length, 0xffff);
    this.ids = members.slice(0, n).map((m) => m.id);
    const pairs = new Float64Array(n * VNODES);
    for (let i = 0; i < n; i++) {
      const id = this.ids[i] as string;
      // point × 2^16 + owner sorts by point and keeps the owner (both exact in a double).
      for (let v = 0; v < VNODES; v++) pairs[i * VNODES + v] = mix(fnv1aText(`${id}#${v}`)) * 65536 + i;
    }
    pairs.sort();
    this.points = new Uint32Array(pairs.length);
    this.owners = new Uint16Array(pairs.length);
    for (let k = 0; k < pairs.length; k++) {
      const p = pairs[k] as number;
      this.points[k] = Math.floor(p / 65536);
      this.owners[k] = p % 65536;
    }
    this.seen = new Uint8Array(n);
  }

  /** True when the ring was built over replicas of exactly these ids, in this order. */
  matches(replicas: readonly { id: string }[]): boolean {
    if (replicas.length !== this.ids.length) return false;
    for (let i = 0; i < replicas.length; i++) if ((replicas[i] as { id: string }).id !== this.ids[i]) return false;
    return true;
  }

  /**
   * The first of `members` (the replicas the ring was built over, as matches() checked) clockwise from `key` that
   * `accept` takes, each asked once; null when none does.
   */
  walk<T extends { id: string }>(key: number, members: readonly T[], accept: (r: T) => boolean): T | null {
    const pts = this.points;
    const total = pts.length;
    if (total === 0) return null;
    let lo = 0;
    let hi = total;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((pts[mid] as number) < key) lo = mid + 1;
      else hi = mid;
    }
    const start = this.owners[lo % total] as number;
    const first = members[start] as T;
    if (accept(first)) return first;
    // Rare path (the owner is full, ejected or failed this request): walk on, each replica once.
    const seen = this.seen;
    seen.fill(0);
    seen[start] = 1;
    let left = this.ids.length - 1;
    for (let k = 1; k < total && left > 0; k++) {
      const o = this.owners[(lo + k) % total] as number;
      if (seen[o]) continue;
      seen[o] = 1;
      left--;
      const r = members[o] as T;
      if (accept(r)) return r;
    }
    return null;
  }
}

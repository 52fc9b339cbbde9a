/**
 * Which activity task tokens the door handed to which node. Temporal does not sign task tokens (they are plain
 * protobufs a node could forge or copy), so a heartbeat or completion is let through only with a token the door
 * itself passed to that node's certificate in a poll answer. Tokens are kept as SHA-256 digests, per common name,
 * in least-recently-used order with a cap per node: a token in use (a shard heartbeating for days) stays, one
 * nobody uses any more goes first.
 */
import { createHash } from 'node:crypto';

/** How many tokens each node may hold at once: far above what one node runs (its worker runs at most 100 activities). */
export const DEFAULT_TOKENS_PER_NODE = 4096;

/** A digest of a token (fixed size, whatever the token's). */
export function tokenDigest(token: Uint8Array): string {
  return createHash('sha256').update(token).digest('base64url');
}

/** Task tokens per common name, bounded. */
export class TaskTokenMemory {
  private readonly byCn = new Map<string, Map<string, number>>();
  private count = 0;
  private evicted = 0;

  constructor(private readonly perNode = DEFAULT_TOKENS_PER_NODE) {}

  /** Records that `cn` was handed `token`. */
  remember(cn: string, token: Uint8Array): void {
    let tokens = this.byCn.get(cn);
    if (!tokens) this.byCn.set(cn, (tokens = new Map()));
    const d = tokenDigest(token);
    if (tokens.delete(d)) this.count--;
    tokens.set(d, Date.now());
    this.count++;
    while (tokens.size > this.perNode) {
      const oldest = tokens.keys().next().value as string;
      tokens.delete(oldest);
      this.count--;
      this.evicted++;
    }
  }

  /** True when `cn` was handed `token` (and marks it as just used). */
  has(cn: string, token: Uint8Array): boolean {
    const tokens = this.byCn.get(cn);
    const d = tokenDigest(token);
    const at = tokens?.get(d);
    if (!tokens || at === undefined) return false;
    tokens.delete(d);
    tokens.set(d, Date.now());
    return true;
  }

  /** Forgets a token once its task is over (completed, failed or cancelled). */
  forget(cn: string, token: Uint8Array): void {
    const tokens = this.byCn.get(cn);
    if (tokens?.delete(tokenDigest(token))) this.count--;
    if (tokens && tokens.size === 0) this.byCn.delete(cn);
  }

  /** Tokens held, nodes holding any, and tokens dropped for the cap so far. */
  stats(): { tokens: number; nodes: number; evicted: number } {
    return { tokens: this.count, nodes: this.byCn.size, evicted: this.evicted };
  }
}

/**
 * Which activity task tokens the door handed to which node. Temporal does not sign task tokens (they are plain
 * protobufs a node could forge or copy), so a heartbeat or completion is let through only with a token the door
 * itself passed to that node's certificate in a poll answer. Tokens are kept as SHA-256 digests, per common name,
 * in least-recently-used order with a cap per node: a token in use (a shard heartbeating for days) stays, one
 * nobody uses any more goes first. With a backing store (MySQL), each token handed out is also written there, so a
 * restarted control plane, or another one, recalls the tokens of tasks still running instead of refusing them.
 */
import { createHash } from 'node:crypto';

/** How many tokens each node may hold at once: far above what one node runs (its worker runs at most 100 activities). */
export const DEFAULT_TOKENS_PER_NODE = 4096;

/** A digest of a token (fixed size, whatever the token's). */
export function tokenDigest(token: Uint8Array): string {
  return createHash('sha256').update(token).digest('base64url');
}

/** Where tokens outlive the process (the store's door_task_tokens). */
export interface TokenBacking {
  rememberTaskToken(cn: string, digest: string): Promise<void>;
  hasTaskToken(cn: string, digest: string): Promise<boolean>;
  forgetTaskToken(cn: string, digest: string): Promise<void>;
}

export interface TokenMemoryOptions {
  /** tokens kept in memory per node (default 4096) */
  perNode?: number;
  backing?: TokenBacking;
  /** told when the backing store fails (the memory goes on without it) */
  log?: (msg: string, fields: Record<string, unknown>) => void;
}

/** Task tokens per common name, bounded. */
export class TaskTokenMemory {
  private readonly byCn = new Map<string, Map<string, number>>();
  private count = 0;
  private evicted = 0;
  private readonly perNode: number;

  constructor(private readonly o: TokenMemoryOptions = {}) {
    this.perNode = o.perNode ?? DEFAULT_TOKENS_PER_NODE;
  }

  private backed(what: string, cn: string, p: Promise<unknown> | undefined): void {
    void p?.catch((err: Error) => this.o.log?.('task token store failed', { what, cn, error: err.message }));
  }

  /** Records that `cn` was handed `token` (in memory at once; in the backing store shortly after). */
  remember(cn: string, token: Uint8Array): void {
    const d = tokenDigest(token);
    this.hold(cn, d);
    this.backed('remember', cn, this.o.backing?.rememberTaskToken(cn, d));
  }

  /**
   * For a token memory does not hold (a restart, or evicted): true, and held in memory again, when the backing
   * store says it was handed to `cn`.
   */
  async recall(cn: string, token: Uint8Array): Promise<boolean> {
    if (this.has(cn, token)) return true;
    const d = tokenDigest(token);
    if (
      !(await this.o.backing?.hasTaskToken(cn, d).catch((err: Error) => {
        this.o.log?.('task token store failed', { what: 'recall', cn, error: err.message });
        return false;
      }))
    )
      return false;
    this.hold(cn, d);
    return true;
  }

  private hold(cn: string, d: string): void {
    let tokens = this.byCn.get(cn);
    if (!tokens) this.byCn.set(cn, (tokens = new Map()));
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
    const d = tokenDigest(token);
    if (tokens?.delete(d)) this.count--;
    if (tokens && tokens.size === 0) this.byCn.delete(cn);
    this.backed('forget', cn, this.o.backing?.forgetTaskToken(cn, d));
  }

  /** Tokens held, nodes holding any, and tokens dropped for the cap so far. */
  stats(): { tokens: number; nodes: number; evicted: number } {
    return { tokens: this.count, nodes: this.byCn.size, evicted: this.evicted };
  }
}

/**
 * The sim engine's prefix cache, as vLLM's automatic prefix caching works: a prompt is cut into blocks of
 * BLOCK_TOKENS tokens (the sim's tokens are whitespace-separated words), each block keyed by a hash of every token
 * up to its end, and the blocks live in an LRU within a token budget. A request reuses the leading blocks found,
 * and the rest are computed (its prefill) and kept. Pure, no I/O.
 */

/** Tokens per cached block (vLLM's default block size). Only whole blocks are cached. */
export const BLOCK_TOKENS = 16;

/** What one lookup found. */
export interface CacheLookup {
  /** prompt tokens in all */
  promptTokens: number;
  /** of them, served from the cache (OpenAI's usage.prompt_tokens_details.cached_tokens) */
  cachedTokens: number;
}

const isWs = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * The key of each whole block of `text`'s words: two FNV-1a streams over every word so far (53 bits, no
 * collisions at any cache size the sim has), read at each BLOCK_TOKENS-th word's end. One pass, no split.
 */
export function blockKeys(text: string): { keys: number[]; tokens: number } {
  let a = 0x811c9dc5;
  let b = 0x01000193;
  let words = 0;
  let inWord = false;
  const keys: number[] = [];
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 0x20;
    if (!isWs(c)) {
      inWord = true;
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      continue;
    }
    if (!inWord) continue;
    inWord = false;
    words++;
    // The word's end is part of the hash: "ab c" and "a bc" differ.
    a = Math.imul(a ^ 0x20, 0x01000193);
    b = Math.imul(b ^ 0x20, 0x5bd1e995);
    if (words % BLOCK_TOKENS === 0) keys.push((a >>> 0) * 2 ** 21 + ((b >>> 0) >>> 11));
  }
  return { keys, tokens: words };
}

/** An LRU of prompt blocks within `budgetTokens` (0: no cache, every token computed). */
export class PrefixCache {
  /** block key → nothing; Map order is recency (oldest first) */
  private readonly blocks = new Map<number, true>();
  /** every lookup's prompt tokens, and those served from the cache (vLLM's prefix_cache_queries / _hits) */
  queries = 0;
  hits = 0;

  constructor(readonly budgetTokens: number) {}

  /** Looks `text` up: its leading cached blocks are reused (and made recent), the rest computed and kept. */
  lookup(text: string): CacheLookup {
    const { keys, tokens } = blockKeys(text);
    let found = 0;
    if (this.budgetTokens >= BLOCK_TOKENS) {
      while (found < keys.length && this.blocks.has(keys[found] as number)) {
        const k = keys[found] as number;
        this.blocks.delete(k);
        this.blocks.set(k, true);
        found++;
      }
      for (let i = found; i < keys.length; i++) this.blocks.set(keys[i] as number, true);
      const max = Math.floor(this.budgetTokens / BLOCK_TOKENS);
      for (const k of this.blocks.keys()) {
        if (this.blocks.size <= max) break;
        this.blocks.delete(k);
      }
    }
    // As vLLM: the last prompt token is always computed (its logits start the answer).
    const cachedTokens = Math.max(0, Math.min(found * BLOCK_TOKENS, tokens - 1));
    this.queries += tokens;
    this.hits += cachedTokens;
    return { promptTokens: tokens, cachedTokens };
  }

  /** The share of the budget the cached blocks fill, 0..1 (vLLM's gpu_cache_usage_perc). */
  usage(): number {
    return this.budgetTokens > 0 ? Math.min(1, (this.blocks.size * BLOCK_TOKENS) / this.budgetTokens) : 0;
  }
}

/**
 * The sim's prefill: one GPU computes one prompt at a time, first come first served, at `tokensPerSecond` uncached
 * tokens (0: instantly). Tracks the requests waiting for it (vLLM's num_requests_waiting).
 */
export class PrefillQueue {
  private freeAt = 0;
  /** start times of admitted prefills, ascending (first come first served) */
  private readonly starts: number[] = [];

  constructor(private readonly tokensPerSecond: number) {}

  /** Schedules the prefill of `uncached` tokens arriving at `now` (ms); returns when it ends. */
  schedule(uncached: number, now: number): number {
    if (this.tokensPerSecond <= 0) return now;
    this.waiting(now); // drops the started ones: the list holds the queue, not the history
    const start = Math.max(now, this.freeAt);
    this.freeAt = start + (uncached * 1000) / this.tokensPerSecond;
    this.starts.push(start);
    return this.freeAt;
  }

  /** Requests whose prefill has not started at `now`. */
  waiting(now: number): number {
    while (this.starts.length > 0 && (this.starts[0] as number) <= now) this.starts.shift();
    return this.starts.length;
  }
}

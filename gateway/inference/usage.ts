/**
 * Usage per key, model and hour on one gateway: counted in memory per request (no allocation once a key and model
 * were seen), written to MySQL's key_usage in one statement per flush, kept for the next flush when MySQL fails.
 */
import type { UsageDelta } from '../../lib/store/keys';
import type { GatewayLog } from './log';

interface UsageCounters {
  /** epoch ms of the hour the counts since the last flush began in */
  hour: number;
  requests: number;
  refused: number;
  promptTokens: number;
  completionTokens: number;
}

const HOUR = 3_600_000;
/** Most deltas kept for a later flush while MySQL cannot be written. */
const MAX_KEPT = 10_000;

/** The counts of one gateway since its last flush. */
export class UsageBook {
  private readonly byKey = new Map<number, Map<string, UsageCounters>>();
  private kept: UsageDelta[] = [];

  constructor(
    private readonly write: (deltas: UsageDelta[]) => Promise<void>,
    private readonly log: GatewayLog,
    private readonly clock: () => number,
  ) {}

  /** Counts an answered request and the tokens it used. */
  answered(keyId: number, model: string, promptTokens: number, completionTokens: number): void {
    const u = this.counters(keyId, model);
    u.requests++;
    u.promptTokens += promptTokens;
    u.completionTokens += completionTokens;
  }

  /** Counts a request the quota refused (429). */
  refused(keyId: number, model: string): void {
    this.counters(keyId, model).refused++;
  }

  private counters(keyId: number, model: string): UsageCounters {
    let models = this.byKey.get(keyId);
    if (!models) this.byKey.set(keyId, (models = new Map()));
    let u = models.get(model);
    if (!u) models.set(model, (u = { hour: 0, requests: 0, refused: 0, promptTokens: 0, completionTokens: 0 }));
    if (u.requests === 0 && u.refused === 0) u.hour = Math.floor(this.clock() / HOUR) * HOUR;
    return u;
  }

  /** Writes everything counted since the last flush (and what an earlier flush could not write) in one statement. */
  async flush(): Promise<void> {
    const deltas = this.kept;
    this.kept = [];
    for (const [keyId, models] of this.byKey)
      for (const [model, u] of models) {
        if (u.requests === 0 && u.refused === 0) continue;
        deltas.push({ keyId, model, ...u });
        u.requests = u.refused = u.promptTokens = u.completionTokens = 0;
      }
    if (deltas.length === 0) return;
    try {
      await this.write(deltas);
    } catch (err) {
      this.log('cannot write key usage; kept for the next flush', { level: 'warn', error: (err as Error).message });
      this.kept = deltas.slice(-MAX_KEPT).concat(this.kept).slice(-MAX_KEPT);
    }
  }
}

/**
 * A quota store (MySQL) that hangs must not hold requests: a request waits on a lease leaseWaitMs at most, then is
 * served from a local slice; while the store is known down no request waits at all; and the local slices stay
 * bounded (one limit per gateway per minute), so a long outage ends in 429s, never in an unbounded grant.
 */
import { QuotaKeeper, type QuotaRefusal, type QuotaStore } from '../../gateway/inference/quota';
import type { KeyRecord } from '../../lib/store/keys';

const key: KeyRecord = {
  id: 7,
  name: 'k',
  digest: 'd'.repeat(64),
  models: null,
  rpm: 100,
  tpm: null,
  expiresAt: null,
  revoked: false,
};

/** A store whose leases never answer (a MySQL that accepts the connection and says nothing). */
const hanging: QuotaStore = {
  lease: () => new Promise(() => undefined),
  charge: async () => undefined,
  addUsage: async () => undefined,
  pruneQuota: async () => 0,
};

const taken = async (q: QuotaKeeper): Promise<{ refusal: QuotaRefusal | null; ms: number }> => {
  const t0 = Date.now();
  const r = q.take(key, 0);
  const refusal = r === null ? null : 'then' in r ? await r : r;
  return { refusal, ms: Date.now() - t0 };
};

test('a hanging quota store holds a request leaseWaitMs at most, then none at all; the local slices stay bounded', async () => {
  const q = new QuotaKeeper(hanging, { leaseWaitMs: 300 });
  const first = await taken(q);
  expect(first.refusal).toBeNull();
  expect(first.ms).toBeGreaterThanOrEqual(280);
  expect(first.ms).toBeLessThan(2000);
  // Known down now: the next leases fail at once, and the requests are served from local slices without waiting.
  let served = 1;
  let refused: QuotaRefusal | null = null;
  let slowest = 0;
  for (let i = 0; i < 300 && !refused; i++) {
    const r = await taken(q);
    slowest = Math.max(slowest, r.ms);
    if (r.refusal) refused = r.refusal;
    else served++;
  }
  expect(slowest).toBeLessThan(200);
  // One limit (100 requests) of local slices per minute, then 429s.
  expect(served).toBeGreaterThanOrEqual(100);
  expect(served).toBeLessThanOrEqual(102);
  expect(refused?.code).toBe('LLMGW_RATE_LIMITED_REQUESTS');
});

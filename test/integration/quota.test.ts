/** The quota keeper against a real MariaDB, on a clock of the test's own: minute starts, debts, a store that fails. */
import type { Pool } from 'mysql2/promise';
import { QuotaKeeper } from '../../gateway/inference/quota';
import { openDatabase } from '../../lib/store/db';
import { KeyStore, type KeyRecord } from '../../lib/store/keys';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const url = testMysqlUrl();
let pool: Pool;
let keys: KeyStore;
let now = 0;
const clock = (): number => now;
const MIN = 60_000;

beforeAll(async () => {
  pool = await openDatabase(url);
  keys = new KeyStore(pool);
});
afterAll(async () => {
  await pool.end();
  await dropDatabase(url);
});

async function key(name: string, o: { rpm?: number; tpm?: number }): Promise<KeyRecord> {
  await keys.create(
    { name, models: null, rpm: o.rpm ?? null, tpm: o.tpm ?? null, expiresAt: null },
    name.padEnd(64, '0'),
    'llmgw-x',
  );
  const { keys: all } = await keys.changedSince(null);
  return all.find((k) => k.name === name) as KeyRecord;
}
/** Runs take() to its answer; `waited` says whether it had to wait on MySQL. */
async function take(
  q: QuotaKeeper,
  k: KeyRecord,
  estimate: number,
): Promise<{ refused: string | null; waited: boolean }> {
  const t = q.take(k, estimate);
  if (t === null) return { refused: null, waited: false };
  if (!('then' in t)) return { refused: t.code, waited: false };
  const r = await t;
  return { refused: r?.code ?? null, waited: true };
}
const settled = async (q: QuotaKeeper): Promise<void> => {
  // Background leases run on the pool: wait until none is in flight.
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 20));
    if (!(q as unknown as { states: Map<number, { leasing: unknown; nextLeasing: boolean }> }).states.size) return;
    const busy = [
      ...(q as unknown as { states: Map<number, { leasing: unknown; nextLeasing: boolean }> }).states.values(),
    ].some((s) => s.leasing || s.nextLeasing);
    if (!busy) return;
  }
  throw new Error('a lease never finished');
};

test("a key in use leases the next minute's first slice in this minute's last seconds: the minute starts without a wait", async () => {
  const k = await key('prefetch', { rpm: 1000 });
  const q = new QuotaKeeper(keys, { clock });
  now = 1000 * MIN + 10_000;
  expect(await take(q, k, 0)).toEqual({ refused: null, waited: true }); // the first of a minute waits on a lease
  expect(await take(q, k, 0)).toEqual({ refused: null, waited: false });
  now = 1000 * MIN + 58_500;
  await take(q, k, 0);
  await settled(q);
  expect(await keys.window(k.id, 1001)).toEqual({ requests: 20, tokens: 0 }); // one slice (2 %) of the next minute
  now = 1001 * MIN + 5;
  expect(await take(q, k, 0)).toEqual({ refused: null, waited: false });
});

test('tokens past the estimate are a debt charged with the next lease; the minute is then refused with Retry-After', async () => {
  const k = await key('debt', { tpm: 1000 });
  const q = new QuotaKeeper(keys, { clock });
  now = 2000 * MIN + 1000;
  expect((await take(q, k, 100)).refused).toBeNull();
  q.settle(k, 'm', 2000, 100, 300, 200); // 500 used on an estimate of 100
  await settled(q);
  let refusal = null;
  for (let i = 0; i < 20 && !refusal; i++) {
    const t = q.take(k, 100);
    refusal = t === null ? null : 'then' in t ? await t : t;
    if (!refusal) q.settle(k, 'm', 2000, 100, 50, 50);
  }
  expect(refusal?.code).toBe('LLMGW_RATE_LIMITED_TOKENS');
  expect(refusal?.retryAfterS).toBe(59);
  const w = await keys.window(k.id, 2000);
  // Every token used is in MySQL (leases plus the debt), and no more than one estimate past the limit.
  expect(w.tokens).toBeGreaterThanOrEqual(500 + 100 * 4);
  expect(w.tokens).toBeLessThanOrEqual(1000 + 400);
});

test('a minute spent on one gateway is refused at once on another, without waiting, once it has seen the budget spent', async () => {
  const k = await key('shared', { rpm: 3 });
  const a = new QuotaKeeper(keys, { clock });
  const b = new QuotaKeeper(keys, { clock });
  now = 3000 * MIN + 1000;
  const results = [];
  for (let i = 0; i < 3; i++) results.push((await take(a, k, 0)).refused);
  expect(results).toEqual([null, null, null]);
  expect((await take(b, k, 0)).refused).toBe('LLMGW_RATE_LIMITED_REQUESTS');
  expect(await take(b, k, 0)).toEqual({ refused: 'LLMGW_RATE_LIMITED_REQUESTS', waited: false });
});

test('usage is written in one batch per flush, per key, model and hour', async () => {
  const k = await key('usage', {});
  const q = new QuotaKeeper(keys, { clock: () => Date.now() });
  q.settle(k, 'sim-small', 0, 0, 10, 5);
  q.settle(k, 'sim-small', 0, 0, 1, 2);
  q.refused(k, 'sim-large');
  await q.flush();
  await q.flush(); // nothing new: nothing added twice
  const rows = await keys.usage('usage', 1);
  expect(
    rows.map(({ model, requests, refused, promptTokens, completionTokens }) => ({
      model,
      requests,
      refused,
      promptTokens,
      completionTokens,
    })),
  ).toEqual([
    { model: 'sim-large', requests: 0, refused: 1, promptTokens: 0, completionTokens: 0 },
    { model: 'sim-small', requests: 2, refused: 0, promptTokens: 11, completionTokens: 7 },
  ]);
});

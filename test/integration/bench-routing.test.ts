/**
 * `npm run bench:routing` at a small size, as CI's smoke test: every policy's trace and the long-prompt case run
 * through real sim engines and a real gateway process and give sane figures. No timing goal is asserted (the full
 * run is the benchmark; its figures are in docs/architecture.md).
 */
import { newApiKey } from '../../lib/api-keys';
import { ROUTING_DEFAULTS, routingReport, runRoutingBench } from '../bench/routing-run';

jest.setTimeout(240_000);

test('bench:routing runs every policy and the long-prompt case, and reports figures', async () => {
  const o = {
    ...ROUTING_DEFAULTS,
    systems: 4,
    systemTokens: 200,
    users: 20,
    replicas: 2,
    durationS: 2,
    warmupS: 1,
    // 1,000 tokens/s: about 8 requests/s offered, light enough for a loaded CI machine.
    prefillTokensPerSecond: 1000,
    cacheTokens: 512,
    bigKb: 220,
    bigConcurrency: 4,
    bigSeconds: 1,
    key: newApiKey(),
  };
  const r = await runRoutingBench(o);
  expect(r.rows.map((x) => x.policy)).toEqual(['round-robin', 'least', 'session', 'prefix']);
  for (const x of r.rows) {
    expect(x.sent).toBeGreaterThan(5);
    expect(x.ok + x.shed + x.failed).toBe(x.sent);
    expect(x.failed).toBe(0);
    expect(x.ttftMeanMs).toBeGreaterThan(0);
    expect(x.ttftP99Ms).toBeGreaterThanOrEqual(x.ttftP50Ms);
    expect(x.throughput).toBeGreaterThan(0);
    expect(x.cacheHitRate).toBeGreaterThanOrEqual(0);
    expect(x.cacheHitRate).toBeLessThan(1);
  }
  expect(r.big?.ok).toBeGreaterThan(0);
  expect(r.big?.failed).toBe(0);
  expect(r.big?.addedP99Ms).toBeGreaterThan(0);
  const report = routingReport(o, r);
  expect(report).toContain('| prefix |');
  expect(report).toContain('220 KB prompts');
});

/**
 * Serving never pays for the control path: with both cores saturated and load through the gateway on two
 * models, each outage of llmgw's own path — the control plane, Temporal, MySQL (a private server), an agent —
 * fails no request, rebuilds no replica and replaces no engine process. Run apart from the other suites
 * (scripts/test.sh), since it saturates the machine on purpose. Figures for each: npm run bench:faults.
 */
import { OUTAGES, startFaultCluster, runFault, type FaultCluster } from '../helpers/faults';

/** How long each outage lasts (the 30 s: longer than every liveness window, shorter than the backstops). */
const DOWN_MS = 30_000;

describe("outages of llmgw's own path cost nothing (both cores busy, load on sim-small and sim-large)", () => {
  let fc: FaultCluster;
  beforeAll(async () => {
    fc = await startFaultCluster();
  }, 180_000);
  afterAll(async () => {
    await fc?.close();
  }, 120_000);

  for (const [name, outage] of Object.entries(OUTAGES)) {
    test(
      name,
      async () => {
        const r = await runFault(fc, name, () => outage(fc, DOWN_MS));
        console.log(
          `${name}: ${r.load.ok} ok, ${r.load.failed} failed; rebuilds ${r.rebuilds.length}; engines replaced ${r.replacedEngines.length}; serving again ${r.servingAgainMs} ms`,
        );
        expect(r.load.ok).toBeGreaterThan(50);
        expect({ failed: r.load.failed, failures: r.load.failures }).toEqual({ failed: 0, failures: [] });
        expect(r.rebuilds).toEqual([]);
        expect(r.replacedEngines).toEqual([]);
      },
      240_000,
    );
  }
});

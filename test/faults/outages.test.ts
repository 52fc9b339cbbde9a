/**
 * Serving never pays for the control path: with both cores saturated and load through the gateway on two
 * models, each outage of llmgw's own path — the control plane, Temporal, MySQL (a private server), an agent —
 * fails no request, rebuilds no replica and replaces no engine process. Every replica is served through its
 * node's door throughout (the local cluster's default: engines on 127.0.0.1, the gateway presenting its gateway
 * certificate at each door), and no door is replaced: a killed agent's door serves on. Run apart from the other
 * suites (scripts/test.sh), since it saturates the machine on purpose. Figures for each: npm run bench:faults.
 */
import { doorRoutes, OUTAGES, startFaultCluster, runFault, type FaultCluster } from '../helpers/faults';

/** How long each outage lasts (the 30 s: longer than every liveness window, shorter than the backstops). */
const DOWN_MS = 30_000;

describe("outages of llmgw's own path cost nothing (both cores busy, load on sim-small and sim-large)", () => {
  let fc: FaultCluster;
  beforeAll(async () => {
    fc = await startFaultCluster();
    // Served through doors from the start: every ready replica of both models is routed at its node's door.
    const doors = await doorRoutes(fc);
    expect(doors.not).toEqual([]);
    expect(doors.through).toBe(3); // sim-small's 2, sim-large's 1
    expect([...fc.doorPids().keys()].sort()).toEqual(['sim-a', 'sim-b', 'sim-c']);
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
          `${name}: ${r.load.ok} ok, ${r.load.failed} failed; rebuilds ${r.rebuilds.length}; engines replaced ${r.replacedEngines.length}; doors replaced ${r.replacedDoors.length}; serving again ${r.servingAgainMs} ms; through doors after ${r.doors.through}`,
        );
        expect(r.load.ok).toBeGreaterThan(50);
        expect({ failed: r.load.failed, failures: r.load.failures }).toEqual({ failed: 0, failures: [] });
        expect(r.rebuilds).toEqual([]);
        expect(r.replacedEngines).toEqual([]);
        expect(r.replacedDoors).toEqual([]);
        // Every role restarted by the scenario is running at its end (an agent that failed to start again would go
        // unseen: its door and engines serve on without it).
        expect(r.deadRoles).toEqual([]);
        expect(r.doors).toEqual({ through: 3, not: [] });
      },
      240_000,
    );
  }
});

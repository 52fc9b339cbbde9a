/**
 * llmgw on nine hosts, each a network namespace with its own address (test/helpers/multi-host.ts): Temporal behind a
 * TLS terminator that requires client certificates (HAProxy; the roles connect with temporal.tls, and the dev server's
 * plaintext port is on its host's loopback only), MySQL with a user per role, two control planes, two
 * gateways behind an HAProxy load balancer, two sim nodes (real agents, the sim engine). Temporal's and MySQL's hosts
 * answer only the hosts that need them (policy routing in those hosts: `ip rule … prohibit`).
 *
 * Asserted: the nodes cannot open Temporal's ports or MySQL's (while the control planes can: the test would see a
 * missing firewall); the terminator refuses a client without a certificate; the nodes register and their workers run
 * through the control planes' Temporal doors, replicas become ready and completions flow through the load balancer;
 * one control plane and one gateway killed -9 under a steady stream of requests fail none of them. The figures
 * (requests, failures, times to recover) are printed.
 */
import { Client } from '@temporalio/client';
import { workflowIds } from '../../lib/names';
import { startLoad, waitRoutable } from '../helpers/load';
import { connectThroughTerminator, PORTS, startMultiHost, tryConnect, type MultiHost } from '../helpers/multi-host';
import { processExited, untilLogged } from '../helpers/llmgw-process';
import { closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'mh';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const json = (line: string): Record<string, unknown> => JSON.parse(line) as Record<string, unknown>;
/** What a connect that a firewall stopped meets: no route back (policy routing), a refusal, or no network. */
const STOPPED = ['EHOSTUNREACH', 'ECONNREFUSED', 'ENETUNREACH', 'EACCES'];

describe('llmgw on nine hosts (network namespaces): Temporal behind mTLS, MySQL per-role users, 2 control planes, 2 gateways behind a load balancer, 2 sim nodes', () => {
  let mh: MultiHost;
  const figures: string[] = [];
  /** A wait whose failure carries every role's last lines (their logs live in this process only). */
  const explained = <T>(p: Promise<T>): Promise<T> =>
    p.catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\n${mh.tails()}`);
    });

  beforeAll(async () => {
    const t0 = Date.now();
    mh = await startMultiHost({
      catalog: [
        {
          name: MODEL,
          source: `sim://${MODEL}`,
          replicas: 2,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] },
          ],
        },
      ],
      say: (s) => console.log(`[multi-host +${((Date.now() - t0) / 1000).toFixed(1)}s] ${s}`),
    });
  }, 900_000);

  afterAll(async () => {
    if (figures.length) console.log(`multi-host figures:\n  ${figures.join('\n  ')}`);
    await mh?.close();
    await closeCertClients();
  }, 180_000);

  test("the nodes cannot open Temporal's ports or MySQL's; the control planes can, and the gateways reach MySQL only", async () => {
    const { hosts, temporal } = mh;
    const mysqlAddr = `${hosts.mysql.address}:${PORTS.mysql}`;
    const seen: Record<string, Record<string, string>> = {};
    const probe = async (from: keyof MultiHost['hosts'], targets: Record<string, string>): Promise<void> => {
      seen[from] = {};
      for (const [name, addr] of Object.entries(targets)) seen[from][name] = await tryConnect(hosts[from], addr);
    };
    const all = { 'temporal tls': temporal.tlsAddress, 'temporal plain': temporal.plainAddress, mysql: mysqlAddr };
    for (const n of ['nodeA', 'nodeB'] as const)
      await probe(n, {
        ...all,
        'control plane': `${hosts.cp1.address}:${PORTS.control}`,
        door: `${hosts.cp1.address}:${PORTS.door}`,
      });
    await probe('cp1', all);
    await probe('gw1', all);
    console.log(`connects (from -> to: result):\n${JSON.stringify(seen, null, 1)}`);
    for (const n of ['nodeA', 'nodeB'] as const) {
      for (const target of Object.keys(all))
        expect([n, target, STOPPED]).toEqual([n, target, expect.arrayContaining([seen[n]?.[target]])]);
      expect(seen[n]?.['control plane']).toBe('connected');
      expect(seen[n]?.door).toBe('connected');
    }
    expect(seen.cp1).toEqual({ 'temporal tls': 'connected', 'temporal plain': 'ECONNREFUSED', mysql: 'connected' });
    expect(seen.gw1?.mysql).toBe('connected');
    expect(STOPPED).toContain(seen.gw1?.['temporal tls']);
    expect(STOPPED).toContain(seen.gw1?.['temporal plain']);
  }, 180_000);

  test("Temporal's terminator answers a client with Temporal's client certificate and refuses one without", async () => {
    const c = await connectThroughTerminator(mh.temporal);
    const info = await c.workflowService.getSystemInfo({});
    expect(info.serverVersion).toBeTruthy();
    await c.close();
    await expect(
      (async () => {
        const bare = await connectThroughTerminator(mh.temporal, { noCert: true });
        try {
          await bare.workflowService.getSystemInfo({});
        } finally {
          await bare.close();
        }
      })(),
    ).rejects.toThrow();
  }, 60_000);

  test('end to end: the nodes register through the control planes, their workers run through the Temporal door, replicas become ready, completions flow through the load balancer', async () => {
    let registeredAt = 0;
    for (const a of mh.agents) {
      // Root in a network namespace of its own, with nft: each agent fences its multi-node ranks (none here).
      await explained(untilLogged(a, 'rank fence on', 60_000, `${a.node}'s rank fence`));
      const reg = json(await explained(untilLogged(a, 'registered', 60_000, `${a.node} to register`)));
      registeredAt = Math.max(registeredAt, Date.parse(String(reg.t)));
      expect(reg).toMatchObject({
        server: mh.cpUrls.cp1,
        temporal: `${mh.hosts.cp1.address}:${PORTS.door}`,
        door: true,
      });
    }

    await explained(
      waitFor(async () => (await mh.store.listReplicas(MODEL)).filter((r) => r.state === 'ready').length === 2, {
        timeoutMs: 300_000,
        intervalMs: 500,
        what: `two ${MODEL} replicas ready`,
      }),
    );
    const replicas = await mh.store.listReplicas(MODEL);
    expect(new Set(replicas.map((r) => r.shards[0]?.nodeId)).size).toBe(2);
    await explained(waitRoutable(mh.lbUrl, MODEL, 60_000));
    const readyAt = Math.max(
      ...(await mh.store.recentEvents(200)).filter((e) => e.kind === 'replica.ready').map((e) => e.at.getTime()),
    );
    figures.push(
      `both replicas ready ${((readyAt - registeredAt) / 1000).toFixed(1)} s after the second agent registered`,
    );
    // The deployment runs on Temporal (reached by the control planes only); its shards' activities run on the nodes.
    const conn = await connectThroughTerminator(mh.temporal);
    try {
      const d = await new Client({ connection: conn }).workflow.getHandle(workflowIds.model(MODEL)).describe();
      expect(d.status.name).toBe('RUNNING');
    } finally {
      await conn.close();
    }
    const load = startLoad(mh.lbUrl, MODEL, { clients: 2 });
    await sleep(3000);
    const s = await load.stop();
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    expect(s.ok).toBeGreaterThan(5);
    // Both gateways took requests from the load balancer.
    const served = Object.fromEntries(
      (await mh.lb.stats())
        .filter((r) => r.pxname === 'gateways' && /^gw/.test(r.svname ?? ''))
        .map((r) => [r.svname, Number(r.stot)]),
    );
    expect(served.gw1).toBeGreaterThan(0);
    expect(served.gw2).toBeGreaterThan(0);
    figures.push(
      `warm-up through the load balancer: ${s.ok} requests in ${s.durationMs} ms, 0 failed; sessions per gateway ${JSON.stringify(served)}`,
    );
  }, 420_000);

  test('kill -9 one control plane and one gateway under a steady stream of requests: no request fails', async () => {
    const load = startLoad(mh.lbUrl, MODEL, { clients: 2 });
    await sleep(3000);
    const okAt = (): number => load.stats().ok;

    // The control plane the agents use.
    const cp1 = mh.controlPlanes.cp1.proc;
    const tCp = Date.now();
    cp1.child.kill('SIGKILL');
    await processExited(cp1.child);
    const moved: Record<string, number> = {};
    for (const a of mh.agents) {
      const line = json(
        await untilLogged(a, 'node worker moved to the door', 90_000, `${a.node}'s worker to move to cp2's door`),
      );
      expect(line).toMatchObject({ to: `${mh.hosts.cp2.address}:${PORTS.door}` });
      moved[a.node] = Date.parse(String(line.t)) - tCp;
    }
    const okBeforeGw = okAt();
    await sleep(2000);

    // One gateway, with requests in it.
    const gw1 = mh.gateways.gw1.proc;
    const tGw = Date.now();
    gw1.child.kill('SIGKILL');
    await processExited(gw1.child);
    await waitFor(async () => (await mh.lb.serverStatus('gateways', 'gw1'))?.startsWith('DOWN'), {
      timeoutMs: 30_000,
      intervalMs: 50,
      what: 'the load balancer to mark gw1 DOWN',
    });
    const gwDownMs = Date.now() - tGw;
    await sleep(3000);
    const okAfterGw = okAt();
    // Back to full strength: gw1 started again and UP at the load balancer.
    const tBack = Date.now();
    await mh.restart('gw1');
    await waitFor(async () => (await mh.lb.serverStatus('gateways', 'gw1')) === 'UP', {
      timeoutMs: 60_000,
      intervalMs: 50,
      what: 'gw1 UP again at the load balancer',
    });
    const gwBackMs = Date.now() - tBack;
    await sleep(2000);
    const s = await load.stop();
    const line = `kill -9 of cp1 and gw1 under load: ${s.sent} requests, ${s.ok} ok, ${s.failed} failed over ${(s.durationMs / 1000).toFixed(1)} s; node workers on cp2's door after ${JSON.stringify(moved)} ms; gw1 DOWN at the load balancer after ${gwDownMs} ms (${okAfterGw - okBeforeGw} requests ok meanwhile, through gw2); gw1 restarted and UP again after ${gwBackMs} ms`;
    console.log(line);
    figures.push(line);
    expect({ failed: s.failed, failures: s.failures }).toEqual({ failed: 0, failures: [] });
    expect(okAfterGw).toBeGreaterThan(okBeforeGw);
    expect(s.ok).toBeGreaterThan(20);
    for (const a of mh.agents) expect(a.child.exitCode).toBeNull();
  }, 420_000);
});

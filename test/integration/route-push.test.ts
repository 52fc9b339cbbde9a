/**
 * Routes pushed, not polled (real MariaDB, real control plane HTTPS servers with mTLS, the real gateway role): a
 * replica made ready through the control plane a gateway is subscribed to, or through another one, is routable
 * within a second while the gateway's poll interval is a minute; a gateway whose control plane goes away logs it
 * once, resubscribes to the next one and is replayed what changed meanwhile; one with no control plane left polls
 * MySQL (logged once) and resubscribes when its control plane is back.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import type { Pool } from 'mysql2/promise';
import type { ServerConfig } from '../../config/types';
import { buildControlServer } from '../../gateway/control/server';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { ModelSpec } from '../../lib/types';
import { startGatewayRole, type GatewayRole } from '../../workers/gateway';
import { dropDatabase, testConfig, testMysqlUrl, TEST_API_KEY } from '../helpers/cluster-parts';
import { freePort } from '../helpers/ports';
import { certClient, closeCertClients, writeGatewayCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL: ModelSpec = {
  name: 'push-m',
  source: 'sim://push-m',
  replicas: 1,
  profiles: [{ name: 'sim', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
};

interface Cp {
  app: FastifyInstance;
  store: Store;
  pool: Pool;
  port: number;
  url: string;
}

type Line = { msg: string; fields: Record<string, unknown> };

describe('route push (real MariaDB, control planes over mTLS, gateway role)', () => {
  let config: ServerConfig;
  const cps: Record<'a' | 'b' | 'c', Cp | null> = { a: null, b: null, c: null };
  const gateways: GatewayRole[] = [];
  const cpLog: Line[] = [];

  /** A control plane's HTTPS server with its own MySQL pool (as another process would have), on `port`. */
  const startCp = async (port: number): Promise<Cp> => {
    const pool = await openDatabase(config.mysql.url);
    const store = new Store(pool);
    const { app } = await buildControlServer({
      store,
      tls: {
        caPem: readFileSync(config.tls.ca, 'utf8'),
        certPem: readFileSync(config.tls.serverCert, 'utf8'),
        keyPem: readFileSync(config.tls.serverKey, 'utf8'),
      },
      log: (msg, fields) => void cpLog.push({ msg, fields }),
      temporal: { address: '127.0.0.1:1', namespace: 'default' },
      heartbeatMs: 1000,
      routeFeed: { pingMs: 500 },
    });
    await app.listen({ host: '127.0.0.1', port });
    return { app, store, pool, port, url: `https://127.0.0.1:${port}` };
  };
  const stopCp = async (cp: Cp | null): Promise<void> => {
    if (!cp) return;
    await cp.app.close();
    await cp.pool.end();
  };

  const startGw = async (controlPlanes: string[], refreshMs: number, log: Line[]): Promise<GatewayRole> => {
    const port = await freePort();
    const gw = await startGatewayRole({
      config: {
        ...config,
        listeners: { ...config.listeners, gateway: { host: '127.0.0.1', port } },
        gateway: { ...config.gateway, controlPlanes, refreshMs },
      },
      log: (msg, fields) => void log.push({ msg, fields: fields ?? {} }),
    });
    gateways.push(gw);
    return gw;
  };

  /** Replicas of `model` the gateway routes now. */
  const routable = async (gw: GatewayRole, model = MODEL.name): Promise<number> => {
    const res = await fetch(`${gw.url}/health/routes`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    const body = (await res.json()) as { models: Record<string, number> };
    return body.models[model] ?? 0;
  };

  const writeMs: number[] = [];
  /** Milliseconds from just before `write` until the gateway routes `want` replicas of the model (fails after `ms`). */
  const timeUntil = async (gw: GatewayRole, want: number, write: () => Promise<void>, ms: number): Promise<number> => {
    const t0 = performance.now();
    await write();
    writeMs.push(performance.now() - t0);
    await waitFor(async () => (await routable(gw)) === want, {
      timeoutMs: ms,
      intervalMs: 2,
      what: `${want} routable`,
    });
    return performance.now() - t0;
  };

  const ready = (store: Store, id: string): Promise<void> =>
    store.setReplica({ id, model: MODEL.name, profile: 'sim', state: 'ready', endpoint: 'http://127.0.0.1:9' });
  const stopped = (store: Store, id: string): Promise<void> =>
    store.setReplica({ id, model: MODEL.name, profile: 'sim', state: 'stopped', endpoint: null });
  const count = (log: Line[], msg: RegExp): number => log.filter((l) => msg.test(l.msg)).length;

  beforeAll(async () => {
    config = await testConfig({ temporalAddress: '127.0.0.1:1', mysqlUrl: testMysqlUrl(), catalog: [] });
    cps.a = await startCp(await freePort());
    cps.b = await startCp(await freePort());
    await cps.a.store.upsertModel(MODEL);
    await writeGatewayCert(config, cps.a.store);
  }, 60_000);

  afterAll(async () => {
    for (const gw of gateways) await gw.close();
    for (const k of ['a', 'b', 'c'] as const) await stopCp(cps[k]);
    await closeCertClients();
    await dropDatabase(config.mysql.url);
  }, 60_000);

  // A minute between polls: within a second, only a push can have told the gateway.
  const POLL_MS = 60_000;
  const BOUND_MS = 1000;

  it('routes a replica made ready through its own control plane or another within a second, and drops one that stopped', async () => {
    const log: Line[] = [];
    const gw = await startGw([cps.a!.url, cps.b!.url], POLL_MS, log);
    await waitFor(() => count(log, /^route push subscribed/) === 1, { timeoutMs: 10_000, what: 'subscribed' });
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      // a's own worker wrote it (pushed at once), then b's (a reads it at its next tail).
      const via = i % 2 === 0 ? cps.a!.store : cps.b!.store;
      times.push(await timeUntil(gw, i + 1, () => ready(via, `push-m-${i}`), BOUND_MS));
    }
    const gone = await timeUntil(gw, 4, () => stopped(cps.b!.store, 'push-m-0'), BOUND_MS);
    process.stderr.write(
      `ready → routable (ms, from the write's start): ${times.map((t) => t.toFixed(1)).join(', ')}; stopped → gone: ${gone.toFixed(1)}; the writes took ${writeMs.map((t) => t.toFixed(1)).join(', ')}\n`,
    );
    for (const t of [...times, gone]) expect(t).toBeLessThan(BOUND_MS);
    expect(count(log, /^route push (lost|unavailable)/)).toBe(0);
  }, 60_000);

  it('when its control plane goes, logs it once, resubscribes to the next and is replayed what changed meanwhile', async () => {
    const log: Line[] = [];
    const gw = await startGw([cps.a!.url, cps.b!.url], POLL_MS, log);
    await waitFor(() => count(log, /^route push subscribed/) === 1, { timeoutMs: 10_000, what: 'subscribed' });
    const before = await routable(gw);
    await stopCp(cps.a);
    cps.a = null;
    // Made while the gateway is between control planes: only the replay after its cursor brings it.
    await ready(cps.b!.store, 'push-m-replayed');
    await waitFor(() => count(log, /^route push resumed/) === 1, { timeoutMs: 10_000, what: 'resubscribed to b' });
    await waitFor(async () => (await routable(gw)) === before + 1, {
      timeoutMs: BOUND_MS,
      what: 'the replayed change',
    });
    expect(count(log, /^route push lost/)).toBe(1);
    const lost = log.find((l) => /^route push lost/.test(l.msg))!;
    expect(lost.fields).toMatchObject({ level: 'warn', refreshMs: POLL_MS });
    // Pushed by b now.
    const t = await timeUntil(gw, before + 2, () => ready(cps.b!.store, 'push-m-after'), BOUND_MS);
    expect(t).toBeLessThan(BOUND_MS);
  }, 60_000);

  it('with no control plane left it polls MySQL (logged once), and resubscribes when one is back', async () => {
    const port = await freePort();
    cps.c = await startCp(port);
    const log: Line[] = [];
    const gw = await startGw([cps.c.url], 200, log);
    await waitFor(() => count(log, /^route push subscribed/) === 1, { timeoutMs: 10_000, what: 'subscribed' });
    await stopCp(cps.c);
    cps.c = null;
    const before = await routable(gw);
    // No control plane pushes to this gateway: the change arrives by its poll.
    await ready(cps.b!.store, 'push-m-polled');
    await waitFor(async () => (await routable(gw)) === before + 1, { timeoutMs: 5000, what: 'the polled change' });
    // Several failed resubscriptions later, still one line.
    await new Promise((r) => setTimeout(r, 1500));
    expect(count(log, /^route push lost/)).toBe(1);
    expect(count(log, /^route push resumed/)).toBe(0);
    cps.c = await startCp(port);
    await waitFor(() => count(log, /^route push resumed/) === 1, { timeoutMs: 15_000, what: 'resubscribed to c' });
    const resumed = log.find((l) => /^route push resumed/.test(l.msg))!;
    expect(Number(resumed.fields.lostForMs)).toBeGreaterThan(1500);
    expect(count(log, /^route push lost/)).toBe(1);
  }, 60_000);

  it("refuses a subscription with another role's certificate", async () => {
    const operator = await certClient(config, cps.b!.store, 'ops-push', { role: 'operator' });
    const res = await operator.fetch(`${cps.b!.url}/v1/gateway/routes?after=0`);
    expect(res.status).toBe(403);
    expect(await res.text()).toMatch(/needs a gateway certificate/);
  });
});

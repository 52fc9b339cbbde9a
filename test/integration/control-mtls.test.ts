/**
 * Mutual TLS at the control plane, end to end over real TLS on loopback (real MariaDB, real Temporal, the real
 * control plane of workers/control.ts): a node is known by its certificate's CN and a claim of another id is
 * refused with one log line; no certificate, another CA's and an expired one are each refused with their own
 * line; `llmgw ctl revoke` cuts a revoked node's open keep-alive connection at once and the node cannot
 * register again; a real agent registers and heartbeats with its certificate and is refused once revoked; an
 * agent renews at two thirds of its certificate's lifetime over its mTLS connection, with no gap in heartbeats; a
 * gateway's certificate may call no operator or agent route.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent as HttpsAgent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import mysql from 'mysql2/promise';
import { Agent, fetch as undiciFetch } from 'undici';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { certificateInfo, initCa, issueNodeCertificate, loadCa } from '../../lib/pki';
import { parseMysqlUrl } from '../../lib/store/db';
import { parseNodeId } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent as NodeAgent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { certClient, closeCertClients, writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');

describe('mTLS at the control plane (real TLS, MariaDB, Temporal)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-cp-mtls-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let configFile = '';
  let agent: NodeAgent | undefined;
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    cp = await startControlPlane({
      config,
      workflowBundle: { codePath: await workflowBundlePath() },
      log: (msg, fields) => void logs.push({ msg, fields }),
    });
    await writeOperatorCert(config, cp.store);
    configFile = join(dir, 'server.yaml');
    writeFileSync(configFile, stringify(config));
  }, 120_000);

  afterAll(async () => {
    await agent?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const post = (f: typeof fetch, path: string, body: unknown): Promise<Response> =>
    f(`${cp.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const linesSince = (n: number, msg: string): Record<string, unknown>[] =>
    logs
      .slice(n)
      .filter((l) => l.msg === msg)
      .map((l) => l.fields);
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', configFile], (s) => void (out += s));
    return out;
  };

  test('a node registers with its certificate and the operator sees it; a node certificate may not read the node list', async () => {
    const n1 = await certClient(config, cp.store, 'n1');
    const r = await post(n1.fetch as typeof fetch, '/v1/agent/register', { nodeId: 'n1', inventory: simInventory() });
    expect(r.status).toBe(200);
    // Told Temporal's front door on the host it reached the control plane at, never Temporal's own address.
    expect(await r.json()).toMatchObject({
      nodeId: 'n1',
      temporal: { address: `127.0.0.1:${config.listeners.temporalDoor.port}`, namespace: 'default', mtls: true },
    });
    expect(await ctl('nodes')).toMatch(/^n1 +ready/m);
    expect((await n1.fetch(`${cp.url}/v1/nodes`)).status).toBe(403);
  });

  test('a gateway certificate (llmgw ca issue --gateway) is neither an operator nor a node: 403 on their routes, naming the role', async () => {
    const gw = await certClient(config, cp.store, 'gw-1', { role: 'gateway' });
    const list = await gw.fetch(`${cp.url}/v1/nodes`);
    expect(list.status).toBe(403);
    expect(JSON.stringify(await list.json())).toMatch(
      /a gateway certificate \(CN gw-1\) may not call .*it needs an operator certificate/,
    );
    const reg = await post(gw.fetch as typeof fetch, '/v1/agent/register', {
      nodeId: 'gw-1',
      inventory: simInventory(),
    });
    expect(reg.status).toBe(403);
    expect(JSON.stringify(await reg.json())).toMatch(/it needs a node certificate/);
  });

  test('a body claiming another node id is refused (403) with one line naming the CN, the claim and the reason', async () => {
    const n1 = await certClient(config, cp.store, 'n1');
    for (const [path, body] of [
      ['/v1/agent/register', { nodeId: 'n2', inventory: simInventory() }],
      ['/v1/agent/heartbeat', { nodeId: 'n2' }],
    ] as const) {
      const before = logs.length;
      const r = await post(n1.fetch as typeof fetch, path, body);
      expect(r.status).toBe(403);
      expect(await r.json()).toMatchObject({
        error: {
          code: 'LLMGW_CERT_REFUSED',
          message: expect.stringContaining('node id "n2" refused: the certificate is n1\'s'),
        },
      });
      expect(linesSince(before, 'node identity refused')).toEqual([
        { cn: 'n1', claimed: 'n2', reason: "the certificate is n1's; a node speaks only for itself", url: path },
      ]);
    }
    const before = logs.length;
    expect((await n1.fetch(`${cp.url}/v1/agent/shards?node=n2`)).status).toBe(403);
    expect(linesSince(before, 'node identity refused')).toHaveLength(1);
    expect(await cp.store.nodeState(parseNodeId('n2'))).toBeNull();
  });

  test.each(['no-certificate', 'unknown-ca', 'expired'] as const)(
    '%s: refused (401) with a log line saying which',
    async (why) => {
      const caPem = loadCa(join(config.tls.ca, '..')).certPem;
      let connect: { ca: string; cert?: string; key?: string } = { ca: caPem };
      if (why === 'unknown-ca') {
        const other = issueNodeCertificate(initCa(join(dir, 'other-ca'), { keyBits: 2048 }), 'n1');
        connect = { ca: caPem, cert: other.certPem, key: other.keyPem };
      } else if (why === 'expired') {
        const old = issueNodeCertificate(loadCa(join(config.tls.ca, '..')), 'n1', {
          days: 1,
          now: new Date(Date.now() - 3 * 86_400_000),
        });
        await cp.store.recordCertificate({
          serial: old.serial,
          cn: old.cn,
          role: 'node',
          notBefore: old.notBefore,
          notAfter: old.notAfter,
          pem: old.certPem,
        });
        connect = { ca: caPem, cert: old.certPem, key: old.keyPem };
      }
      const dispatcher = new Agent({ connect });
      const before = logs.length;
      const r = await undiciFetch(`${cp.url}/v1/agent/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ nodeId: 'n1', inventory: simInventory() }),
        dispatcher,
      });
      expect(r.status).toBe(401);
      expect(await r.json()).toMatchObject({
        error: { code: 'LLMGW_CERT_REFUSED', message: expect.stringContaining(`(${why})`) },
      });
      expect(linesSince(before, 'certificate refused')).toEqual([
        expect.objectContaining({ reason: why, url: '/v1/agent/register' }),
      ]);
      await dispatcher.close();
    },
  );

  test("ctl revoke closes the node's open keep-alive connection at once, and the node cannot register again", async () => {
    const n3 = await certClient(config, cp.store, 'n3');
    const keepAlive = new HttpsAgent({ keepAlive: true, maxSockets: 1 });
    const register = (): Promise<number> =>
      new Promise((done, fail) => {
        const u = new URL('/v1/agent/register', cp.url);
        const req = request(
          {
            host: u.hostname,
            port: u.port,
            path: u.pathname,
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            agent: keepAlive,
            ca: n3.cert.caPem,
            cert: n3.cert.certPem,
            key: n3.cert.keyPem,
          },
          (res) => {
            res.resume();
            res.on('end', () => done(res.statusCode ?? 0));
          },
        );
        req.on('error', fail);
        req.end(JSON.stringify({ nodeId: 'n3', inventory: simInventory() }));
      });
    expect(await register()).toBe(200);
    const socket = Object.values(keepAlive.freeSockets).flat()[0];
    expect(socket).toBeDefined();
    let closedAt = 0;
    socket?.once('close', () => void (closedAt = Date.now()));
    const before = logs.length;
    const t0 = Date.now();
    expect(await ctl('revoke', 'n3')).toBe(
      'n3: 1 certificate revoked; its connections are closed and it cannot register again until it is onboarded anew\n',
    );
    await waitFor(() => closedAt > 0, { timeoutMs: 2000, what: "the revoked node's open connection to be closed" });
    console.log(`revocation -> open connection closed in ${closedAt - t0} ms`);
    expect(linesSince(before, 'certificate refused')).toEqual([
      expect.objectContaining({
        reason: 'revoked',
        serial: n3.cert.serial,
        detail: 'revoked while connected: connection closed',
      }),
    ]);
    expect(await register()).toBe(403);
    expect(linesSince(before, 'certificate refused').at(-1)).toMatchObject({
      reason: 'revoked',
      cn: 'n3',
      url: '/v1/agent/register',
    });
    expect((await cp.store.listCertificates({ cn: 'n3' }))[0]?.revokedAt).toBeInstanceOf(Date);
    expect(await ctl('revoke', 'n3')).toBe('n3: no unrevoked certificate (already revoked, or never issued)\n');
    await expect(ctl('revoke', 'N_3')).rejects.toThrow(/N_3/);
    keepAlive.destroy();
  });

  test('a real agent registers and heartbeats with its certificate; revoked, its heartbeats are refused and it says so', async () => {
    const { cert } = await certClient(config, cp.store, 'a1');
    const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
    agent = await startAgent({
      nodeId: parseNodeId('a1'),
      server: cp.url,
      tls: cert,
      nvidiaSmi: 'nvidia-smi',
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'a1'),
      stopEnginesOnExit: true,
      log: (msg, fields) => void lines.push({ msg, fields }),
    });
    expect(await cp.store.nodeState(parseNodeId('a1'))).toBe('ready');
    // Heartbeats as the control plane heard them (MySQL's last_seen is written only a few times a minute).
    const seen = cp.beats.of('a1')?.beatAt ?? 0;
    await waitFor(() => (cp.beats.of('a1')?.beatAt ?? 0) > seen, { timeoutMs: 6000, what: 'a heartbeat from a1' });
    await ctl('revoke', 'a1');
    const refused = await waitFor(() => lines.find((l) => l.msg === "control plane refused this node's certificate"), {
      timeoutMs: 8000,
      what: 'the agent to log its refused heartbeat',
    });
    expect(refused.fields).toMatchObject({ status: 403, error: expect.stringContaining('(revoked)') });
  });

  test('renewal at two thirds of the lifetime: a CSR over the mTLS connection, a new serial for the same CN, no gap in heartbeats', async () => {
    // A 1-day certificate issued so that two thirds of its life (from its 5-minute backdated start) is 4 s away.
    const DAY = 86_400_000;
    const issuedAt = new Date(Date.now() + 4000 + 300_000 - (2 / 3) * (DAY + 300_000));
    const old = issueNodeCertificate(loadCa(join(config.tls.ca, '..')), 'r1', { days: 1, now: issuedAt });
    await cp.store.recordCertificate({
      serial: old.serial,
      cn: 'r1',
      role: 'node',
      notBefore: old.notBefore,
      notAfter: old.notAfter,
      pem: old.certPem,
    });
    const files = { cert: join(dir, 'r1.crt'), key: join(dir, 'r1.key') };
    writeFileSync(files.cert, old.certPem);
    writeFileSync(files.key, old.keyPem);
    const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
    const before = logs.length;
    const r1 = await startAgent({
      nodeId: parseNodeId('r1'),
      server: cp.url,
      tls: { certPem: old.certPem, keyPem: old.keyPem, caPem: readFileSync(config.tls.ca, 'utf8') },
      certFiles: files,
      nvidiaSmi: 'nvidia-smi',
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'r1'),
      stopEnginesOnExit: true,
      log: (msg, fields) => void lines.push({ msg, fields }),
    });
    const seen: number[] = [];
    // Heartbeats as the control plane heard them (MySQL's last_seen is written only a few times a minute).
    const sample = setInterval(() => {
      const t = cp.beats.of('r1')?.beatAt;
      if (t && t !== seen.at(-1)) seen.push(t);
    }, 100);
    try {
      const renewed = await waitFor(() => lines.find((l) => l.msg === 'certificate renewed'), {
        timeoutMs: 15_000,
        what: 'the agent to renew its certificate',
      });
      const serial = String(renewed.fields?.serial);
      expect(serial).toMatch(/^[0-9a-f]{32}$/);
      expect(serial).not.toBe(old.serial);
      expect(renewed.fields).toMatchObject({ previous: old.serial });
      expect(linesSince(before, 'certificate renewed')).toEqual([
        expect.objectContaining({ cn: 'r1', serial, previous: old.serial }),
      ]);
      // The new certificate and key are on disk (a restarted agent uses them) and belong together.
      const onDisk = certificateInfo(readFileSync(files.cert, 'utf8'));
      expect({ serial: onDisk.serial, cn: onDisk.cn }).toEqual({ serial, cn: 'r1' });
      expect(onDisk.notAfter.getTime()).toBeGreaterThan(Date.now() + 80 * DAY);
      expect(readFileSync(files.key, 'utf8')).not.toBe(old.keyPem);
      expect((await cp.store.listCertificates({ cn: 'r1' })).map((c) => c.serial).sort()).toEqual(
        [old.serial, serial].sort(),
      );
      // Its node worker moves to the new certificate too (a NativeConnection keeps the one it was made with).
      await waitFor(() => lines.some((l) => l.msg === 'node worker moved to the renewed certificate'), {
        timeoutMs: 15_000,
        what: 'the node worker to move to the new certificate',
      });
      // The old certificate revoked: the agent goes on heartbeating, so it no longer presents it.
      const { options, database } = parseMysqlUrl(config.mysql.url);
      const db = await mysql.createConnection({ ...options, database });
      await db.query('UPDATE certificates SET revoked_at = NOW(3), revoked_reason = ? WHERE serial = ?', [
        'test: superseded',
        old.serial,
      ]);
      await db.end();
      const count = seen.length;
      await waitFor(() => seen.length >= count + 3, {
        timeoutMs: 10_000,
        what: 'three heartbeats after the old certificate was revoked',
      });
      // Nor does its node worker: Temporal's door refuses nothing of r1's.
      expect(linesSince(before, 'temporal call refused').filter((f) => f.cn === 'r1')).toEqual([]);
    } finally {
      clearInterval(sample);
      await r1.close();
    }
    const gaps = seen.slice(1).map((t, i) => t - (seen[i] as number));
    console.log(`renewal: heartbeat gaps ${gaps.join(', ')} ms`);
    expect(Math.max(...gaps)).toBeLessThan(3500); // heartbeats every 2 s: none missed
    expect(lines.filter((l) => /refused|FAILED|heartbeat failed/.test(l.msg))).toEqual([]);
  });
});

/**
 * Bad input at the real control plane (`llmgw control-plane`, its own process, over mutual TLS, with real Temporal
 * and MariaDB) and the real `llmgw` CLI: a long revocation reason still revokes; `ctl scale` takes plain digits
 * only and shows the update validator's words; node ids are checked one way on every route; a registration's
 * inventory is bounded and unknown fields refused; drain and revoke of an unknown node refuse before anything
 * starts; every refusal is OpenAI's shape; the mTLS gate judges the routed path; global options go before the verb
 * and bad flags are named; start-up errors name temporal.address and the default database; and a SIGINT stops the
 * control plane and its door within the grace, stalled TLS handshakes notwithstanding.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { stringify } from 'yaml';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { parseNodeId, type ModelSpec } from '../../lib/types';
import { LLMGW, llmgw } from '../helpers/cli';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { stalledConnections } from '../helpers/raw-http';
import { certClient, closeCertClients, writeOperatorCert, type TestClient } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const SOLO: ModelSpec = {
  name: 'solo',
  source: 'sim://solo',
  replicas: 0,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
};

describe('bad input at the real control plane and CLI', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-cp-input-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let store: Store;
  let cp: ChildProcess;
  let cpLog = '';
  let url = '';
  let file = '';
  let operator: TestClient;

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [SOLO] });
    url = `https://127.0.0.1:${config.listeners.controlPlane.port}`;
    store = new Store(await openDatabase(config.mysql.url));
    await writeOperatorCert(config, store);
    operator = await certClient(config, store, 'operator', { role: 'operator' });
    file = join(dir, 'server.yaml');
    writeFileSync(file, stringify(config));
    cp = spawn(process.execPath, [LLMGW, 'control-plane', '--config', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    cp.stderr?.on('data', (b: Buffer) => void (cpLog = (cpLog + b.toString()).slice(-50_000)));
    await waitFor(
      async () => {
        if (cp.exitCode !== null) throw new Error(`the control plane exited: ${cpLog}`);
        return (await operator.fetch(`${url}/health`)).ok;
      },
      { timeoutMs: 120_000, what: 'the control plane to answer' },
    );
    for (const id of ['sim-a', 'rv-1']) expect((await register(id, simInventory())).status).toBe(200);
  }, 180_000);

  afterAll(async () => {
    cp?.kill('SIGKILL');
    await closeCertClients();
    await store?.pool.end();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const json = { 'content-type': 'application/json' };
  async function register(nodeId: string, inventory: unknown): Promise<Response> {
    const node = await certClient(config, store, nodeId);
    return node.fetch(`${url}/v1/agent/register`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ nodeId, inventory }),
    });
  }
  const errorOf = async (
    r: Response,
  ): Promise<{ status: number; error: { message: string; type: string; code: string } }> => ({
    status: r.status,
    error: ((await r.json()) as { error: { message: string; type: string; code: string } }).error,
  });
  const ctl = (...args: string[]): ReturnType<typeof llmgw> => llmgw(['ctl', ...args, '--config', file]);

  test('3: a revocation with a 300-character reason revokes, records the reason cut to 255 characters, and says so', async () => {
    const r = await ctl('revoke', 'rv-1', '--reason', `${'compromised: '.repeat(23)}end`);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toBe(
      'rv-1: 1 certificate revoked; its connections are closed and it cannot register again until it is onboarded anew\n' +
        '  the reason was recorded cut to its first 255 characters (all the certificates table holds)\n',
    );
    const [cert] = await store.listCertificates({ cn: 'rv-1' });
    expect(cert?.revokedAt).toBeInstanceOf(Date);
    expect(Array.from(cert?.revokedReason ?? '')).toHaveLength(255);
    expect(cert?.revokedReason?.endsWith('…')).toBe(true);
    const node = await certClient(config, store, 'rv-1');
    expect(
      (
        await node.fetch(`${url}/v1/agent/heartbeat`, {
          method: 'POST',
          headers: json,
          body: JSON.stringify({ nodeId: 'rv-1' }),
        })
      ).status,
    ).toBe(403);
  });

  test("4: ctl scale takes plain digits only, and a count the workflow refuses gets the validator's own words", async () => {
    for (const n of ['', '1e9', '0x10', '2.5', ' 3']) {
      const r = await ctl('scale', 'solo', n);
      expect({ n, code: r.code, stderr: r.stderr }).toEqual({
        n,
        code: 2,
        stderr: `llmgw: N must be a whole number written in digits (e.g. 3), got ${JSON.stringify(n)}\n`,
      });
    }
    const r = await ctl('scale', 'solo', '65');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      'llmgw: model/solo refused the scale: replicas must be a whole number from 0 to 64, got 65\n',
    );
    expect((await store.getModel('solo'))?.replicas).toBe(0);
  }, 120_000);

  test('5: every route checks node ids the same way: SIM-A and "sim-a " are refused, not matched to sim-a; events carry the canonical id', async () => {
    for (const path of [
      '/v1/nodes/SIM-A/cordon',
      '/v1/nodes/sim-a%20/cordon',
      '/v1/nodes/SIM-A/uncordon',
      '/v1/nodes/SIM-A/drain/cancel',
      '/v1/nodes/SIM-A/revoke',
    ]) {
      const e = await errorOf(await operator.fetch(`${url}${path}`, { method: 'POST' }));
      expect({ path, status: e.status, code: e.error.code }).toEqual({ path, status: 400, code: 'LLMGW_BAD_NODE_ID' });
    }
    expect((await errorOf(await operator.fetch(`${url}/v1/nodes/SIM-A`))).error.code).toBe('LLMGW_BAD_NODE_ID');
    // (sim-a sends no heartbeats here, so node liveness may have marked it down meanwhile: cordoned is what counts.)
    expect(await store.isCordoned('sim-a')).toBe(false);
    const ok = await operator.fetch(`${url}/v1/nodes/sim-a/cordon`, { method: 'POST' });
    expect(await ok.json()).toMatchObject({ nodeId: 'sim-a', changed: true });
    expect(await store.isCordoned('sim-a')).toBe(true);
    const events = (await store.recentEvents(50)).filter((e) => e.kind === 'node.cordoned');
    expect(events.map((e) => e.nodeId)).toEqual(['sim-a']);
    expect((await ctl('uncordon', 'SIM-A')).stderr).toMatch(
      /^llmgw: invalid node id "SIM-A": use 2-32 characters of a-z/,
    );
  }, 60_000);

  test("7: a registration's inventory refuses unknown fields and oversized ones, and the node list stays small", async () => {
    const cases: [string, Record<string, unknown>, string][] = [
      [
        'a 900 KB extra field',
        { ...simInventory(), extra: 'x'.repeat(900_000) },
        'body.inventory: unknown field "extra"',
      ],
      [
        'an extra field in a GPU',
        { ...simInventory(), gpus: [{ ...simInventory().gpus[0], serial: 'x' }] },
        'body.inventory.gpus.0: unknown field "serial"',
      ],
      ['100 GPUs', simInventory({ gpus: 100 }), 'body.inventory.gpus: must NOT have more than 64 items'],
      [
        'a 5,000-character doctor summary',
        { ...simInventory(), doctor: [{ id: 'x', status: 'pass', summary: 's'.repeat(5000), fix: '' }] },
        'body.inventory.doctor.0.summary: must NOT have more than 4096 characters',
      ],
      [
        'an engine llmgw does not know',
        { ...simInventory(), engines: ['sim', 'mystery'] },
        'body.inventory.engines.1: must be equal to one of the allowed values ("sim", "llamacpp", "vllm", "sglang")',
      ],
    ];
    for (const [what, inventory, message] of cases) {
      expect({ what, ...(await errorOf(await register('sim-b', inventory))) }).toEqual({
        what,
        status: 400,
        error: { code: 'LLMGW_BAD_REQUEST', type: 'invalid_request_error', message },
      });
    }
    expect(await store.nodeState(parseNodeId('sim-b'))).toBeNull();
    const r = await ctl('nodes', '--json');
    expect(r.code).toBe(0);
    expect(r.stdout.length).toBeLessThan(20_000);
  }, 60_000);

  test('8: ctl drain and ctl revoke of an unknown node refuse before anything starts', async () => {
    const drain = await ctl('drain', 'nosuch', '--no-wait');
    expect(drain).toMatchObject({ code: 2, stderr: 'llmgw: node nosuch is not registered: see llmgw ctl nodes\n' });
    const connection = await Connection.connect({ address: temporal.address });
    try {
      await expect(new Client({ connection }).workflow.getHandle('drain/nosuch').describe()).rejects.toBeInstanceOf(
        WorkflowNotFoundError,
      );
    } finally {
      await connection.close();
    }
    const revoke = await ctl('revoke', 'nosuch');
    expect(revoke).toMatchObject({
      code: 2,
      stderr: 'llmgw: no node nosuch is registered and no certificate was issued to it: see llmgw ctl nodes\n',
    });
  }, 60_000);

  test("9: every route answers OpenAI's error shape: malformed JSON, unknown routes, a duplicated querystring, another content type", async () => {
    const node = await certClient(config, store, 'sim-a');
    const bad = { method: 'POST', headers: json, body: 'Bad' } as const;
    for (const [client, path] of [
      [node, '/v1/agent/register'],
      [node, '/v1/agent/renew'],
      [node, '/v1/agent/weights'],
      [node, '/v1/agent/heartbeat'],
      [operator, '/v1/nodes/sim-a/revoke'],
    ] as const) {
      const e = await errorOf(await client.fetch(`${url}${path}`, bad));
      expect({ path, status: e.status, code: e.error.code, type: e.error.type }).toEqual({
        path,
        status: 400,
        code: 'LLMGW_BAD_REQUEST',
        type: 'invalid_request_error',
      });
      expect(e.error.message).toBe('the request body is not valid JSON');
    }
    expect(await errorOf(await operator.fetch(`${url}/v1/nope`))).toMatchObject({
      status: 404,
      error: { code: 'LLMGW_NOT_FOUND', message: expect.stringContaining('no route GET "/v1/nope"') },
    });
    const dup = await errorOf(await operator.fetch(`${url}/v1/replicas?model=a&model=b`));
    expect(dup).toEqual({
      status: 400,
      error: { code: 'LLMGW_BAD_REQUEST', type: 'invalid_request_error', message: 'querystring.model: must be string' },
    });
    expect(cpLog).not.toMatch(/ER_PARSE_ERROR/);
    expect(
      (
        await errorOf(
          await node.fetch(`${url}/v1/agent/heartbeat`, {
            method: 'POST',
            headers: { 'content-type': 'text/plain' },
            body: 'x',
          }),
        )
      ).error.code,
    ).toBe('LLMGW_UNSUPPORTED_MEDIA_TYPE');
  });

  test('14: the mTLS gate judges the routed path, not the raw URL', async () => {
    const node = await certClient(config, store, 'sim-a');
    const asOperator = await errorOf(
      await operator.fetch(`${url}/v1/%61gent/register`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ nodeId: 'operator', inventory: simInventory() }),
      }),
    );
    expect(asOperator).toMatchObject({
      status: 403,
      error: {
        code: 'LLMGW_CERT_REFUSED',
        message: 'an operator certificate (CN operator) may not call /v1/agent/register: it needs a node certificate',
      },
    });
    const asNode = await errorOf(await node.fetch(`${url}/v1/%6eodes`));
    expect(asNode).toMatchObject({
      status: 403,
      error: {
        code: 'LLMGW_CERT_REFUSED',
        message: 'a node certificate (CN sim-a) may not call /v1/nodes: it needs an operator certificate',
      },
    });
    expect(
      (
        await node.fetch(`${url}/v1/%61gent/heartbeat`, {
          method: 'POST',
          headers: json,
          body: JSON.stringify({ nodeId: 'sim-a' }),
        })
      ).status,
    ).toBe(200);
  });

  test('16: common options before the verb; --server, --model and --operator named when wrong', async () => {
    const before = await llmgw(['ctl', '--config', file, 'nodes']);
    expect(before.code).toBe(0);
    expect(before.stdout).toMatch(/^sim-a +(cordoned|ready|down) /m);
    expect(await llmgw(['ctl', '--json', '--config', file, 'models'])).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('"solo"'),
    });
    expect(await ctl('nodes', '--server', 'not-a-url')).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(
        /^llmgw: --server "not-a-url" is not the control plane's URL: give https:\/\/HOST:PORT/,
      ),
    });
    expect(await ctl('replicas', '--model', 'nosuch')).toMatchObject({
      code: 2,
      stderr:
        'llmgw: model "nosuch" is not in the catalog (known: solo): add it to server.yaml\'s catalog and restart the control plane\n',
    });
    const ca = await llmgw(['ca', 'issue', '--operator', '../x', '--dir', join(dir, 'no-ca')]);
    expect(ca.code).toBe(2);
    expect(ca.stderr).toMatch(/^llmgw: invalid operator name "\.\.\/x": use 2-32 characters/);
  }, 120_000);

  test('15: start-up errors name the key: an unreachable temporal.address, and no mysql section (said before anything is written)', async () => {
    const bad = join(dir, 'no-temporal.yaml');
    const { mysql: _mysql, ...rest } = config;
    writeFileSync(
      bad,
      stringify({
        ...rest,
        temporal: { ...config.temporal, address: `127.0.0.1:${await freePort()}` },
        listeners: {
          ...config.listeners,
          controlPlane: { host: '127.0.0.1', port: await freePort() },
          temporalDoor: { host: '127.0.0.1', port: await freePort() },
        },
      }),
    );
    const r = await llmgw(['control-plane', '--config', bad], 90_000);
    expect(r.code).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({
      c: 'control-plane',
      msg: 'no mysql section in the configuration: using the built-in default database',
      config: bad,
      url: 'mysql://root@127.0.0.1:3306/llmgw',
    });
    // A role's failure to start is one error line of its JSON log (runRole), naming the code and the key.
    const last = JSON.parse(lines.at(-1) ?? '{}') as Record<string, unknown>;
    expect(last).toMatchObject({
      level: 'error',
      c: 'control-plane',
      msg: 'control-plane could not start',
      code: 'LLMGW_TEMPORAL_UNREACHABLE',
    });
    expect(String(last.error)).toMatch(
      /^cannot reach Temporal at 127\.0\.0\.1:\d+ \(.*\): temporal\.address in server\.yaml must name a running Temporal frontend/,
    );
  }, 120_000);

  test('18: SIGINT stops the control plane and its door within the grace, with stalled TLS handshakes open on both', async () => {
    const cpPort = config.listeners.controlPlane.port;
    const doorPort = config.listeners.temporalDoor.port;
    // A handshake that never starts is cut by the server (TLS_HANDSHAKE_MS, 10 s), not held for Node's 2 minutes.
    const [probe] = await stalledConnections(cpPort, 1);
    const cut = new Promise<number>((r) => probe?.once('close', () => r(Date.now())));
    const t0 = Date.now();
    expect(
      await Promise.race([cut, new Promise<string>((r) => setTimeout(() => r('still open after 40 s'), 40_000))]),
    ).toEqual(expect.any(Number));
    console.log(`a stalled TLS handshake was cut after ${Date.now() - t0} ms`);
    const stalled = [
      ...(await stalledConnections(cpPort, 20)),
      ...(await stalledConnections(doorPort, 20)),
      ...(await stalledConnections(cpPort, 5, '\x16\x03\x01\x02\x00\x01')),
    ];
    const exited = new Promise<number | null>((r) => cp.once('exit', (code) => r(code)));
    const t1 = Date.now();
    cp.kill('SIGINT');
    const code = await Promise.race([
      exited,
      new Promise<string>((r) => setTimeout(() => r('still running after 25 s'), 25_000)),
    ]);
    console.log(`control plane stopped ${Date.now() - t1} ms after SIGINT`);
    expect(code).toBe(0);
    for (const s of stalled) s.destroy();
  }, 90_000);
});

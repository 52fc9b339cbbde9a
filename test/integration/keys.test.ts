/**
 * Inference keys end to end, on a real MariaDB and real sockets: `ctl keys` through the control API, two gateways
 * in this process (each with its own MySQL pool) in front of sim engines: create → use → scope → revoke within a
 * second on both; bad keys. Quotas are then loaded on two `llmgw gateway` processes (routing from MySQL, as in
 * production), which share nothing but MySQL.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Pool } from 'mysql2/promise';
import { KeyTable } from '../../gateway/inference/keys';
import { QuotaKeeper } from '../../gateway/inference/quota';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { controlRoutes } from '../../gateway/control/routes';
import { createKey, keySpec, keysUsage, listKeys, revokeKey } from '../../cli/ctl/keys';
import type { ControlApi } from '../../cli/control-api';
import { openDatabase } from '../../lib/store/db';
import { KeyStore } from '../../lib/store/keys';
import { Store, type RouteRows } from '../../lib/store/store';
import { startSimEngine, type SimEngine } from '../../lib/sim/server';
import { dropDatabase, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { waitFor } from '../helpers/wait';

jest.setTimeout(180_000);

const url = testMysqlUrl();
const profiles = [{ name: 'default', engine: 'sim' as const, nodes: 1, gpusPerNode: 1, args: [] }];
const pools: Pool[] = [];
let store: Store;
let control: FastifyInstance;
let api: ControlApi;
const engines: SimEngine[] = [];
const gateways: RunningGateway[] = [];
let rows: RouteRows;
const routings: RoutingTable[] = [];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A gateway as the role builds it, with its own pool; its routing table reads the shared `rows`. */
async function startKeyedGateway(): Promise<string> {
  const pool = await openDatabase(url);
  pools.push(pool);
  const ks = new KeyStore(pool);
  const routing = new RoutingTable(async () => rows, { refreshMs: 100 });
  routings.push(routing);
  const gw = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing,
    apiKeys: [],
    keys: new KeyTable((since) => ks.changedSince(since)),
    quota: new QuotaKeeper(ks, { flushMs: 300 }),
  });
  gateways.push(gw);
  return gw.url;
}

const chat = (model: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hello there' }], ...extra });
const send = (gw: string, key: string | null, body: string, headers: Record<string, string> = {}): Promise<Response> =>
  fetch(`${gw}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body,
  });

/** Creates a key through ctl's own function; the key is the last line of what it printed. */
async function create(name: string, o: { models?: string; rpm?: string; tpm?: string } = {}): Promise<string> {
  const printed: string[] = [];
  const key = await createKey(api, keySpec(name, o), (s) => void printed.push(s));
  const lines = printed.join('').trimEnd().split('\n');
  expect(lines.at(-1)).toBe(key);
  expect(key).toMatch(/^llmgw-[A-Za-z0-9_-]{43}$/);
  return key;
}

/** Polls every 20 ms until `ok` holds on every gateway; returns how long it took, or fails naming what never happened. */
async function untilAll(
  what: string,
  ok: (gw: string) => Promise<boolean>,
  withinMs: number,
  urls = gateways.map((g) => g.url),
): Promise<number> {
  const started = Date.now();
  const pending = new Set(urls);
  while (pending.size) {
    for (const gw of [...pending]) if (await ok(gw)) pending.delete(gw);
    if (!pending.size) break;
    if (Date.now() - started > withinMs)
      throw new Error(`${what}: not on ${[...pending].join(', ')} after ${withinMs} ms`);
    await sleep(20);
  }
  return Date.now() - started;
}

beforeAll(async () => {
  const pool = await openDatabase(url);
  pools.push(pool);
  store = new Store(pool);
  for (const name of ['sim-small', 'sim-large'])
    await store.upsertModel({ name, source: `sim://${name}`, replicas: 1, profiles });
  for (const model of ['sim-small', 'sim-large'])
    engines.push(
      await startSimEngine({
        model,
        host: '127.0.0.1',
        port: 0,
        rank: 0,
        world: 1,
        distHost: '127.0.0.1',
        distPort: 0,
        tokensPerSecond: 0,
      }),
    );
  const ready = (id: string, model: string, port: number): RouteRows['replicas'][number] => ({
    id,
    model,
    state: 'ready',
    endpoint: `http://127.0.0.1:${port}`,
    reason: null,
  });
  rows = {
    models: ['sim-small', 'sim-large'],
    replicas: [ready('small-0', 'sim-small', engines[0]!.port), ready('large-0', 'sim-large', engines[1]!.port)],
  };
  // The control API's routes without the mTLS gate (tested in control-mtls.test.ts): ctl's functions over plain HTTP.
  control = Fastify();
  await control.register(controlRoutes, {
    store,
    temporal: { address: '127.0.0.1:1', namespace: 'default' },
    heartbeatMs: 1000,
  });
  api = { server: await control.listen({ host: '127.0.0.1', port: 0 }), fetch: (u, i) => fetch(u, i) };
  await startKeyedGateway();
  await startKeyedGateway();
});

/** Two `llmgw gateway` processes on this test's MySQL, no static keys; routing from the replicas in the store. */
const procs: ChildProcess[] = [];
const procUrls: string[] = [];
const dir = mkdtempSync(join(tmpdir(), 'llmgw-keys-'));
async function startGatewayProcesses(): Promise<string[]> {
  if (procUrls.length) return procUrls;
  await store.setReplica({
    id: 'sim-small-0',
    model: 'sim-small',
    profile: 'default',
    state: 'ready',
    endpoint: `http://127.0.0.1:${engines[0]!.port}`,
  });
  for (let i = 0; i < 2; i++) {
    const base = await testConfig({ temporalAddress: '127.0.0.1:1', mysqlUrl: url, catalog: [] });
    const file = join(dir, `server-${i}.yaml`);
    writeFileSync(file, stringify({ ...base, gateway: { ...base.gateway, apiKeys: [] } }));
    let log = '';
    const p = spawn(process.execPath, [resolve(__dirname, '../../bin/llmgw.js'), 'gateway', '--config', file], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    p.stderr?.on('data', (b: Buffer) => void (log = (log + b.toString()).slice(-5000)));
    procs.push(p);
    const gw = `http://127.0.0.1:${base.listeners.gateway.port}`;
    await waitFor(
      async () => {
        if (p.exitCode !== null) throw new Error(`gateway process ${i} exited: ${log}`);
        const r = await fetch(`${gw}/health`).catch(() => null);
        return r?.ok ?? false;
      },
      { timeoutMs: 60_000, what: `gateway process ${i} to listen` },
    );
    procUrls.push(gw);
  }
  return procUrls;
}

afterAll(async () => {
  for (const p of procs) p.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
  await Promise.all(gateways.map((g) => g.close()));
  await control?.close();
  await Promise.all(engines.map((e) => e.close()));
  await Promise.all(pools.map((p) => p.end()));
  await dropDatabase(url);
});

test('with no key at all, the gateway refuses every request and says how to make one', async () => {
  const r = await send(gateways[0]!.url, null, chat('sim-small'));
  expect(r.status).toBe(401);
  const { error } = (await r.json()) as { error: { code: string; message: string } };
  expect(error.code).toBe('invalid_api_key');
  expect(error.message).toMatch(/no API key at all yet: create one with llmgw ctl keys create NAME/);
  expect((await fetch(`${gateways[0]!.url}/health`)).status).toBe(200);
});

test('create → use on both gateways within 1 s → scope 403 → revoke, refused on both within 1 s', async () => {
  const key = await create('team-a', { models: 'sim-small' });
  const seenMs = await untilAll(
    'the new key accepted',
    async (gw) => (await send(gw, key, chat('sim-small'))).status === 200,
    1000,
  );
  console.log(`a new key was accepted by both gateways ${seenMs} ms after ctl keys create returned`);

  const denied = await send(gateways[1]!.url, key, chat('sim-large'));
  expect(denied.status).toBe(403);
  expect(await denied.json()).toEqual({
    error: {
      type: 'invalid_request_error',
      code: 'model_not_allowed',
      message: 'key team-a may not use model "sim-large"; it may use: sim-small',
    },
  });
  const models = (await (
    await fetch(`${gateways[0]!.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
  ).json()) as {
    data: { id: string }[];
  };
  expect(models.data.map((m) => m.id)).toEqual(['sim-small']);

  const out: string[] = [];
  expect(await revokeKey(api, 'team-a', (s) => void out.push(s))).toBe(true);
  const goneMs = await untilAll(
    'the revoked key refused',
    async (gw) => (await send(gw, key, chat('sim-small'))).status === 401,
    1000,
  );
  console.log(`a revoked key was refused by both gateways ${goneMs} ms after ctl keys revoke returned`);
  const r = await send(gateways[0]!.url, key, chat('sim-small'));
  expect(((await r.json()) as { error: { message: string; code: string } }).error).toMatchObject({
    code: 'invalid_api_key',
    message: 'invalid API key: key team-a was revoked',
  });
  const listed = await listKeys(api, false, () => undefined);
  expect(listed.find((k) => k.name === 'team-a')?.revokedAt).not.toBeNull();
  await expect(revokeKey(api, 'team-a', () => undefined)).resolves.toBe(false);
  await expect(revokeKey(api, 'nobody', () => undefined)).rejects.toThrow(/no key is named nobody/);
  await expect(create('team-a')).rejects.toThrow(/a key named team-a exists already/);
  await expect(create('team-x', { models: 'sim-huge' })).rejects.toThrow(/no model named sim-huge is deployed/);
});

test('bad Authorization headers and keys each get a 401 that says what is wrong, and never echo the key', async () => {
  await create('team-b');
  const gw = gateways[0]!.url;
  const cases: [Record<string, string>, RegExp][] = [
    [{}, /^missing API key: send "Authorization: Bearer <key>"$/],
    [
      { authorization: 'Basic dXNlcjpwYXNz' },
      /malformed Authorization header: expected "Bearer <key>", got scheme "Basic"/,
    ],
    [{ authorization: 'Bearer' }, /"Bearer" without a key/],
    [{ authorization: 'Bearer sk-abc123' }, /llmgw keys start with "llmgw-"/],
    [{ authorization: 'Bearer llmgw-short' }, /llmgw keys are 49 characters long, this one has 11/],
    [{ authorization: `Bearer llmgw-${'A'.repeat(42)}!` }, /contains characters no llmgw key has/],
    [{ authorization: `Bearer llmgw-${'A'.repeat(43)}` }, /invalid API key: no such key/],
  ];
  for (const [headers, message] of cases) {
    const r = await send(gw, null, chat('sim-small'), headers);
    expect(r.status).toBe(401);
    const { error } = (await r.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('invalid_api_key');
    expect(error.message).toMatch(message);
    expect(error.message).not.toMatch(/dXNlcjpwYXNz|abc123/);
  }
});

test('a key whose model left the catalog is told the model no longer exists', async () => {
  const key = await create('team-c', { models: 'sim-large' });
  await untilAll('the key accepted', async (gw) => (await send(gw, key, chat('sim-large'))).status === 200, 1000);
  const saved = rows;
  rows = { models: ['sim-small'], replicas: saved.replicas.filter((r) => r.model === 'sim-small') };
  try {
    await Promise.all(routings.map((r) => r.refresh()));
    const r = await send(gateways[0]!.url, key, chat('sim-large'));
    expect(r.status).toBe(404);
    expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(
      /model "sim-large" no longer exists .*key team-c may use sim-large; available models: none of them/,
    );
  } finally {
    rows = saved;
    await Promise.all(routings.map((r) => r.refresh()));
  }
});

/** Waits, if needed, until the current minute has at least `ms` left, so a load fits in one quota minute. */
async function minuteWithRoom(ms: number): Promise<number> {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < ms) await sleep(left + 50);
  return Math.floor(Date.now() / 60_000);
}

test('tokens per minute hold across two gateway processes under concurrent load (≤ 1 % over), 429 with Retry-After', async () => {
  const TPM = 20_000;
  const urls = await startGatewayProcesses();
  const key = await create('load-t', { tpm: String(TPM) });
  await untilAll(
    'the key accepted',
    async (gw) => (await send(gw, key, chat('sim-small', { max_tokens: 1 }))).status === 200,
    1000,
    urls,
  );
  const minute = await minuteWithRoom(40_000);
  let tokens = 0;
  let ok = 0;
  let refused = 0;
  let retryAfter = '';
  const client = async (gw: string, n: number): Promise<void> => {
    for (let i = 0; ; i++) {
      const stream = i % 3 === 0;
      const body = chat('sim-small', {
        max_tokens: 10 + ((i * 7 + n) % 30),
        messages: [{ role: 'user', content: `tell me about the river number ${i} and ${n}` }],
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      });
      const r = await send(gw, key, body);
      const text = await r.text();
      if (r.status === 429) {
        refused++;
        retryAfter = r.headers.get('retry-after') ?? '';
        expect(JSON.parse(text)).toMatchObject({ error: { code: 'rate_limit_exceeded', type: 'tokens' } });
        return;
      }
      expect(r.status).toBe(200);
      ok++;
      const usage = stream
        ? (
            JSON.parse(
              text
                .split('\n\n')
                .filter((e) => e.includes('"usage":{'))
                .at(-1)!
                .slice(6),
            ) as { usage: { total_tokens: number } }
          ).usage
        : (JSON.parse(text) as { usage: { total_tokens: number } }).usage;
      tokens += usage.total_tokens;
    }
  };
  const started = Date.now();
  await Promise.all(urls.flatMap((g) => Array.from({ length: 6 }, (_, n) => client(g, n))));
  expect(Math.floor(Date.now() / 60_000)).toBe(minute); // the whole load ran in one quota minute
  // The last answers of other clients may have been in flight at the first 429: count the window in MySQL too.
  const leased = await new KeyStore(pools[0]!).window(await new KeyStore(pools[0]!).idOf('load-t'), minute);
  const overshoot = (tokens - TPM) / TPM;
  console.log(
    `tpm ${TPM} across 2 gateway processes, 12 clients, ${Date.now() - started} ms: ${ok} answers used ${tokens} tokens ` +
      `(${((tokens / TPM) * 100).toFixed(2)} % of the limit, overshoot ${(Math.max(0, overshoot) * 100).toFixed(2)} %); ` +
      `leased in MySQL ${leased.tokens}; ${refused} refused`,
  );
  expect(tokens).toBeLessThanOrEqual(TPM * 1.01);
  expect(tokens).toBeGreaterThan(TPM * 0.9); // and the budget was not wasted in leases left unused
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(Number(retryAfter)).toBeLessThanOrEqual(60);
});

test('requests per minute hold across two gateway processes, and a key flooding does not stop another key', async () => {
  const RPM = 40;
  const urls = await startGatewayProcesses();
  const flood = await create('flood', { rpm: String(RPM) });
  const calm = await create('calm', { rpm: '1000' });
  await untilAll(
    'the keys accepted',
    async (gw) => (await send(gw, calm, chat('sim-small'))).status === 200,
    1000,
    urls,
  );
  await minuteWithRoom(20_000);
  const results = await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      send(urls[i % 2]!, flood, chat('sim-small')).then(async (r) => {
        if (r.status !== 200 && r.status !== 429) console.log(r.status, await r.text());
        return r.status;
      }),
    ),
  );
  const passed = results.filter((s) => s === 200).length;
  console.log(
    `rpm ${RPM} across 2 gateway processes, 100 concurrent requests: ${passed} passed, ${results.filter((s) => s === 429).length} got 429`,
  );
  expect(passed).toBeLessThanOrEqual(RPM);
  expect(passed).toBeGreaterThanOrEqual(RPM * 0.9);
  expect(results.every((s) => s === 200 || s === 429)).toBe(true);
  const again = await send(urls[0]!, flood, chat('sim-small'));
  expect(again.status).toBe(429);
  expect(((await again.json()) as { error: { type: string } }).error.type).toBe('requests');
  for (const g of urls) expect((await send(g, calm, chat('sim-small'))).status).toBe(200);
  // Revoked while in use: both processes refuse it within a second.
  await revokeKey(api, 'calm', () => undefined);
  const goneMs = await untilAll(
    'the revoked key refused by the gateway processes',
    async (gw) => (await send(gw, calm, chat('sim-small'))).status === 401,
    1000,
    urls,
  );
  console.log(`a revoked key was refused by both gateway processes ${goneMs} ms after ctl keys revoke returned`);

  // Usage, flushed in batches by each gateway: every request and refusal of the minute, per model.
  let rowsSeen = '';
  const deadline = Date.now() + 5000;
  for (;;) {
    const usage = await keysUsage(api, { name: 'flood', hours: 1, json: true }, () => undefined);
    const row = usage.find((u) => u.model === 'sim-small');
    rowsSeen = JSON.stringify(usage);
    if (row && row.requests === passed && row.refused === 100 - passed + 1) {
      expect(row.completionTokens).toBe(passed * 4);
      break;
    }
    if (Date.now() > deadline)
      throw new Error(`ctl keys usage flood never showed ${passed} requests and ${101 - passed} refused: ${rowsSeen}`);
    await sleep(100);
  }
});

test('prompts the byte estimate undercounts: the key learns its scale from usage, ≤ 1 % over', async () => {
  const TPM = 20_000;
  const CLIENTS = 12;
  const urls = await startGatewayProcesses();
  const key = await create('load-under', { tpm: String(TPM) });
  await untilAll('the key accepted', async (gw) => (await send(gw, key, chat('sim-small'))).status === 200, 1000, urls);
  // One-letter words: the sim engine counts ~1 token per 2 bytes, the estimate 1 per 4 — each answer runs past it.
  const content = 'a '.repeat(150).trim();
  const body = chat('sim-small', { max_tokens: 10, messages: [{ role: 'user', content }] });
  const minute = await minuteWithRoom(30_000);
  let tokens = 0;
  let worstUnder = 0;
  const estimate = Math.ceil(Buffer.byteLength(body) / 4) + 10;
  const client = async (gw: string): Promise<void> => {
    for (;;) {
      const r = await send(gw, key, body);
      const text = await r.text();
      if (r.status === 429) return;
      expect(r.status).toBe(200);
      const used = (JSON.parse(text) as { usage: { total_tokens: number } }).usage.total_tokens;
      worstUnder = Math.max(worstUnder, used - estimate);
      tokens += used;
    }
  };
  await Promise.all(urls.flatMap((g) => Array.from({ length: CLIENTS / 2 }, () => client(g))));
  expect(Math.floor(Date.now() / 60_000)).toBe(minute);
  const over = Math.max(0, tokens - TPM);
  console.log(
    `tpm ${TPM}, estimates ${worstUnder} tokens short per request, ${CLIENTS} clients on 2 gateway processes: ` +
      `${tokens} tokens used (${((tokens / TPM) * 100).toFixed(2)} %), overshoot ${((over / TPM) * 100).toFixed(2)} % ` +
      `(without the learned scale, up to ${CLIENTS} in flight × ${worstUnder} = ${((CLIENTS * worstUnder * 100) / TPM).toFixed(2)} %)`,
  );
  expect(worstUnder).toBeGreaterThan(0);
  expect(over).toBeLessThanOrEqual(TPM * 0.01);
});

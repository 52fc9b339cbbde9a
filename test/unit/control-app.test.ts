/** The control plane's registration schema: fabric identity and doctor results are accepted, kept and listed; malformed ones are refused. */
import Fastify, { type FastifyInstance } from 'fastify';
import { controlRoutes } from '../../gateway/control/routes';
import { LlmgwError } from '../../lib/errors';
import type { Store } from '../../lib/store/store';
import type { NodeInventory, NodeRecord } from '../../lib/types';

/** The part of the store registration and the node list use, in memory (the real one keeps inventory as JSON). */
function memoryStore(): Store {
  const nodes = new Map<string, NodeRecord>();
  const fake = {
    nodeState: async (id: string) => nodes.get(id)?.state ?? null,
    upsertNode: async (id: string, inventory: NodeInventory) =>
      void nodes.set(id, {
        id,
        state: 'ready',
        inventory: JSON.parse(JSON.stringify(inventory)) as NodeInventory,
        lastSeen: new Date(),
        registeredAt: new Date(),
      } as NodeRecord),
    event: async () => undefined,
    listNodes: async () => [...nodes.values()],
    listShards: async () => [],
    listCertificates: async () => [],
  };
  return fake as unknown as Store;
}

const inventory = (extra: Record<string, unknown>): Record<string, unknown> => ({
  gpus: [],
  adapters: [],
  fabrics: { 'ib-a': ['mlx5_0', 'mlx5_1'] },
  cpuFlags: ['avx2'],
  engines: ['sim'],
  host: '127.0.0.1',
  ...extra,
});

describe('POST /v1/agent/register', () => {
  // A real port rather than app.inject (light-my-request's cookie@2 is ESM-only; see gateway.test.ts).
  let app: FastifyInstance;
  let base = '';
  beforeAll(async () => {
    app = Fastify();
    // What the mTLS gate sets from a verified node certificate: here, each request speaks for the node it names.
    app.addHook('preValidation', async (req) => {
      const nodeId = (req.body as { nodeId?: string } | undefined)?.nodeId ?? 'n0';
      Object.assign(req, {
        peer: { cn: nodeId, serial: '01', role: 'node', notAfter: new Date(Date.now() + 3_600_000) },
      });
    });
    await app.register(controlRoutes, {
      store: memoryStore(),
      temporal: { address: '127.0.0.1:7233', namespace: 'default' },
      heartbeatMs: 1000,
    });
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(() => app.close());
  const register = async (
    nodeId: string,
    inv: Record<string, unknown>,
  ): Promise<{ statusCode: number; body: string }> => {
    const res = await fetch(`${base}/v1/agent/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId, inventory: inv }),
    });
    return { statusCode: res.status, body: await res.text() };
  };

  test('keeps fabricIdentity and doctor, and GET /v1/nodes returns them', async () => {
    const fabricIdentity = { 'ib-a': { smGuid: '0x98039b03009fa1c0', strength: 'sm-guid', smLid: '0x1' } };
    const doctor = [{ id: 'cpu-flags', status: 'fail', summary: 'no AVX2', fix: 'set the VM CPU type to host' }];
    expect((await register('n1', inventory({ fabricIdentity, doctor }))).statusCode).toBe(200);
    const { nodes } = (await (await fetch(`${base}/v1/nodes`)).json()) as { nodes: NodeRecord[] };
    expect(nodes[0]?.inventory).toMatchObject({ fabricIdentity, doctor });
  });

  test('an unread SM (null GUID, declared-only) is accepted; an agent older than fabric identity still registers', async () => {
    expect(
      (
        await register(
          'n2',
          inventory({ fabricIdentity: { 'ib-a': { smGuid: null, strength: 'declared-only', note: 'not read' } } }),
        )
      ).statusCode,
    ).toBe(200);
    expect((await register('n3', inventory({}))).statusCode).toBe(200);
  });

  test.each([
    [
      'a GUID that is not 0x + 16 hex digits',
      { fabricIdentity: { 'ib-a': { smGuid: 'fe80::1', strength: 'sm-guid' } } },
      /smGuid/,
    ],
    ['an unknown strength', { fabricIdentity: { 'ib-a': { smGuid: null, strength: 'guessed' } } }, /strength/],
    [
      'a doctor status other than pass, warn, fail',
      { doctor: [{ id: 'cpu-flags', status: 'broken', summary: '', fix: '' }] },
      /status/,
    ],
    ['a doctor result without its fix', { doctor: [{ id: 'cpu-flags', status: 'pass', summary: 'ok' }] }, /fix/],
  ])('refuses %s with 400', async (_what, extra, field) => {
    const res = await register('bad', inventory(extra));
    expect(res.statusCode).toBe(400);
    expect(res.body).toMatch(field);
  });
});

describe('POST /v1/agent/renew', () => {
  let app: FastifyInstance;
  let base = '';
  const logs: string[] = [];
  beforeAll(async () => {
    app = Fastify();
    app.addHook(
      'preValidation',
      async (req) =>
        void Object.assign(req, {
          peer: { cn: 'n1', serial: '01', role: 'node', notAfter: new Date(Date.now() + 3_600_000) },
        }),
    );
    await app.register(controlRoutes, {
      store: memoryStore(),
      temporal: { address: '127.0.0.1:7233', namespace: 'default' },
      heartbeatMs: 1000,
      log: (msg) => void logs.push(msg),
      renew: async () => {
        throw new LlmgwError(
          'LLMGW_CA_UNAVAILABLE',
          "renewing n1's certificate: the llmgw-ca worker did not answer in time",
        );
      },
    });
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(() => app.close());

  test('the CA worker not answering is a 503 LLMGW_CA_UNAVAILABLE the agent can show, and a log line', async () => {
    const res = await fetch(`${base}/v1/agent/renew`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId: 'n1', csr: 'x' }),
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({
      error: { code: 'LLMGW_CA_UNAVAILABLE', message: expect.stringContaining('llmgw-ca worker') },
    });
    expect(logs).toContain('certificate renewal failed');
  });
});

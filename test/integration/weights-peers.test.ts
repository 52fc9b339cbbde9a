/**
 * Peer fetches over real mTLS (real MariaDB, the real control plane server, each node's real weights endpoint,
 * a real HTTP origin on loopback): once one node holds a file, another fetches it from that node and the origin
 * sees no request at all; a peer that fails mid-way is left for the origin, which continues the partial (Range)
 * and the sha256 still checks the whole; without a catalog sha256 that partial is not trusted and the origin
 * sends it whole; the endpoint serves only to certificates the control plane honours, and a node accepts only
 * the peer it asked for.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Pool } from 'mysql2/promise';
import type { ServerConfig } from '../../config/types';
import { buildControlServer } from '../../gateway/control/server';
import { initCa, issueNodeCertificate } from '../../lib/pki';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { parseNodeId } from '../../lib/types';
import { weightsKey } from '../../lib/weights/cache';
import { rangeGet } from '../../lib/weights/http';
import { ControlPlanes } from '../../workers/agent/control-planes';
import { startNodeWeights, type NodeWeights } from '../../workers/agent/weights';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { startOrigin, type Origin } from '../helpers/origin';
import { certClient, closeCertClients, testTls } from '../helpers/tls';

const SIZE = 5 << 20;

/** A TCP relay to `target` that ends the connection after `cutAfter` bytes from it (TLS passes through untouched). */
async function cuttingRelay(target: number, cutAfter: number): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const up = connect(target, '127.0.0.1');
    let n = 0;
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.once('close', () => sockets.delete(s));
    }
    client.pipe(up);
    up.on('data', (d: Buffer) => {
      n += d.length;
      client.write(d);
      if (n >= cutAfter) {
        client.destroy();
        up.destroy();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

describe('weights from peers (real mTLS, MariaDB, control plane)', () => {
  const mysqlUrl = testMysqlUrl();
  const config = { tls: testTls() } as Pick<ServerConfig, 'tls'>;
  const dirs: string[] = [];
  const logs: { node: string; msg: string; fields?: Record<string, unknown> }[] = [];
  let pool: Pool;
  let store: Store;
  let app: FastifyInstance;
  let url = '';
  let origin: Origin;
  /** a second file, which only n1 holds through the failure tests */
  let origin2: Origin;
  const nodes = new Map<string, NodeWeights>();

  const node = async (id: string): Promise<NodeWeights> => {
    const existing = nodes.get(id);
    if (existing) return existing;
    await store.upsertNode(parseNodeId(id), simInventory());
    const c = await certClient(config, store, id);
    const dir = mkdtempSync(join(tmpdir(), `llmgw-weights-${id}-`));
    dirs.push(dir);
    const w = await startNodeWeights({
      nodeId: id,
      control: new ControlPlanes({ servers: [url], client: c.client }),
      tls: c.cert,
      dir,
      listen: { host: '127.0.0.1', port: 0 },
      advertiseHost: '127.0.0.1',
      log: (msg, fields) => void logs.push({ node: id, msg, fields }),
    });
    nodes.set(id, w);
    return w;
  };
  const modelRequests = (): number => origin.requests.filter((r) => r.path.startsWith('/models/')).length;
  const report = async (id: string, endpoint: string): Promise<void> => {
    const c = await certClient(config, store, id);
    const held = await (await node(id)).cache.held();
    const res = await c.fetch(`${url}/v1/agent/weights`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        nodeId: id,
        endpoint,
        replace: true,
        files: held.map(({ key, url: u, size, sha256, verified, storedAt }) => ({
          key,
          url: u,
          size,
          sha256,
          verified,
          storedAt,
        })),
      }),
    });
    expect(res.status).toBe(200);
  };

  beforeAll(async () => {
    pool = await openDatabase(mysqlUrl);
    store = new Store(pool);
    const read = (f: string): string => readFileSync(f, 'utf8');
    ({ app } = await buildControlServer({
      store,
      tls: { caPem: read(config.tls.ca), certPem: read(config.tls.serverCert), keyPem: read(config.tls.serverKey) },
      log: () => undefined,
      temporal: { address: '127.0.0.1:1', namespace: 'default' },
      heartbeatMs: 2000,
    }));
    url = await app.listen({ host: '127.0.0.1', port: 0 });
    origin = await startOrigin({ size: SIZE });
    origin2 = await startOrigin({ size: SIZE });
  }, 60_000);

  afterAll(async () => {
    for (const w of nodes.values()) await w.close();
    await app?.close();
    await origin?.close();
    await origin2?.close();
    await closeCertClients();
    await pool?.end();
    await dropDatabase(mysqlUrl);
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }, 60_000);

  test('a node fetches from the peer that holds the file: the origin sees zero requests', async () => {
    const n1 = await node('n1');
    const r1 = await n1.cache.ensure({ source: origin.fileUrl, sha256: origin.sha256 });
    expect(r1.kind === 'fetched' && r1.file.from).toBe('origin');
    expect(modelRequests()).toBe(1);

    const n2 = await node('n2');
    const before = origin.requests.length;
    const r2 = await n2.cache.ensure({ source: origin.fileUrl, sha256: origin.sha256 });
    expect(origin.requests.length - before).toBe(0);
    expect(r2).toMatchObject({ kind: 'fetched', transferred: SIZE });
    if (r2.kind !== 'fetched') throw new Error('unreachable');
    expect(r2.file).toMatchObject({ from: 'peer n1', verified: true, sha256: origin.sha256 });
    expect(readFileSync(r2.path).equals(origin.data)).toBe(true);
    expect(logs.find((l) => l.node === 'n1' && l.msg === 'weights served')?.fields).toMatchObject({
      key: weightsKey(origin.fileUrl, origin.sha256),
      to: 'n2',
      from: 0,
      bytes: SIZE,
    });

    // Both copies are known to the control plane (the operator's view).
    const op = await certClient(config, store, 'operator', { role: 'operator' });
    const { copies } = (await (await op.fetch(`${url}/v1/weights`)).json()) as {
      copies: { nodeId: string; key: string; endpoint: string }[];
    };
    expect(copies.map((c) => c.nodeId)).toEqual(['n1', 'n2']);
    expect(copies[0]?.endpoint).toBe(n1.endpoint);
  });

  test('a peer that fails mid-way is left for the origin, which continues the partial; the sha256 checks the whole', async () => {
    const n1 = await node('n1');
    // n1 is the only holder of a second file, reached through a relay that cuts its answer after ~2 MiB.
    await n1.cache.ensure({ source: origin2.fileUrl, sha256: origin2.sha256 });
    const relay = await cuttingRelay(Number(new URL(n1.endpoint).port), 2 << 20);
    await report('n1', `https://127.0.0.1:${relay.port}`);
    try {
      const n3 = await node('n3');
      const before = origin2.requests.length;
      const sentBefore = origin2.bytesSent();
      const r = await n3.cache.ensure({ source: origin2.fileUrl, sha256: origin2.sha256 });
      const fromOrigin = origin2.requests.slice(before);
      expect(fromOrigin).toHaveLength(1);
      expect(fromOrigin[0]?.range).toMatch(/^bytes=\d+-$/);
      expect(origin2.bytesSent() - sentBefore).toBeLessThan(SIZE);
      expect(r).toMatchObject({ kind: 'fetched' });
      if (r.kind !== 'fetched') throw new Error('unreachable');
      expect(r.resumedFrom).toBeGreaterThan(0);
      expect(r.resumedFrom + r.transferred).toBe(SIZE);
      expect(r.file).toMatchObject({ from: 'origin', verified: true, sha256: origin2.sha256 });
      expect(readFileSync(r.path).equals(origin2.data)).toBe(true);
      expect(
        logs.find((l) => l.node === 'n3' && l.msg === 'weights fetch from a peer failed, trying the next source')
          ?.fields,
      ).toMatchObject({ peer: 'n1' });
    } finally {
      await report('n1', n1.endpoint);
      await relay.close();
    }
  });

  test('without a catalog sha256, a partial left by a failed peer is not trusted: the origin sends the file whole', async () => {
    const n1 = await node('n1');
    const url3 = `${origin2.fileUrl}?v=3`;
    await n1.cache.ensure({ source: url3 });
    const relay = await cuttingRelay(Number(new URL(n1.endpoint).port), 2 << 20);
    await report('n1', `https://127.0.0.1:${relay.port}`);
    try {
      const n4 = await node('n4');
      const sentBefore = origin2.bytesSent();
      const r = await n4.cache.ensure({ source: url3 });
      expect(origin2.bytesSent() - sentBefore).toBe(SIZE);
      expect(r).toMatchObject({ kind: 'fetched', resumedFrom: 0, transferred: SIZE });
      expect(readFileSync(r.path).equals(origin2.data)).toBe(true);
    } finally {
      await report('n1', n1.endpoint);
      await relay.close();
    }
  });

  test("the weights endpoint: a revoked certificate gets 403, another CA's no handshake, and a node accepts only the peer it asked for", async () => {
    const n1 = await node('n1');
    const key = weightsKey(origin.fileUrl, origin.sha256);
    const fileUrl = `${n1.endpoint}/v1/weights/${key}`;
    const ca = readFileSync(config.tls.ca, 'utf8');
    const asNode = async (id: string): Promise<{ certPem: string; keyPem: string; caPem: string }> => ({
      ...(await certClient(config, store, id, { fresh: true })).cert,
      caPem: ca,
    });

    const ok = await rangeGet(fileUrl, { offset: SIZE - 10, tls: { ...(await asNode('n5')), expectCn: 'n1' } });
    expect(ok.statusCode).toBe(206);
    expect(ok.headers['content-range']).toBe(`bytes ${SIZE - 10}-${SIZE - 1}/${SIZE}`);
    ok.body.resume();

    const revoked = await asNode('n6');
    await store.revokeCertificates('n6', 'test');
    const refused = await rangeGet(fileUrl, { offset: 0, tls: { ...revoked, expectCn: 'n1' } });
    expect(refused.statusCode).toBe(403);
    refused.body.resume();

    const other = initCa(join(mkdtempSync(join(tmpdir(), 'llmgw-other-ca-')), 'ca'), { keyBits: 2048 });
    const stranger = issueNodeCertificate(other, 'n7');
    await expect(
      rangeGet(fileUrl, {
        offset: 0,
        tls: { certPem: stranger.certPem, keyPem: stranger.keyPem, caPem: ca, expectCn: 'n1' },
      }),
    ).rejects.toThrow(new RegExp(`GET ${fileUrl}: `));

    await expect(rangeGet(fileUrl, { offset: 0, tls: { ...(await asNode('n5')), expectCn: 'n2' } })).rejects.toThrow(
      "peer certificate refused: the peer's certificate is n1's, expected n2's",
    );
  });
});

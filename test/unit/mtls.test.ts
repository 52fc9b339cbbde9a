/**
 * The control plane's certificate gate over real TLS on loopback (fastify https, node:https clients):
 * a valid node certificate passes with its CN; none, another CA's, an expired one, an unrecorded one and a
 * revoked one are each refused with their own reason in one log line; a revocation closes a keep-alive
 * connection that is already open; a node certificate may not call operator routes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { CertificateGate, installGate, mtlsServerOptions, type CertRole } from '../../gateway/mtls';
import {
  initCa,
  issueNodeCertificate,
  issueServerCertificate,
  makeNodeCsr,
  signNodeCsr,
  type Ca,
  type Issued,
} from '../../lib/pki';
import { waitFor } from '../helpers/wait';

type Cert = Issued & { keyPem: string };

describe('mTLS certificate gate', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-mtls-'));
  let ca: Ca;
  let other: Ca;
  let app: FastifyInstance;
  let gate: CertificateGate;
  let url = '';
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];
  const recorded = new Map<string, { cn: string; role: CertRole; revokedAt: Date | null }>();
  const certs: Record<string, Cert> = {};
  const record = (c: Cert, role: CertRole = 'node'): Cert => (
    recorded.set(c.serial, { cn: c.cn, role, revokedAt: null }),
    c
  );

  beforeAll(async () => {
    ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
    other = initCa(join(dir, 'other'), { keyBits: 2048 });
    certs.good = record(issueNodeCertificate(ca, 'gpu-01'));
    certs.revokeMe = record(issueNodeCertificate(ca, 'gpu-02'));
    certs.expired = record(issueNodeCertificate(ca, 'gpu-03', { days: 1, now: new Date(Date.now() - 3 * 86_400_000) }));
    certs.foreign = issueNodeCertificate(other, 'gpu-01');
    certs.unrecorded = issueNodeCertificate(ca, 'gpu-04');
    certs.operator = record(issueNodeCertificate(ca, 'ops-alice'), 'operator');
    const server = issueServerCertificate(ca, 'control-plane', ['127.0.0.1']);
    gate = new CertificateGate({
      caPem: ca.certPem,
      lookup: {
        bySerial: async (s) => recorded.get(s) ?? null,
        revokedSerials: async () => [...recorded].filter(([, r]) => r.revokedAt).map(([s]) => s),
      },
      log: (msg, fields) => void logs.push({ msg, fields }),
      refreshMs: 200,
    });
    await gate.start();
    app = Fastify({
      https: mtlsServerOptions({ caPem: ca.certPem, certPem: server.certPem, keyPem: server.keyPem }),
      forceCloseConnections: true,
    });
    installGate(
      app,
      gate,
      (u) => (u.startsWith('/v1/agent/') ? 'node' : 'operator'),
      (msg, fields) => void logs.push({ msg, fields }),
    );
    app.get('/v1/agent/whoami', async (req) => ({ cn: req.peer?.cn }));
    app.get('/v1/nodes', async () => ({ nodes: [] }));
    app.get('/health', async () => ({ status: 'ok' }));
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });

  afterAll(async () => {
    gate?.stop();
    await app?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const get = (path: string, cert: Cert | null, agent?: Agent): Promise<{ status: number; body: string }> =>
    new Promise((resolve, reject) => {
      const u = new URL(path, url);
      const req = request(
        {
          host: u.hostname,
          port: u.port,
          path: u.pathname,
          ca: ca.certPem,
          ...(cert ? { cert: cert.certPem, key: cert.keyPem } : {}),
          agent: agent ?? false,
        },
        (res) => {
          let body = '';
          res.on('data', (b: Buffer) => void (body += b.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end();
    });
  const lastRefusal = (): Record<string, unknown> | undefined =>
    logs.filter((l) => l.msg === 'certificate refused').at(-1)?.fields;

  test('a valid node certificate passes, and the route sees its CN', async () => {
    expect(await get('/v1/agent/whoami', certs.good as Cert)).toEqual({
      status: 200,
      body: JSON.stringify({ cn: 'gpu-01' }),
    });
  });

  test.each([
    ['no certificate', null, 401, 'no-certificate'],
    ['another CA', 'foreign', 401, 'unknown-ca'],
    ['expired', 'expired', 401, 'expired'],
    ['unrecorded', 'unrecorded', 403, 'unrecorded'],
  ] as const)('%s: refused with its reason in the answer and one log line', async (_name, which, status, why) => {
    const before = logs.length;
    const r = await get('/v1/agent/whoami', which ? (certs[which] as Cert) : null);
    expect(r.status).toBe(status);
    expect(JSON.parse(r.body)).toMatchObject({
      error: { code: 'LLMGW_CERT_REFUSED', message: expect.stringContaining(`(${why})`) },
    });
    expect(logs.slice(before).filter((l) => l.msg === 'certificate refused')).toHaveLength(1);
    expect(lastRefusal()).toMatchObject({ reason: why, url: '/v1/agent/whoami' });
  });

  test('/health needs no certificate', async () => {
    expect((await get('/health', null)).status).toBe(200);
  });

  test('a node certificate may not call operator routes; an operator certificate may', async () => {
    const r = await get('/v1/nodes', certs.good as Cert);
    expect(r.status).toBe(403);
    expect(r.body).toMatch(
      /a node certificate \(CN gpu-01\) may not call \/v1\/nodes: it needs an operator certificate/,
    );
    expect(lastRefusal()).toMatchObject({ reason: 'wrong-role', cn: 'gpu-01' });
    expect((await get('/v1/nodes', certs.operator as Cert)).status).toBe(200);
  });

  test('a certificate that expires while its keep-alive connection is open has the connection closed', async () => {
    // Valid for about 3 more seconds: one day long, issued a day ago. The key is made first: under load its
    // generation alone took over 3 s, and the certificate had expired before its first request.
    const { csrPem, keyPem } = makeNodeCsr('gpu-05');
    const signed = signNodeCsr(ca, csrPem, 'gpu-05', { days: 1, now: new Date(Date.now() - 86_400_000 + 3000) });
    const c = record({ ...signed, keyPem });
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    expect((await get('/v1/agent/whoami', c, agent)).status).toBe(200);
    const socket = Object.values(agent.freeSockets).flat()[0];
    expect(socket).toBeDefined();
    let closed = false;
    socket?.once('close', () => void (closed = true));
    await waitFor(() => closed, { timeoutMs: 10_000, what: "the expired certificate's open connection to be closed" });
    expect(
      logs.some(
        (l) => l.msg === 'certificate refused' && l.fields.reason === 'expired' && l.fields.serial === c.serial,
      ),
    ).toBe(true);
    expect((await get('/v1/agent/whoami', c, agent)).status).toBe(401);
    agent.destroy();
  });

  test('revoking a certificate closes its open keep-alive connection and refuses it from then on', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const c = certs.revokeMe as Cert;
    expect((await get('/v1/agent/whoami', c, agent)).status).toBe(200);
    const socket = Object.values(agent.freeSockets).flat()[0];
    expect(socket).toBeDefined();
    let closed = false;
    socket?.once('close', () => void (closed = true));
    (recorded.get(c.serial) as { revokedAt: Date | null }).revokedAt = new Date();
    await waitFor(() => closed, { timeoutMs: 5000, what: "the revoked certificate's open connection to be closed" });
    expect(
      logs.some(
        (l) => l.msg === 'certificate refused' && l.fields.reason === 'revoked' && l.fields.serial === c.serial,
      ),
    ).toBe(true);
    const r = await get('/v1/agent/whoami', c, agent);
    expect(r.status).toBe(403);
    expect(r.body).toMatch(/\(revoked\)/);
    agent.destroy();
  });
});

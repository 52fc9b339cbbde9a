/**
 * One door per node: a real sim engine launched as the agent launches it (its API on loopback), behind a node's
 * door on a test network's address, reached by clients with certificates of each role, by the gateway over its
 * keep-alive door pool, and by a test host in another network namespace. Needs root (network namespaces).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request, type RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { DoorAgent } from '../../lib/door-agent';
import { buildEngineCommand } from '../../lib/engines/command';
import { DOOR_MISS_HEADER, nodeDoorEndpoint } from '../../lib/node-door';
import { initCa, issueClientCertificate, issueNodeCertificate, nodePeerProblem } from '../../lib/pki';
import { simEngineArgv } from '../../lib/sim/argv';
import { startNodeDoor, type NodeDoor } from '../../gateway/node-door/door';
import { chat, closeAll, gateway, post, ready } from '../helpers/gateway';
import { freePort } from '../helpers/ports';
import { startTestNetwork, type TestHost, type TestNetwork } from '../helpers/test-host';
import { waitFor } from '../helpers/wait';

const MODEL = 'sim-7b';
const NODE = 'node-a';
const tmp = mkdtempSync(join(tmpdir(), 'llmgw-node-door-'));
const ca = initCa(join(tmp, 'ca'), { keyBits: 2048 });
const nodeCert = issueNodeCertificate(ca, NODE);
const gatewayCert = issueClientCertificate(ca, 'gateway', 'gw-1');
const revokedGateway = issueClientCertificate(ca, 'gateway', 'gw-old');
const operatorCert = issueClientCertificate(ca, 'operator', 'ops');
const foreign = initCa(join(tmp, 'other'), { keyBits: 2048, commonName: 'another cluster' });
const foreignGateway = issueClientCertificate(foreign, 'gateway', 'gw-1');

let lan: TestNetwork;
let other: TestHost;
let engine: ChildProcess;
let enginePort: number;
let door: NodeDoor;
const serving = new Map<string, number>();
const doorLog: { msg: string; [k: string]: unknown }[] = [];

type Answer = { status: number; headers: Record<string, unknown>; body: string; chunks: number; firstMs: number };

/** One request to the door, presenting `cert` (or none), checking the door is node-a's as the gateway does. */
function call(path: string, cert: { certPem: string; keyPem: string } | null, body?: string): Promise<Answer> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const o: RequestOptions = {
      host: lan.gateway,
      port: door.port,
      path,
      method: body ? 'POST' : 'GET',
      headers: body ? { 'content-type': 'application/json' } : {},
      ca: ca.certPem,
      rejectUnauthorized: false,
      agent: false,
      ...(cert ? { cert: cert.certPem, key: cert.keyPem } : {}),
    };
    const req = request(o, (res) => {
      const problem = nodePeerProblem(res.socket as TLSSocket, { caPem: ca.certPem, expectCn: NODE });
      if (problem) return reject(new Error(problem));
      let text = '';
      let chunks = 0;
      let firstMs = 0;
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        if (chunks++ === 0) firstMs = performance.now() - t0;
        text += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, chunks, firstMs }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** From the test host (another network namespace): whether a TCP connection to this machine's address:port opens. */
async function opensFromOtherHost(port: number): Promise<boolean> {
  const r = await other.exec(`timeout 3 bash -c 'exec 3<>/dev/tcp/${lan.gateway}/${port}' && echo open || echo closed`);
  return r.stdout.trim() === 'open';
}

beforeAll(async () => {
  lan = await startTestNetwork();
  other = await lan.startHost({ nodeId: 'node-b', authorizedKeys: [] });
  enginePort = await freePort();
  // The command an agent with a door runs for rank 0 of a single-node sim replica on a node at lan.gateway.
  const cmd = buildEngineCommand(
    {
      model: MODEL,
      source: 'sim://',
      profile: { name: 'one', engine: 'sim', nodes: 1, gpusPerNode: 0, args: ['--tokens-per-second', '20'] },
      rank: 0,
      world: 1,
      host: lan.gateway,
      port: enginePort,
      behindDoor: true, // an agent with --door
      distHost: lan.gateway,
      distPort: 0,
    },
    { nodeId: NODE, inventory: { fabrics: {}, adapters: [] } },
  );
  const [bin, ...pre] = simEngineArgv();
  engine = spawn(bin as string, [...pre, ...cmd.args], { stdio: 'ignore' });
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${enginePort}/health`, { signal: AbortSignal.timeout(1000) })).ok,
    { timeoutMs: 20_000, what: `the sim engine on 127.0.0.1:${enginePort}` },
  );
  serving.set('m-0', enginePort);
  door = await startNodeDoor({
    nodeId: NODE,
    tls: { certPem: nodeCert.certPem, keyPem: nodeCert.keyPem, caPem: ca.certPem },
    host: lan.gateway,
    port: 0,
    replicaPort: (id) => serving.get(id) ?? null,
    replicas: () => [...serving.keys()],
    honoured: async (serial) => serial !== revokedGateway.serial,
    log: (msg, fields) => void doorLog.push({ msg, ...fields }),
  });
}, 60_000);

afterAll(async () => {
  await closeAll();
  await door?.close();
  engine?.kill('SIGKILL');
  await other?.stop();
  await lan?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const streamed = JSON.stringify({
  model: MODEL,
  stream: true,
  max_tokens: 8,
  messages: [{ role: 'user', content: 'through the door' }],
});

test('a gateway certificate gets a streamed completion through the door, event by event as the engine makes them', async () => {
  const a = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', gatewayCert, streamed);
  expect(a.status).toBe(200);
  expect(String(a.headers['content-type'])).toMatch(/^text\/event-stream/);
  const events = a.body.split('\n\n').filter((e) => e.startsWith('data: '));
  expect(events.at(-1)).toBe('data: [DONE]');
  expect(events.length).toBeGreaterThan(8);
  // 8 tokens at 20/s take ~400 ms: a door that buffered would deliver them in one piece at the end.
  expect(a.chunks).toBeGreaterThan(4);
});

test('a node certificate, an operator certificate and a client without one are refused in OpenAI shape', async () => {
  const body = chat(MODEL);
  const asNode = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', nodeCert, body);
  expect(asNode.status).toBe(403);
  expect(JSON.parse(asNode.body).error).toMatchObject({ code: 'LLMGW_CERT_REFUSED' });
  expect(JSON.parse(asNode.body).error.message).toMatch(/a node certificate \(CN node-a\).*only a gateway certificate/);
  const asOperator = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', operatorCert, body);
  expect(asOperator.status).toBe(403);
  const none = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', null, body);
  expect(none.status).toBe(401);
  expect(JSON.parse(none.body).error.message).toMatch(/no certificate.*llmgw ca issue --gateway/);
  const otherCa = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', foreignGateway, body);
  expect(otherCa.status).toBe(401);
  expect(JSON.parse(otherCa.body).error.message).toMatch(/unknown-ca/);
  const revoked = await call('/nodes/node-a/replicas/m-0/v1/chat/completions', revokedGateway, body);
  expect(revoked.status).toBe(403);
  expect(JSON.parse(revoked.body).error.message).toMatch(/revoked/);
  expect(doorLog.filter((l) => l.msg === 'certificate refused').length).toBeGreaterThanOrEqual(5);
});

test('a replica the node does not hold, or another node, is a clear 404 the gateway can tell from an engine 404', async () => {
  const a = await call('/nodes/node-a/replicas/m-9/v1/chat/completions', gatewayCert, chat(MODEL));
  expect(a.status).toBe(404);
  expect(a.headers[DOOR_MISS_HEADER]).toBe('1');
  expect(JSON.parse(a.body).error).toMatchObject({
    code: 'LLMGW_REPLICA_NOT_HERE',
    type: 'invalid_request_error',
    message: expect.stringMatching(/node node-a does not run replica m-9 \(it runs m-0 now\)/),
  });
  const b = await call('/nodes/node-z/replicas/m-0/v1/chat/completions', gatewayCert, chat(MODEL));
  expect(b.status).toBe(404);
  expect(JSON.parse(b.body).error.message).toMatch(/node node-a's door, not node-z's/);
});

test('from another network namespace the engine port is closed and only the door opens', async () => {
  expect(await opensFromOtherHost(enginePort)).toBe(false);
  expect(await opensFromOtherHost(door.port)).toBe(true);
});

test('the gateway routes a replica behind the door with its gateway certificate, over one kept-alive connection', async () => {
  const doorAgent = new DoorAgent(
    { certPem: gatewayCert.certPem, keyPem: gatewayCert.keyPem, caPem: ca.certPem },
    2000,
  );
  const endpoint = nodeDoorEndpoint(lan.gateway, door.port, NODE, 'm-0');
  const gw = await gateway({ models: [MODEL], replicas: [ready('m-0', MODEL, endpoint)] }, { doorAgent });
  let sockets = 0;
  const counting = doorAgent.createConnection.bind(doorAgent);
  doorAgent.createConnection = (o, cb) => {
    sockets++;
    return counting(o, cb);
  };
  for (let i = 0; i < 3; i++) {
    const res = await post(`${gw.url}/v1/chat/completions`, streamed);
    expect(res.status).toBe(200);
    expect((await res.text()).trimEnd().endsWith('data: [DONE]')).toBe(true);
  }
  expect(sockets).toBe(1);
  // A door that is not the named node's is refused before any byte is sent, and the replica ejected.
  const wrong = nodeDoorEndpoint(lan.gateway, door.port, 'node-x', 'm-0');
  const gw2 = await gateway({ models: [MODEL], replicas: [ready('m-0', MODEL, wrong)] }, { doorAgent });
  const res = await post(`${gw2.url}/v1/chat/completions`, chat(MODEL));
  expect(res.status).toBe(502);
  expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
    /node door certificate refused: the peer's certificate is node-a's, expected node-x's/,
  );
  doorAgent.destroy();
}, 30_000);

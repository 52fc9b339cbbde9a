/**
 * Engine signals end to end (real processes and sockets): two sim engines launched as an agent with a door
 * launches them (API on loopback), the agent's gatherer reading each one's /metrics, the node's door serving them
 * at GET /nodes/NODE/signals to gateway certificates, and a gateway polling that door over its keep-alive pool.
 * A replica whose engine holds a long queue (requests sent around this gateway, as another gateway's would be)
 * gets no new requests while its signal is fresh; once the gatherer stops, the signal goes stale within seconds
 * and the gateway routes by its own in-flight counts again. Prints how soon the gateway saw the queue.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNodeDoor, type NodeDoor } from '../../gateway/node-door/door';
import { DoorAgent } from '../../lib/door-agent';
import { buildEngineCommand } from '../../lib/engines/command';
import { nodeDoorEndpoint } from '../../lib/node-door';
import { initCa, issueClientCertificate, issueNodeCertificate } from '../../lib/pki';
import { simEngineArgv } from '../../lib/sim/argv';
import { EngineSignals } from '../../workers/agent/engine-signals';
import { closeAll, gateway, post, ready, type TestGateway } from '../helpers/gateway';
import { freePort } from '../helpers/ports';
import { waitFor } from '../helpers/wait';

const MODEL = 'sim-sig';
const NODE = 'node-s';
const tmp = mkdtempSync(join(tmpdir(), 'llmgw-engine-signals-'));
const ca = initCa(join(tmp, 'ca'), { keyBits: 2048 });
const nodeCert = issueNodeCertificate(ca, NODE);
const gatewayCert = issueClientCertificate(ca, 'gateway', 'gw-1');
const operatorCert = issueClientCertificate(ca, 'operator', 'ops');

const engines: ChildProcess[] = [];
const ports: Record<string, number> = {};
let door: NodeDoor;
let gatherer: EngineSignals;
let doorAgent: DoorAgent;
let gw: TestGateway;

/** Starts rank 0 of a single-node sim replica as an agent with a door runs it: its API on 127.0.0.1. */
async function startEngine(id: string): Promise<void> {
  const port = await freePort();
  const cmd = buildEngineCommand(
    {
      model: MODEL,
      source: 'sim://',
      profile: {
        name: 'one',
        engine: 'sim',
        nodes: 1,
        gpusPerNode: 0,
        // One prompt at a time at 4,000 uncached tokens a second: a 2,000-token prompt holds the next for 0.5 s.
        args: ['--tokens-per-second', '0', '--prefill-tokens-per-second', '4000', '--prefix-cache-tokens', '0'],
      },
      rank: 0,
      world: 1,
      host: '127.0.0.1',
      port,
      behindDoor: true,
      distHost: '127.0.0.1',
      distPort: 0,
    },
    { nodeId: NODE, inventory: { fabrics: {}, adapters: [] } },
  );
  const [bin, ...pre] = simEngineArgv();
  engines.push(spawn(bin as string, [...pre, ...cmd.args], { stdio: 'ignore' }));
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })).ok,
    { timeoutMs: 20_000, what: `the sim engine ${id} on 127.0.0.1:${port}` },
  );
  ports[id] = port;
}

/** GETs the door's signals with `cert`: the status. */
function doorStatus(cert: { certPem: string; keyPem: string }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: door.port,
        path: `/nodes/${NODE}/signals`,
        ca: ca.certPem,
        rejectUnauthorized: false,
        agent: false,
        cert: cert.certPem,
        key: cert.keyPem,
      },
      (res) => {
        res.resume();
        res.once('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.once('error', reject);
    req.end();
  });
}

/** Sends `n` chat completions through the gateway one after another: how many each replica answered (access log). */
async function sequential(n: number): Promise<Record<string, number>> {
  const from = gw.lines.length;
  for (let i = 0; i < n; i++) {
    const res = await post(
      `${gw.url}/v1/chat/completions`,
      JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: `short ${i}` }] }),
    );
    expect(res.status).toBe(200);
    await res.text();
  }
  // The access line is written when each response closes.
  const lines = await waitFor(
    () => {
      const l = gw.lines.slice(from).filter((x) => x.msg === 'request' && x.path === '/v1/chat/completions');
      return l.length >= n && l;
    },
    { timeoutMs: 5000, what: `${n} access-log lines` },
  );
  const got: Record<string, number> = {};
  for (const l of lines) got[String(l.replica)] = (got[String(l.replica)] ?? 0) + 1;
  return got;
}

beforeAll(async () => {
  await startEngine('m-0');
  await startEngine('m-1');
  gatherer = new EngineSignals();
  for (const id of ['m-0', 'm-1']) gatherer.track(id, 'sim', `http://127.0.0.1:${ports[id]}`);
  gatherer.start();
  door = await startNodeDoor({
    nodeId: NODE,
    tls: { certPem: nodeCert.certPem, keyPem: nodeCert.keyPem, caPem: ca.certPem },
    host: '127.0.0.1',
    port: 0,
    replicaPort: (id) => ports[id] ?? null,
    replicas: () => Object.keys(ports),
    signals: () => gatherer.snapshot(),
  });
  doorAgent = new DoorAgent({ certPem: gatewayCert.certPem, keyPem: gatewayCert.keyPem, caPem: ca.certPem }, 2000);
  gw = await gateway(
    {
      models: [MODEL],
      replicas: ['m-0', 'm-1'].map((id) => ready(id, MODEL, nodeDoorEndpoint('127.0.0.1', door.port, NODE, id))),
    },
    { doorAgent, accessLog: true, metrics: true },
  );
}, 60_000);

afterAll(async () => {
  gatherer?.stop();
  await closeAll();
  doorAgent?.destroy();
  await door?.close();
  for (const e of engines) e.kill('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

test("the door serves the engines' signals to a gateway certificate only", async () => {
  expect(await doorStatus(gatewayCert)).toBe(200);
  expect(await doorStatus(operatorCert)).toBe(403);
});

test('a replica whose engine reports a long queue gets no new requests; a stale signal falls back to in-flight counts', async () => {
  // Idle engines, fresh signals of no queue: the pick alternates.
  await waitFor(() => gw.routing.engineLoad.entries().length === 2, { timeoutMs: 5000, what: 'both signals' });
  expect(await sequential(4)).toEqual({ 'm-0': 2, 'm-1': 2 });

  // Ten 2,000-token prompts straight to m-0's engine (around this gateway): about 5 s of prefill queue.
  const t0 = performance.now();
  const prompt = 'word '.repeat(2000);
  const around = Array.from({ length: 10 }, () =>
    fetch(`http://127.0.0.1:${ports['m-0']}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: prompt }] }),
    }).then((r) => r.text()),
  );
  await waitFor(() => gw.routing.engineLoad.waiting('m-0') >= 5, {
    timeoutMs: 5000,
    intervalMs: 10,
    what: "m-0's queue in the gateway's table",
  });
  const seenMs = performance.now() - t0;
  // What the pick weighs is on the gateway's metrics listener.
  const prom = await (await fetch(gw.metricsUrl as string)).text();
  const waiting = /^llmgw_gateway_engine_waiting\{model="sim-sig",replica="m-0"\} (\d+)/m.exec(prom);
  expect(Number(waiting?.[1])).toBeGreaterThanOrEqual(1);
  expect(await sequential(10)).toEqual({ 'm-1': 10 });
  console.log(
    `engine signals: the gateway saw m-0's queue ${seenMs.toFixed(0)} ms after it formed (agent reads every 500 ms, gateway polls the door every 1 s); load ${loadavg()[0].toFixed(2)}`,
  );

  // The agent stops reading: its last signal ages at the door, and the gateway drops it after 3 s.
  gatherer.stop();
  const t1 = performance.now();
  await waitFor(() => gw.routing.engineLoad.entries().length === 0, {
    timeoutMs: 8000,
    what: 'the stale signals dropped',
  });
  console.log(
    `engine signals: stale signals dropped ${(performance.now() - t1).toFixed(0)} ms after the agent stopped`,
  );
  await Promise.all(around);
  expect(await sequential(4)).toEqual({ 'm-0': 2, 'm-1': 2 });
}, 60_000);

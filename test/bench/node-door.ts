/**
 * `npm run bench:node-door`: what a node's door adds to a request. One sim engine process (answers at once), the
 * node's door process in front of it as the agent runs it (`llmgw node-door`, its route read from the engine's
 * record in a state dir, its credentials from door/credentials.json), and interleaved rounds of one
 * non-streamed completion straight to the engine (keep-alive HTTP: the gateway's path without a door) and one
 * through the door (keep-alive TLS with a gateway certificate), both through the gateway's own client (undici,
 * gateway/inference/upstream.ts, with the door connector of lib/door-agent.ts).
 * Beside them, the floor of any TLS-terminating Node hop: a byte pipe (tls.Server in, net.Socket out, `pipe` both
 * ways, no HTTP at all) in a process of its own, reached the same way.
 * Prints each path's percentiles, the added latency paired per round, and the door process's CPU and system calls
 * per request.
 * Asserts nothing.
 */
import '../helpers/bench-help'; // --help: the comment above
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DoorAgent } from '../../lib/door-agent';
import { upstreamDispatcher } from '../../gateway/inference/upstream';
import { enginePaths, procStartTime, shardKey, writeJsonAtomic, type EngineState } from '../../lib/engine-state';
import { nodeDoorArgv, readDoorRecord, writeDoorCredentials } from '../../workers/node-door/files';
import { initCa, issueClientCertificate, issueNodeCertificate } from '../../lib/pki';
import { simEngineArgv } from '../../lib/sim/argv';
import { freePort } from '../helpers/ports';
import { treeCpuSeconds } from './peers-paths';

const ROUNDS = Number(process.env.ROUNDS ?? 3000);
const WARMUP = 300;
const body = JSON.stringify({ model: 'sim', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
const headers = { 'content-type': 'application/json' };

/** A process's read and write system calls so far (/proc/PID/io syscr, syscw). */
const syscalls = (pid: number): { reads: number; writes: number } => {
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  return { reads: Number(/syscr: (\d+)/.exec(io)?.[1]), writes: Number(/syscw: (\d+)/.exec(io)?.[1]) };
};

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f = (ms: number): string => ms.toFixed(3);

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'llmgw-bench-node-door-'));
  const ca = initCa(join(tmp, 'ca'), { keyBits: 2048 });
  const node = issueNodeCertificate(ca, 'bench-node');
  const gw = issueClientCertificate(ca, 'gateway', 'bench-gw');
  const enginePort = await freePort();
  const [bin, ...pre] = simEngineArgv();
  const engine = spawn(
    bin as string,
    [...pre, '--model', 'sim', '--port', String(enginePort), '--tokens-per-second', '0'],
    {
      stdio: 'ignore',
    },
  );
  // What an agent leaves for its door: the engine's record (rank 0 of replica m-0) and the node's credentials.
  const stateDir = join(tmp, 'state');
  mkdirSync(stateDir, { recursive: true });
  const key = shardKey('m-0', 1, 0);
  writeJsonAtomic(enginePaths(stateDir, key).state, {
    key,
    replicaId: 'm-0',
    rank: 0,
    generation: 1,
    port: enginePort,
    shimPid: 0,
    shimStartTime: '',
    enginePid: engine.pid as number,
    engineStartTime: procStartTime(engine.pid as number) ?? '',
    command: 'sim',
    startedAt: new Date().toISOString(),
  } satisfies EngineState);
  writeDoorCredentials(stateDir, { ...node, caPem: ca.certPem });
  const [doorBin, ...doorPre] = nodeDoorArgv();
  const door = spawn(
    doorBin as string,
    [...doorPre, '--node', 'bench-node', '--state-dir', stateDir, '--listen', '127.0.0.1:0'],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  // The floor: TLS in, bytes out, nothing read — what a door that did no HTTP at all would cost.
  const pipeScript = `
    const tls = require('node:tls'), net = require('node:net');
    const [enginePort, cert, key, ca] = JSON.parse(process.argv[1]);
    const t = tls.createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, (s) => {
      s.setNoDelay(true); const u = net.connect(enginePort, '127.0.0.1'); u.setNoDelay(true); s.pipe(u); u.pipe(s);
      u.on('error', () => s.destroy()); s.on('error', () => u.destroy()); });
    t.listen(0, '127.0.0.1', () => process.stdout.write(String(t.address().port) + '\\n'));`;
  const pipe = spawn(
    process.execPath,
    ['-e', pipeScript, JSON.stringify([enginePort, node.certPem, node.keyPem, ca.certPem])],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const pipePort = await new Promise<number>((r) => pipe.stdout?.once('data', (d) => r(Number(String(d)))));
  let doorPort = 0;
  for (let i = 0; i < 600 && !doorPort; i++) {
    doorPort = readDoorRecord(stateDir)?.port ?? 0;
    await new Promise((r) => setTimeout(r, 50));
  }
  if (!doorPort) throw new Error('the node door process did not start within 30 s');
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(`http://127.0.0.1:${enginePort}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const doorAgent = new DoorAgent({ certPem: gw.certPem, keyPem: gw.keyPem, caPem: ca.certPem }, 2000);
  const client = upstreamDispatcher(2000, doorAgent);
  const once = async (origin: string, path: string, servername?: string): Promise<number> => {
    const t0 = performance.now();
    const r = await client.request({
      origin,
      path,
      method: 'POST',
      headers,
      body,
      ...(servername ? { servername } : {}),
    });
    await r.body.dump();
    if (r.statusCode !== 200) throw new Error(`status ${r.statusCode}`);
    return performance.now() - t0;
  };
  const direct = (): Promise<number> => once(`http://127.0.0.1:${enginePort}`, '/v1/chat/completions');
  const viaDoor = (): Promise<number> =>
    once(`https://127.0.0.1:${doorPort}`, '/nodes/bench-node/replicas/m-0/v1/chat/completions', 'bench-node');
  const viaPipe = (): Promise<number> => once(`https://127.0.0.1:${pipePort}`, '/v1/chat/completions', 'bench-node');
  for (let i = 0; i < WARMUP; i++) {
    await direct();
    await viaDoor();
    await viaPipe();
  }
  const d: number[] = [];
  const v: number[] = [];
  const added: number[] = [];
  const p: number[] = [];
  const pipeAdded: number[] = [];
  const doorCpu0 = treeCpuSeconds(door.pid as number);
  const doorIo0 = syscalls(door.pid as number);
  for (let i = 0; i < ROUNDS; i++) {
    // A fresh random order per round, so no path always goes first.
    const order = [0, 1, 2].sort(() => Math.random() - 0.5);
    const t = [0, 0, 0];
    for (const k of order) t[k] = await [direct, viaDoor, viaPipe][k]!();
    const [c, b, q] = t as [number, number, number];
    d.push(c);
    v.push(b);
    p.push(q);
    added.push(b - c);
    pipeAdded.push(q - c);
  }
  // The door's own CPU (utime+stime from /proc) over the measured rounds: one door request per round.
  const doorCpuUs = ((treeCpuSeconds(door.pid as number) - doorCpu0) / ROUNDS) * 1e6;
  const doorIo = syscalls(door.pid as number);
  const perRound = (n: number): string => (n / ROUNDS).toFixed(2);
  const cores = (await import('node:os')).loadavg()[0]?.toFixed(1);
  process.stdout.write(
    [
      `node door bench: ${ROUNDS} interleaved rounds (direct, door, pipe in a random order each) after ${WARMUP} warm-up, one keep-alive connection per path, loadavg ${cores}`,
      '',
      '| path | p50 | p90 | p99 |',
      '| --- | --- | --- | --- |',
      `| engine direct (http, loopback) | ${f(pct(d, 50))} | ${f(pct(d, 90))} | ${f(pct(d, 99))} |`,
      `| through the node door (keep-alive TLS, gateway certificate) | ${f(pct(v, 50))} | ${f(pct(v, 90))} | ${f(pct(v, 99))} |`,
      `| **added by the door, paired** | **${f(pct(added, 50))}** | ${f(pct(added, 90))} | ${f(pct(added, 99))} |`,
      `| a TLS byte pipe (no HTTP: the floor of a Node TLS hop) | ${f(pct(p, 50))} | ${f(pct(p, 90))} | ${f(pct(p, 99))} |`,
      `| added by the pipe, paired | ${f(pct(pipeAdded, 50))} | ${f(pct(pipeAdded, 90))} | ${f(pct(pipeAdded, 99))} |`,
      '',
      `the door's CPU: ${doorCpuUs.toFixed(0)} µs per request (utime+stime of its process over the measured rounds); ` +
        `${perRound(doorIo.writes - doorIo0.writes)} write and ${perRound(doorIo.reads - doorIo0.reads)} read system calls ` +
        'per request (/proc/PID/io: one of each per side is the floor for a proxy)',
      '',
      'milliseconds; goal (issue 21): added p50 <= 0.1 ms',
      '',
    ].join('\n'),
  );
  await client.close();
  doorAgent.destroy();
  pipe.kill();
  door.kill('SIGTERM');
  engine.kill();
  await new Promise((r) => door.once('exit', r));
  rmSync(tmp, { recursive: true, force: true });
}

void main();

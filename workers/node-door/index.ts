/**
 * The node's door as a process of its own (`llmgw node-door`, started and adopted by the agent), so that serving
 * never waits on the control path: an agent that restarts, upgrades or crashes leaves the door serving. The door
 * needs nothing from a running agent: it reads its routes from the agent's engine records (routes.ts), its
 * credentials from `<state-dir>/door/credentials.json` (re-read every 2 s, renewals included), gathers the engines'
 * signals itself, and asks the control plane about revocation over the node's certificate.
 *
 * A token-checked control listener on 127.0.0.1 answers the agent: `GET /health`, `POST /replace` (new-first: the
 * replacing door is started with this one's listening socket as fd 3, and once it serves this one stops accepting
 * and drains) and `POST /stop` (drain and exit).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startNodeDoor, type NodeDoor } from '../../gateway/node-door/door';
import type { CertificateStatus } from '../../gateway/control/contract';
import { procStartTime } from '../../lib/engine-state';
import { EXIT_WITH_PARENT, fileTail } from '../../lib/process';
import type { TlsCredentials } from '../../lib/tls-client';
import { ControlPlanes, controlClient } from '../agent/control-planes';
import { EngineSignals } from '../agent/engine-signals';
import { doorPaths, readDoorCredentialsText, readDoorRecord, writeDoorRecord, type DoorRecord } from './files';
import { RouteWatch } from './routes';

/** How long a draining door answers what is in flight before it drops the rest, ms. */
export const DOOR_DRAIN_MS = 30_000;
/** How often the credentials file is read again, ms. */
const CREDENTIALS_MS = 2000;

/** What `llmgw node-door` is started with. */
export interface DoorProcessOptions {
  nodeId: string;
  stateDir: string;
  /** Bind this address, or serve the listening socket handed over as this fd (--listen-fd) */
  listen: { host: string; port: number; fd?: number };
  /** Control plane URLs, asked whether a gateway certificate is revoked (empty: signature, dates and role only) */
  servers: readonly string[];
  version: string;
  /** The flags this door was started with but --listen-fd: a replacing door gets the same */
  flags: string[];
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A running door process. */
export interface DoorProcess {
  port: number;
  /** Stops accepting, answers what is in flight, then resolves (the caller exits). */
  drain(): Promise<void>;
  /** Resolves when a control call asked this door to go (after its drain). */
  done: Promise<void>;
}

function readCredentials(stateDir: string): { text: string; tls: TlsCredentials } {
  const text = readDoorCredentialsText(stateDir);
  if (text === null)
    throw new Error(
      `no credentials at ${doorPaths(stateDir).credentials}: the agent writes them before it starts the door (start the agent, not the door)`,
    );
  return { text, tls: JSON.parse(text) as TlsCredentials };
}

/** Starts the door process's door, routes, signals and control listener; writes its record last. */
export async function startDoorProcess(o: DoorProcessOptions): Promise<DoorProcess> {
  let creds = readCredentials(o.stateDir);
  const makeControl = (tls: TlsCredentials): ControlPlanes | null =>
    o.servers.length ? new ControlPlanes({ servers: o.servers, client: controlClient(tls), log: o.log }) : null;
  let control = makeControl(creds.tls);
  const signals = new EngineSignals({ log: o.log });
  const routes = new RouteWatch(o.stateDir, (next, before) => {
    for (const [id, port] of before) if (next.get(id) !== port) signals.untrack(id, `http://127.0.0.1:${port}`);
    for (const [id, port] of next) signals.track(id, 'any', `http://127.0.0.1:${port}`);
    o.log('node door routes', { replicas: Object.fromEntries(next) });
  });
  routes.start();
  signals.start();
  let door: NodeDoor;
  try {
    door = await startNodeDoor({
      nodeId: o.nodeId,
      tls: creds.tls,
      host: o.listen.host,
      port: o.listen.port,
      ...(o.listen.fd !== undefined ? { fd: o.listen.fd } : {}),
      replicaPort: (id) => routes.port(id),
      replicas: () => routes.replicas(),
      signals: () => signals.snapshot(),
      honoured: async (serial) => {
        if (!control) return true;
        const res = await control.fetch(`/v1/agent/certificate-status?serial=${serial}`);
        if (res.status !== 200) throw new Error(`certificate-status answered ${res.status}`);
        return ((await res.json()) as CertificateStatus).honoured;
      },
      log: o.log,
    });
  } catch (err) {
    routes.stop();
    signals.stop();
    await control?.close();
    throw err;
  }

  // Renewals: the agent rewrites the file; from the next connection on the door serves the new certificate.
  const renewals = setInterval(() => {
    const text = readDoorCredentialsText(o.stateDir);
    if (text === null || text === creds.text) return;
    try {
      creds = { text, tls: JSON.parse(text) as TlsCredentials };
      door.useCredentials(creds.tls);
      const old = control;
      control = makeControl(creds.tls);
      void old?.close();
      o.log('node door serves the renewed certificate', {});
    } catch (err) {
      o.log('node door: the credentials file cannot be read; serving the old certificate', {
        level: 'warn',
        error: (err as Error).message,
      });
    }
  }, CREDENTIALS_MS);

  let draining: Promise<void> | null = null;
  let finished = (): void => undefined;
  const done = new Promise<void>((r) => (finished = r));
  const drain = (): Promise<void> =>
    (draining ??= (async () => {
      clearInterval(renewals);
      o.log('node door draining', { inFlight: door.inFlight() });
      await door.drain(DOOR_DRAIN_MS);
      routes.stop();
      signals.stop();
      await control?.close();
      await controlServer.close();
      o.log('node door drained', {});
    })());

  const token = randomBytes(24).toString('hex');
  const replace = async (argv: string[]): Promise<number> => {
    const fd = door.listeningFd();
    if (fd === null) throw new Error('this door cannot hand its listening socket over on this platform');
    const [bin, ...pre] = argv;
    if (!bin) throw new Error('replace: no argv');
    const out = openSync(doorPaths(o.stateDir).log, 'a');
    const env = { ...process.env };
    delete env[EXIT_WITH_PARENT];
    const child = spawn(bin, [...pre, ...o.flags, '--listen-fd', '3'], {
      detached: true,
      stdio: ['ignore', out, out, fd],
      env,
    });
    closeSync(out);
    child.unref();
    const pid = child.pid;
    if (pid === undefined) throw new Error('the replacing door did not start');
    const exited = { code: null as number | null };
    child.once('exit', (code) => (exited.code = code ?? -1));
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (readDoorRecord(o.stateDir)?.pid === pid) return pid;
      if (exited.code !== null)
        throw new Error(
          `the replacing door exited (code ${exited.code}): ${fileTail(doorPaths(o.stateDir).log, 5).trim()}`,
        );
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error('the replacing door did not serve within 30 s');
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  };

  const answer = (res: ServerResponse, status: number, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  };
  const readBody = async (req: IncomingMessage): Promise<string> => {
    let s = '';
    for await (const c of req) s += String(c);
    return s;
  };
  const control$ = createServer((req, res) => {
    if (req.headers.authorization !== `Bearer ${token}`)
      return answer(res, 401, { error: 'the node door control listener takes its token (door/door.json) only' });
    const path = req.url ?? '';
    if (req.method === 'GET' && path === '/health')
      return answer(res, 200, {
        ok: !draining,
        pid: process.pid,
        version: o.version,
        port: door.port,
        inFlight: door.inFlight(),
        replicas: routes.replicas(),
      });
    if (req.method === 'POST' && path === '/stop') {
      answer(res, 200, { ok: true, pid: process.pid });
      return void drain().then(finished);
    }
    if (req.method === 'POST' && path === '/replace') {
      if (draining) return answer(res, 409, { error: 'this door is already draining' });
      return void readBody(req)
        .then((b) => replace((JSON.parse(b) as { argv: string[] }).argv))
        .then(
          (pid) => {
            o.log('node door replaced', { by: pid });
            answer(res, 200, { ok: true, pid });
            void drain().then(finished);
          },
          (err: Error) => {
            o.log('node door replacement failed; this door serves on', { level: 'error', error: err.message });
            answer(res, 500, { error: err.message });
          },
        );
    }
    answer(res, 404, { error: 'GET /health, POST /stop, POST /replace' });
  });
  await new Promise<void>((resolve, reject) => {
    control$.once('error', reject);
    control$.listen(0, '127.0.0.1', () => resolve());
  });
  const controlServer = {
    close: () =>
      new Promise<void>((r) => {
        control$.close(() => r());
        control$.closeAllConnections();
      }),
  };

  const rec: DoorRecord = {
    pid: process.pid,
    startTime: procStartTime(process.pid) ?? '',
    token,
    version: o.version,
    controlPort: (control$.address() as AddressInfo).port,
    host: o.listen.host,
    port: door.port,
    startedAt: new Date().toISOString(),
  };
  writeDoorRecord(o.stateDir, rec);
  o.log('node door serving', {
    node: o.nodeId,
    port: door.port,
    handedOver: o.listen.fd !== undefined,
    version: o.version,
    pid: process.pid,
  });
  return { port: door.port, drain, done };
}

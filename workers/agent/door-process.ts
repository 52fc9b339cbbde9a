/**
 * The agent's side of the node's door process (workers/node-door): it writes the door's credentials, adopts the
 * door a previous agent left (same pid and start time, its token answers, same build and listener) or starts one,
 * replaces a door of another build new-first (the new door takes over the listening socket, the old one drains),
 * and restarts a door that died (a watchdog, every 250 ms). Its own stop leaves the door serving, unless the
 * node's engines stop with the agent (`--stop-engines-on-exit`).
 */
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync } from 'node:fs';
import { sameProcess } from '../../lib/engine-state';
import { LlmgwError } from '../../lib/errors';
import { EXIT_WITH_PARENT, fileTail } from '../../lib/process';
import type { TlsCredentials } from '../../lib/tls-client';
import {
  doorPaths,
  doorVersion,
  nodeDoorArgv,
  readDoorRecord,
  writeDoorCredentials,
  type DoorRecord,
} from '../node-door/files';

/** How often the watchdog looks at the door, ms. */
const WATCH_MS = 250;
/** How long a door may take to serve after it was started, ms (tsx compiles on a cold start; a release does not). */
const START_MS = 30_000;

/** The door process as the agent sees it. */
export interface AgentDoorProcess {
  port: number;
  pid(): number;
  useCredentials(tls: TlsCredentials): void;
  /** Replaces the door by one of this build, new-first; resolves once the new one serves. */
  replace(): Promise<void>;
  /** Stops the watchdog; with `stopDoor`, also the door (after it answers what is in flight). */
  close(o: { stopDoor: boolean }): Promise<void>;
}

/** Options of startAgentDoorProcess. */
export interface AgentDoorProcessOptions {
  nodeId: string;
  stateDir: string;
  listen: { host: string; port: number };
  servers: readonly string[];
  tls: TlsCredentials;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** The door's argv prefix and build (tests); default this build's */
  argv?: string[];
  version?: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Asks the door `rec` names: its health answer, or null when it is not that door or does not answer. */
async function control(
  rec: DoorRecord,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  timeoutMs = 2000,
): Promise<Record<string, unknown> | null> {
  try {
    const res = await fetch(`http://127.0.0.1:${rec.controlPort}${path}`, {
      method,
      headers: { authorization: `Bearer ${rec.token}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const json = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(String(json.error ?? res.status));
    return json;
  } catch (err) {
    if (path === '/health') return null;
    throw err;
  }
}

/**
 * The door the record names, when it is alive, is that door (pid, start time, token) and serves. While its process
 * lives it is asked again until it answers (up to START_MS): a door slow to answer on a starved node still holds
 * the port, so a second door started beside it could not listen, and the agent failed its start
 * (LLMGW_DOOR_NOT_STARTED, "the port is taken") with the door serving on unsupervised.
 */
async function liveDoor(stateDir: string): Promise<DoorRecord | null> {
  const rec = readDoorRecord(stateDir);
  if (!rec) return null;
  const deadline = Date.now() + START_MS;
  while (sameProcess(rec.pid, rec.startTime)) {
    const h = await control(rec, 'GET', '/health');
    if (h) return h.pid === rec.pid && h.ok === true ? rec : null;
    if (Date.now() > deadline) return null;
    await sleep(100);
  }
  return null;
}

/** Starts, adopts or replaces the node's door process; see the module comment. */
export async function startAgentDoorProcess(o: AgentDoorProcessOptions): Promise<AgentDoorProcess> {
  const argv = o.argv ?? nodeDoorArgv();
  const version = o.version ?? doorVersion();
  const paths = doorPaths(o.stateDir);
  const listen = `${o.listen.host.includes(':') ? `[${o.listen.host}]` : o.listen.host}:${o.listen.port}`;
  const flags = [
    '--node',
    o.nodeId,
    '--state-dir',
    o.stateDir,
    '--listen',
    listen,
    ...o.servers.flatMap((s) => ['--server', s]),
  ];
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  writeDoorCredentials(o.stateDir, o.tls);

  const spawnDoor = async (): Promise<DoorRecord> => {
    const [bin, ...pre] = argv;
    if (!bin) throw new Error('no node door command');
    const out = openSync(paths.log, 'a');
    const env = { ...process.env };
    // The door outlives the agent: not tied to it as a test's or the local cluster's agent is to its parent.
    delete env[EXIT_WITH_PARENT];
    const child = spawn(bin, [...pre, ...flags], { detached: true, stdio: ['ignore', out, out], env });
    closeSync(out);
    child.unref();
    const ended = { how: null as string | null };
    child.once('exit', (code, signal) => (ended.how = `exited with code ${code}, signal ${signal}`));
    child.once('error', (err) => (ended.how = err.message));
    const deadline = Date.now() + START_MS;
    for (;;) {
      const rec = readDoorRecord(o.stateDir);
      if (rec && rec.pid === child.pid && sameProcess(rec.pid, rec.startTime)) return rec;
      if (ended.how !== null || Date.now() > deadline) {
        if (ended.how === null) child.kill('SIGKILL');
        const tail = fileTail(paths.log, 5).trim();
        const taken = /EADDRINUSE/.test(tail);
        throw new LlmgwError(
          'LLMGW_DOOR_NOT_STARTED',
          `node ${o.nodeId}'s door on ${listen} did not start (${ended.how ?? `no answer within ${START_MS / 1000}s`}): ` +
            (taken
              ? `the port is taken by another process; stop it, or give --door another port (routes name the port: keep it fixed after)`
              : `see ${paths.log}; its last lines:\n${tail}`),
          { listen, log: paths.log },
        );
      }
      await sleep(25);
    }
  };

  const sameListener = (rec: DoorRecord): boolean =>
    rec.host === o.listen.host && (o.listen.port === 0 || rec.port === o.listen.port);

  const replaceFrom = async (old: DoorRecord): Promise<DoorRecord> => {
    const r = await control(old, 'POST', '/replace', { argv }, START_MS + 5000);
    const rec = readDoorRecord(o.stateDir);
    if (!r || !rec || rec.pid !== r.pid) throw new Error('the replacing door wrote no record');
    return rec;
  };

  let cur: DoorRecord;
  const found = await liveDoor(o.stateDir);
  if (found && sameListener(found) && found.version === version) {
    cur = found;
    o.log('node door adopted', { pid: cur.pid, port: cur.port, version: cur.version });
  } else if (found && sameListener(found)) {
    cur = await replaceFrom(found);
    o.log('node door replaced by this build, new first', { old: found.pid, pid: cur.pid, version });
  } else {
    if (found) {
      o.log('node door listens elsewhere; stopping it for one on the listener asked for', {
        pid: found.pid,
        port: found.port,
      });
      await control(found, 'POST', '/stop');
      for (let i = 0; i < 400 && sameProcess(found.pid, found.startTime); i++) await sleep(25);
    }
    cur = await spawnDoor();
    o.log('node door started', { pid: cur.pid, port: cur.port, version });
  }

  // The watchdog: a door that died is started again at once (its listener went with it; the port is free).
  let closed = false;
  let busy: Promise<void> | null = null;
  const check = async (): Promise<void> => {
    if (sameProcess(cur.pid, cur.startTime)) return;
    const rec = readDoorRecord(o.stateDir);
    if (rec && rec.pid !== cur.pid && sameProcess(rec.pid, rec.startTime)) {
      cur = rec; // replaced (by this agent or another): follow it
      return;
    }
    const t0 = Date.now();
    o.log('node door died; starting it again', { level: 'warn', pid: cur.pid });
    try {
      cur = await spawnDoor();
      o.log('node door started again', { pid: cur.pid, port: cur.port, ms: Date.now() - t0 });
    } catch (err) {
      o.log('NODE DOOR NOT STARTED again; retrying', { level: 'error', error: (err as Error).message });
    }
  };
  const timer = setInterval(() => {
    if (closed || busy) return;
    busy = check().finally(() => (busy = null));
  }, WATCH_MS);
  timer.unref();

  return {
    port: cur.port,
    pid: () => cur.pid,
    useCredentials: (tls) => writeDoorCredentials(o.stateDir, tls),
    replace: async () => {
      while (busy) await busy;
      const p = replaceFrom(cur).then((rec) => void (cur = rec));
      busy = p.finally(() => (busy = null));
      await p;
    },
    close: async ({ stopDoor }) => {
      closed = true;
      clearInterval(timer);
      while (busy) await busy;
      if (!stopDoor) return void o.log('node door left serving for the next agent', { pid: cur.pid });
      await control(cur, 'POST', '/stop').catch(() => undefined);
      for (let i = 0; i < 1400 && sameProcess(cur.pid, cur.startTime); i++) await sleep(25);
    },
  };
}

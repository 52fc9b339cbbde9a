/**
 * `npm run bench:scale`: what a cluster of N nodes costs llmgw's control path. For each size it brings up a Temporal dev
 * server, a database on a MariaDB server of the run's own, a control plane, a gateway and `llmgw sim-fleet` (N-1 nodes
 * in one process, one more in a second so it can be killed), deploys N×R sim replicas, holds steady state, and prints
 * per component: CPU seconds per second (/proc/PID/stat), RSS, Temporal requests per second by kind (the dev server's
 * own metrics, as its frontend counts them), MySQL queries per second (SHOW GLOBAL STATUS deltas: the server is the run's own, so server-wide is
 * llmgw's), and the time for a placement, a drain of one node and a rebuild after one node's loss. Prints figures,
 * asserts nothing. `npm run bench:scale -- --help`.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import mysql from 'mysql2/promise';
import { stringify } from 'yaml';
import { startTemporalDev, type DevServer } from '../../cli/cluster/temporal-dev';
import { initCa, issueOperatorCertificate, issueServerCertificate } from '../../lib/pki';
import { QUEUES, workflowIds } from '../../lib/names';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { TlsClient } from '../../lib/tls-client';
import { parseNodeId } from '../../lib/types';
import { scaleUpdate } from '../../workflows/contracts/model';
import { fleetCatalog, FLEET_MODEL_REPLICAS } from '../../workers/sim-fleet/catalog';
import { fleetNodeId } from '../../workers/sim-fleet';
import { spawnLlmgw, untilLogged, type LlmgwProc } from '../helpers/llmgw-process';
import { freePort } from '../helpers/ports';
import { startPrivateMariadb } from '../helpers/private-mariadb';
import { parsePromText } from '../helpers/prom-text';
import { TEST_API_KEY } from '../helpers/test-key';

const USAGE = `npm run bench:scale -- [--sizes 50,100,200,500,1000] [--per-node 5] [--gpus 6] [--hold 30] [--budget 10] [--fleet-proc 1]
  --sizes     node counts, smallest first (default 50,100,200,500,1000)
  --per-node  replicas per node (default 5): N×R sim replicas of one GPU each, 50 per model
  --gpus      fake GPUs per node (default per-node + 1: one free GPU per node for a placement, drain and rebuild)
  --hold      seconds of steady state measured per size (default 30)
  --budget    minutes: no new size is started past this (default 10); a size whose replicas are not all ready
              within its deadline ends the sweep (that is the knee)
  --fleet-proc  spread the fleet's nodes over this many child processes (llmgw sim-fleet --fleet-proc; default 1:
              all in one); the children's CPU and memory count as the fleet's
  --logs      a directory to keep each process's output in, per size (N-control-plane.log, N-gateway.log,
              N-fleet.log, N-victim.log): what a stuck replica's node or the control plane said
  --fleet-verbose  the fleet logs every node's lines (sim-fleet --verbose: each shard started, adopted, stopped),
              not only warnings and errors; with --logs`;

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '50,100,200,500,1000' },
    'per-node': { type: 'string', default: '5' },
    gpus: { type: 'string' },
    hold: { type: 'string', default: '30' },
    budget: { type: 'string', default: '10' },
    'fleet-proc': { type: 'string', default: '1' },
    logs: { type: 'string' },
    'fleet-verbose': { type: 'boolean' },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
const SIZES = values.sizes.split(',').map(Number);
const PER_NODE = Number(values['per-node']);
const GPUS = values.gpus ? Number(values.gpus) : PER_NODE + 1;
const HOLD_S = Number(values.hold);
const FLEET_PROC = Number(values['fleet-proc']);
const BUDGET_MS = Number(values.budget) * 60_000;
const LOGS = values.logs ?? null;
if (LOGS) mkdirSync(LOGS, { recursive: true });
if (
  SIZES.some((n) => !Number.isInteger(n) || n < 2) ||
  !(PER_NODE >= 1) ||
  GPUS <= PER_NODE ||
  !(HOLD_S > 0) ||
  !(Number.isInteger(FLEET_PROC) && FLEET_PROC >= 1)
)
  throw new Error(`bad flags: sizes ≥ 2, per-node ≥ 1, gpus > per-node, hold > 0, fleet-proc ≥ 1\n${USAGE}`);

const TICK = 100; // USER_HZ
const say = (s: string): void => void process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${s}\n`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** utime+stime in seconds and RSS in MiB of `pid`. */
function proc(pid: number): { cpu: number; rss: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
    return { cpu: (Number(f[11]) + Number(f[12])) / TICK, rss };
  } catch {
    return { cpu: 0, rss: 0 };
  }
}

/** Every live process under `pid` (children, their children …), from /proc's parent links. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  for (let todo = [pid]; todo.length;) {
    const next = children.get(todo.pop() as number) ?? [];
    out.push(...next);
    todo.push(...next);
  }
  return out;
}

async function waitUntil<T>(what: string, ms: number, f: () => Promise<T | undefined | false>): Promise<T | null> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await f().catch(() => undefined);
    if (v) return v;
    await sleep(200);
  }
  say(`  gave up waiting for ${what} after ${ms / 1000}s`);
  return null;
}

interface Row {
  nodes: number;
  replicas: number;
  register: number;
  deploy: number | null;
  cpu: Record<string, number>;
  /** CPU milliseconds each component spent per replica during the deploy (catalog applied → all ready) */
  deployCpu: Record<string, number>;
  /** Temporal requests by kind and MySQL statements per replica during the deploy */
  deployTemporal: Record<string, number>;
  deployMysql: Record<string, number>;
  rss: Record<string, number>;
  temporalRps: Record<string, number>;
  mysqlQps: Record<string, number>;
  placement: number | null;
  drain: number | null;
  /** seconds from the victim's kill to its node marked down (the control plane judged it lost) */
  lost: number | null;
  rebuild: number | null;
  note: string;
}

/**
 * Requests llmgw sent Temporal, by kind: the frontend's count only. The dev server counts each request again in the
 * service the frontend forwards it to (a heartbeat in history, a poll in matching: service_name), and its own
 * system workers' polls in the temporal_system namespace; summing every sample, as this did before issue 24's
 * heartbeat change, counted a shard's one heartbeat a second as 2.0.
 */
async function temporalRequests(url: string): Promise<Map<string, number>> {
  const fams = parsePromText(await (await fetch(url)).text());
  const out = new Map<string, number>();
  for (const s of fams.get('service_requests')?.samples ?? []) {
    if (s.labels.service_name !== 'frontend' || s.labels.namespace === 'temporal_system') continue;
    const op = s.labels.operation ?? '?';
    out.set(op, (out.get(op) ?? 0) + s.value);
  }
  return out;
}

async function mysqlStatus(c: mysql.Connection): Promise<Map<string, number>> {
  const [rows] = await c.query<mysql.RowDataPacket[]>(
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions','Com_select','Com_insert','Com_update','Com_delete','Com_replace','Com_insert_select')",
  );
  return new Map(rows.map((r) => [String(r.Variable_name), Number(r.Value)]));
}

async function runSize(n: number, o: { dir: string; mariadbUrl: string; mariadbPid: number }): Promise<Row> {
  const replicas = n * PER_NODE;
  const row: Row = {
    nodes: n,
    replicas,
    register: 0,
    deploy: null,
    cpu: {},
    deployCpu: {},
    deployTemporal: {},
    deployMysql: {},
    rss: {},
    temporalRps: {},
    mysqlQps: {},
    placement: null,
    drain: null,
    lost: null,
    rebuild: null,
    note: '',
  };
  const db = `llmgw_scale_${n}_${Date.now().toString(36)}`;
  const mysqlUrl = o.mariadbUrl.replace(/\/[^/]*$/, `/${db}`);
  const metricsPort = await freePort();
  const temporal: DevServer = await startTemporalDev({
    port: await freePort(),
    uiPort: null,
    dbFile: null,
    metricsPort,
  });
  // Every process of this size, by the role its log is kept under (--logs), stopped in reverse order at the end.
  const procs: { role: string; p: LlmgwProc }[] = [];
  const start = (role: string, args: string[]): LlmgwProc => {
    const p = spawnLlmgw(args);
    procs.push({ role, p });
    return p;
  };
  let client: Client | null = null;
  const pool = await openDatabase(mysqlUrl);
  const store = new Store(pool);
  try {
    const ca = join(o.dir, 'ca');
    const operator = JSON.parse(readFileSync(join(o.dir, 'operator.json'), 'utf8')) as Parameters<
      Store['recordCertificate']
    >[0] & { keyPem: string; certPem: string };
    await store.recordCertificate({
      ...operator,
      notBefore: new Date(operator.notBefore),
      notAfter: new Date(operator.notAfter),
    });
    const listeners = {
      controlPlane: { host: '127.0.0.1', port: await freePort() },
      gateway: { host: '127.0.0.1', port: await freePort() },
      temporalDoor: { host: '127.0.0.1', port: await freePort() },
    };
    const configFile = join(o.dir, `server-${n}.yaml`);
    writeFileSync(
      configFile,
      stringify({
        temporal: { address: temporal.address },
        mysql: { url: mysqlUrl },
        listeners,
        tls: {
          ca: join(ca, 'ca.crt'),
          serverCert: join(o.dir, 'server.crt'),
          serverKey: join(o.dir, 'server.key'),
          clientCert: join(o.dir, 'operator.crt'),
          clientKey: join(o.dir, 'operator.key'),
        },
        gateway: { apiKeys: [TEST_API_KEY] },
        enginePorts: { base: 22000, count: 20 },
        catalog: [],
      }),
    );
    const cp = start('control-plane', ['control-plane', '--config', configFile, '--no-apply']);
    await untilLogged(cp, 'control plane listening', 120_000, 'the control plane');
    const gw = start('gateway', ['gateway', '--config', configFile]);
    const fleetArgs = [
      '--gpus',
      String(GPUS),
      '--config',
      configFile,
      '--ca-dir',
      ca,
      '--state-dir',
      join(o.dir, 'fleet'),
    ];
    const t0 = Date.now();
    const spread = [
      ...(FLEET_PROC > 1 ? ['--fleet-proc', String(FLEET_PROC)] : []),
      ...(values['fleet-verbose'] ? ['--verbose'] : []),
    ];
    const fleet = start('fleet', ['sim-fleet', '--nodes', String(n - 1), ...spread, ...fleetArgs]);
    const victim = start('victim', ['sim-fleet', '--nodes', '1', '--first', String(n - 1), ...fleetArgs]);
    await untilLogged(victim, 'sim-fleet running', 600_000, 'the victim node');
    await untilLogged(fleet, 'sim-fleet running', 600_000 + n * 2000, `the fleet of ${n - 1}`);
    row.register = (Date.now() - t0) / 1000;
    say(`  ${n} nodes registered in ${row.register.toFixed(1)} s`);

    const api = new TlsClient({
      caPem: readFileSync(join(ca, 'ca.crt'), 'utf8'),
      certPem: operator.certPem,
      keyPem: operator.keyPem,
    });
    const pids: Record<string, number[]> = {
      'control plane': [cp.child.pid ?? 0],
      Temporal: [temporal.process.pid ?? 0],
      MySQL: [o.mariadbPid],
      gateway: [gw.child.pid ?? 0],
      // With --fleet-proc the fleet's nodes run in child processes of its own: theirs count as the fleet's.
      fleet: [fleet.child.pid ?? 0, victim.child.pid ?? 0].flatMap((p) => [p, ...descendants(p)]),
    };
    const sample = (): Record<string, { cpu: number; rss: number }> =>
      Object.fromEntries(
        Object.entries(pids).map(([k, ps]) => {
          const s = ps.map(proc);
          return [k, { cpu: s.reduce((a, b) => a + b.cpu, 0), rss: s.reduce((a, b) => a + b.rss, 0) }];
        }),
      );
    const catalog = fleetCatalog(replicas);
    const my = await mysql.createConnection(o.mariadbUrl);
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    const [d0, dt0, dm0] = [sample(), await temporalRequests(metricsUrl), await mysqlStatus(my)];
    const t1 = Date.now();
    const applied = await api.fetch(`https://127.0.0.1:${listeners.controlPlane.port}/v1/catalog/apply`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ catalog, prune: false, dryRun: false }),
    });
    if (applied.status !== 200) throw new Error(`catalog apply answered ${applied.status}: ${await applied.text()}`);
    const readyCount = async (): Promise<number> =>
      (await store.listReplicas()).filter((r) => r.state === 'ready').length;
    let last = 0;
    const allReady = await waitUntil(`${replicas} replicas ready`, 120_000 + replicas * 600, async () => {
      const c = await readyCount();
      if (c !== last && Math.floor(c / 250) !== Math.floor(last / 250)) say(`    ${c} of ${replicas} ready`);
      last = c;
      return c === replicas;
    });
    if (!allReady) {
      row.note = `only ${last} of ${replicas} replicas ready after ${(Date.now() - t1) / 1000} s`;
      await my.end();
      return row;
    }
    row.deploy = (Date.now() - t1) / 1000;
    const [d1, dt1, dm1] = [sample(), await temporalRequests(metricsUrl), await mysqlStatus(my)];
    for (const k of Object.keys(pids)) row.deployCpu[k] = (((d1[k]?.cpu ?? 0) - (d0[k]?.cpu ?? 0)) * 1000) / replicas;
    for (const [op, v] of dt1) row.deployTemporal[op] = (v - (dt0.get(op) ?? 0)) / replicas;
    for (const [k, v] of dm1) row.deployMysql[k] = (v - (dm0.get(k) ?? 0)) / replicas;
    say(`  ${replicas} replicas ready in ${row.deploy.toFixed(1)} s; holding ${HOLD_S} s`);
    say(
      `  deploy CPU ms per replica: ${JSON.stringify(row.deployCpu, (_, v: unknown) => (typeof v === 'number' ? Math.round(v * 10) / 10 : v))}`,
    );
    await sleep(5000); // let the start's burst pass

    const [c0, t0r, m0, w0] = [sample(), await temporalRequests(metricsUrl), await mysqlStatus(my), Date.now()];
    await sleep(HOLD_S * 1000);
    const [c1, t1r, m1, w1] = [sample(), await temporalRequests(metricsUrl), await mysqlStatus(my), Date.now()];
    await my.end();
    const secs = (w1 - w0) / 1000;
    for (const k of Object.keys(pids)) {
      row.cpu[k] = ((c1[k]?.cpu ?? 0) - (c0[k]?.cpu ?? 0)) / secs;
      row.rss[k] = c1[k]?.rss ?? 0;
    }
    for (const [op, v] of t1r) {
      const rate = (v - (t0r.get(op) ?? 0)) / secs;
      if (rate >= 0.05) row.temporalRps[op] = rate;
    }
    for (const [k, v] of m1) row.mysqlQps[k] = (v - (m0.get(k) ?? 0)) / secs;
    say(`  steady: cpu ${JSON.stringify(row.cpu)}`);

    // A placement: one more replica of the last model, timed to its placement (state past placing) and to ready.
    const conn = await Connection.connect({ address: temporal.address });
    client = new Client({ connection: conn });
    const lastModel = catalog.at(-1) as (typeof catalog)[number];
    const newId = `${lastModel.name}-${lastModel.replicas}`;
    const tp = Date.now();
    await client.workflow.getHandle(workflowIds.model(lastModel.name)).executeUpdate(scaleUpdate, {
      args: [lastModel.replicas + 1],
    });
    const placed = await waitUntil('the new replica placed', 60_000, async () => {
      const r = (await store.listReplicas(lastModel.name)).find((x) => x.id === newId);
      return r && r.state !== 'placing' && r.shards.length > 0;
    });
    row.placement = placed ? (Date.now() - tp) / 1000 : null;
    say(`  placement of ${newId}: ${row.placement} s`);
    await waitUntil('the new replica ready', 60_000, async () =>
      (await store.listReplicas(lastModel.name)).some((x) => x.id === newId && x.state === 'ready'),
    );

    // A drain of one node (fleet-0000): its replicas move, each replacement serving before its original stops.
    const td = Date.now();
    const drained = await client.workflow
      .execute('drainNode', {
        taskQueue: QUEUES.control,
        workflowId: workflowIds.drain(fleetNodeId(0)),
        args: [{ nodeId: parseNodeId(fleetNodeId(0)), timeoutS: 300 }],
      })
      .then(
        () => true,
        (err: Error) => say(`  drain failed: ${err.message}`),
      );
    row.drain = drained ? (Date.now() - td) / 1000 : null;
    say(`  drain of ${fleetNodeId(0)}: ${row.drain} s`);
    // Back in service, so the loss below has room to rebuild into (one free GPU per node would not hold all of it).
    await store.setNodeState(fleetNodeId(0), 'ready');

    // A node's loss: the victim's process is killed; timed until every replica it held serves elsewhere.
    const victimId = fleetNodeId(n - 1);
    const held = (await store.listReplicas())
      .filter((r) => r.state === 'ready' && r.shards.some((s) => s.nodeId === victimId))
      .map((r) => r.id);
    const tl = Date.now();
    victim.child.kill('SIGKILL');
    const judged = waitUntil(
      `${victimId} judged lost`,
      120_000,
      async () => (await store.nodeState(parseNodeId(victimId))) === 'down',
    ).then((down) => (row.lost = down ? (Date.now() - tl) / 1000 : null));
    const rebuilt = await waitUntil(`the lost node's ${held.length} replicas rebuilt`, 120_000, async () => {
      const rs = await store.listReplicas();
      return held.every((id) => {
        const r = rs.find((x) => x.id === id);
        return r?.state === 'ready' && r.shards.every((s) => s.nodeId !== victimId);
      });
    });
    row.rebuild = rebuilt ? (Date.now() - tl) / 1000 : null;
    await judged;
    say(`  ${victimId} judged lost after ${row.lost} s`);
    say(`  rebuild of ${held.length} replicas after ${victimId}'s loss: ${row.rebuild} s`);
    return row;
  } finally {
    await client?.connection.close().catch(() => undefined);
    for (const { role, p } of procs.reverse()) {
      p.child.kill('SIGTERM');
      const end = Date.now() + 30_000;
      while (p.child.exitCode === null && p.child.signalCode === null && Date.now() < end) await sleep(100);
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
      if (LOGS) writeFileSync(join(LOGS, `${n}-${role}.log`), `${p.lines.join('\n')}\n`);
    }
    await pool.end();
    await temporal.stop();
  }
}

function table(rows: Row[]): string {
  const f = (x: number | null | undefined, d = 2): string => (x === null || x === undefined ? '—' : x.toFixed(d));
  const comps = ['control plane', 'Temporal', 'MySQL', 'gateway', 'fleet'];
  const lines = [
    `| nodes | replicas | ${comps.map((c) => `${c} CPU s/s`).join(' | ')} | ${comps.map((c) => `${c} RSS MiB`).join(' | ')} | Temporal req/s | MySQL q/s | register s | deploy s | placement s | drain s | loss → judged lost s | loss → rebuilt s |`,
    `|${' --- |'.repeat(10 + 2 * comps.length)}`,
  ];
  for (const r of rows) {
    const trps = Object.values(r.temporalRps).reduce((a, b) => a + b, 0);
    lines.push(
      `| ${r.nodes} | ${r.replicas} | ${comps.map((c) => f(r.cpu[c])).join(' | ')} | ${comps.map((c) => f(r.rss[c], 0)).join(' | ')} | ${f(trps, 0)} | ${f(r.mysqlQps.Questions, 0)} | ${f(r.register, 0)} | ${f(r.deploy, 0)} | ${f(r.placement)} | ${f(r.drain, 1)} | ${f(r.lost, 1)} | ${f(r.rebuild, 1)} |${r.note ? ` ${r.note}` : ''}`,
    );
  }
  const kinds = rows.map((r) => {
    const top = Object.entries(r.temporalRps)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 6)
      .map(([k, v]) => `${k} ${v.toFixed(1)}`)
      .join(', ');
    const q = r.mysqlQps;
    const trps = Object.values(r.temporalRps).reduce((a, b) => a + b, 0);
    const dc = comps.map((c) => `${c} ${f(r.deployCpu[c], 1)}`).join(', ');
    const dt = Object.entries(r.deployTemporal)
      .filter(([, v]) => v >= 0.05)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v.toFixed(1)}`)
      .join(', ');
    const dm = r.deployMysql;
    const deploy = `deploy per replica: CPU ms ${dc}; Temporal requests ${dt || '—'}; MySQL statements ${f(dm.Questions, 1)} (select ${f(dm.Com_select, 1)}, insert ${f(dm.Com_insert, 1)}, update ${f(dm.Com_update, 1)}, delete ${f(dm.Com_delete, 1)})`;
    return `- ${r.nodes} nodes: ${deploy}; steady: Temporal req/s by kind: ${top || '—'} (${(trps / r.replicas).toFixed(3)} per replica); MySQL/s: select ${f(q.Com_select, 0)}, insert ${f(q.Com_insert, 0)}, update ${f(q.Com_update, 0)}, delete ${f(q.Com_delete, 0)}`;
  });
  return `${lines.join('\n')}\n\n${kinds.join('\n')}\n`;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-scale-'));
  const mariadb = await startPrivateMariadb(join(dir, 'mariadb'));
  const mariadbPid = Number(readFileSync(join(dir, 'mariadb', 'pid'), 'utf8').trim());
  const started = Date.now();
  const rows: Row[] = [];
  try {
    const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
    const server = issueServerCertificate(ca, 'control-plane', ['127.0.0.1', 'localhost']);
    const op = issueOperatorCertificate(ca, 'operator');
    writeFileSync(join(dir, 'server.crt'), server.certPem);
    writeFileSync(join(dir, 'server.key'), server.keyPem, { mode: 0o600 });
    writeFileSync(join(dir, 'operator.crt'), op.certPem);
    writeFileSync(join(dir, 'operator.key'), op.keyPem, { mode: 0o600 });
    writeFileSync(
      join(dir, 'operator.json'),
      JSON.stringify({
        serial: op.serial,
        cn: op.cn,
        role: op.role,
        notBefore: op.notBefore,
        notAfter: op.notAfter,
        pem: op.certPem,
        certPem: op.certPem,
        keyPem: op.keyPem,
      }),
    );
    mkdirSync(join(dir, 'fleet'), { recursive: true });
    for (const n of SIZES) {
      if (Date.now() - started > BUDGET_MS) {
        say(`budget of ${BUDGET_MS / 60_000} min spent: ${n} nodes and up not run`);
        break;
      }
      say(
        `== ${n} nodes, ${n * PER_NODE} replicas (${Math.ceil((n * PER_NODE) / FLEET_MODEL_REPLICAS)} models), ${GPUS} GPUs each`,
      );
      const row = await runSize(n, { dir, mariadbUrl: mariadb.url, mariadbPid });
      rows.push(row);
      process.stdout.write(`${table(rows.slice(-1))}\n`);
      if (row.note) {
        say(`  ${n} nodes did not reach steady state (${row.note}): the sweep ends here`);
        break;
      }
    }
  } finally {
    await mariadb.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(
    `\n## bench:scale (${PER_NODE} replicas per node, ${GPUS} GPUs, hold ${HOLD_S} s, fleet over ${FLEET_PROC} process${FLEET_PROC > 1 ? 'es' : ''})\n\n${table(rows)}`,
  );
}

void main().then(
  () => process.exit(0),
  (err: Error) => {
    process.stderr.write(`${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);

/**
 * What Temporal's front door costs. (1) Memory: the door alone in its own process (test/bench/door-child.ts, the
 * control plane's gate over MariaDB), its RSS and heap with no node connected, then with 100 node workers
 * connected — 100 real Workers made like a node's (NODE_WORKER_OPTIONS), each on its own NativeConnection with
 * its own node certificate, every poller's long poll open. (2) Latency: the median activity round trip — one
 * activity's completion and the next one's delivery, i.e. the interval between consecutive activity starts of a
 * workflow running echo activities one after another — over 1,000 activities through the door and 1,000 on a
 * direct connection, interleaved in blocks of 100. Real Temporal dev server, loopback.
 * Run: `npm run bench:door`. Not a test: figures, not assertions.
 */
import '../helpers/bench-help'; // --help: the comment above
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { createCaOperations } from '../../activities/ca';
import { makeNodeCsr } from '../../lib/pki';
import { nodeQueue } from '../../lib/names';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import type { TlsCredentials } from '../../lib/tls-client';
import { NODE_WORKER_OPTIONS, nodeConnection } from '../../workers/agent/worker';
import { dropDatabase, startTestTemporal, testMysqlUrl } from '../helpers/cluster-parts';
import type { echoOnNode } from '../helpers/door-workflow';
import { testTls } from '../helpers/tls';

const WORKERS = Number(process.env.WORKERS ?? 100);
const BLOCKS = 10;
const PER_BLOCK = 100;
const quiet = {
  info: () => undefined,
  warn: () => undefined,
  error: console.error,
  debug: () => undefined,
  trace: () => undefined,
  log: () => undefined,
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))] ?? NaN;
};
const mib = (b: number): string => `${(b / 1048576).toFixed(1)} MiB`;

interface Stats {
  rss: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  door: { passed: number; refused: number; open: number };
  tokens: { tokens: number };
}

async function main(): Promise<void> {
  const temporal = await startTestTemporal();
  const mysqlUrl = testMysqlUrl();
  const pool = await openDatabase(mysqlUrl);
  const store = new Store(pool);
  const tlsFiles = testTls();
  const read = (f: string): string => readFileSync(f, 'utf8');
  const tls = { caPem: read(tlsFiles.ca), certPem: read(tlsFiles.serverCert), keyPem: read(tlsFiles.serverKey) };
  // One key, one certificate per node (signing is 5 ms; 100 RSA keys would take half a minute).
  const ops = createCaOperations({ caDir: dirname(tlsFiles.ca), store });
  const { csrPem, keyPem } = makeNodeCsr('bench-0');
  const creds: TlsCredentials[] = [];
  for (let i = 0; i < WORKERS; i++)
    creds.push({
      certPem: (await ops.signNodeCsr({ csrPem, identity: `bench-${i}` })).certPem,
      keyPem,
      caPem: tls.caPem,
    });

  const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', join(__dirname, 'door-child.ts')], {
    env: { ...process.env, DOOR_BENCH: JSON.stringify({ mysqlUrl, upstream: temporal.address, tls }) },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const nextLine = async (): Promise<Record<string, unknown>> =>
    JSON.parse(String((await lines.next()).value)) as Record<string, unknown>;
  const port = Number((await nextLine()).ready);
  const door = `127.0.0.1:${port}`;
  const stats = async (): Promise<Stats> => {
    child.stdin.write('stats\n');
    return (await nextLine()) as unknown as Stats;
  };

  // (1) Memory with 100 node workers connected.
  await sleep(1000);
  const before = await stats();
  const t0 = Date.now();
  const fleet: { worker: Worker; running: Promise<void>; conn: NativeConnection }[] = [];
  for (let i = 0; i < WORKERS; i++) {
    const conn = await nodeConnection({ address: door, namespace: 'default', mtls: true }, creds[i] as TlsCredentials);
    const worker = await Worker.create({
      ...NODE_WORKER_OPTIONS,
      connection: conn,
      taskQueue: nodeQueue(`bench-${i}`),
      activities: { echo: async (s: string) => s },
    });
    fleet.push({ worker, running: worker.run(), conn });
  }
  let open = 0;
  for (let stable = 0; stable < 3; await sleep(1000)) {
    const now = (await stats()).door.open;
    stable = now === open && now >= WORKERS ? stable + 1 : 0;
    open = now;
  }
  const loaded = await stats();
  console.log(
    `Temporal door memory, its own process, ${WORKERS} node workers (real Workers, one NativeConnection and certificate each), connected in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );
  console.log(
    `  open long polls through the door: ${loaded.door.open} (${(loaded.door.open / WORKERS).toFixed(0)} per worker)`,
  );
  console.log(
    `  RSS   ${mib(before.rss)} -> ${mib(loaded.rss)}   (+${mib(loaded.rss - before.rss)}, ${((loaded.rss - before.rss) / WORKERS / 1024).toFixed(0)} KiB per worker)`,
  );
  console.log(
    `  heap  ${mib(before.heapUsed)} -> ${mib(loaded.heapUsed)}   (+${mib(loaded.heapUsed - before.heapUsed)}, ${((loaded.heapUsed - before.heapUsed) / WORKERS / 1024).toFixed(0)} KiB per worker); external +${mib(loaded.external - before.external)}`,
  );
  for (const w of fleet.slice(1)) w.worker.shutdown();
  await Promise.all(fleet.slice(1).map((w) => w.running.catch(() => undefined)));
  for (const w of fleet.slice(1)) await w.conn.close();

  // (2) Latency: consecutive activity starts, through the door (bench-0's worker) and direct.
  const direct = await NativeConnection.connect({ address: temporal.address });
  const starts = { door: [] as number[], direct: [] as number[] };
  const stamp = (side: keyof typeof starts, s: string): string => {
    starts[side].push(performance.now());
    return s;
  };
  const directWorker = await Worker.create({
    ...NODE_WORKER_OPTIONS,
    connection: direct,
    taskQueue: 'node-direct',
    activities: { echo: async (s: string) => stamp('direct', s) },
  });
  const directRunning = directWorker.run();
  const viaDoor = fleet[0] as (typeof fleet)[0];
  viaDoor.worker.shutdown();
  await viaDoor.running.catch(() => undefined);
  const doorWorker = await Worker.create({
    ...NODE_WORKER_OPTIONS,
    connection: viaDoor.conn,
    taskQueue: nodeQueue('bench-0'),
    activities: { echo: async (s: string) => stamp('door', s) },
  });
  const doorRunning = doorWorker.run();
  const { code } = await bundleWorkflowCode({
    workflowsPath: require.resolve('../helpers/door-workflow'),
    logger: quiet,
  });
  const wfConn = await NativeConnection.connect({ address: temporal.address });
  const wfWorker = await Worker.create({ connection: wfConn, taskQueue: 'bench-wf', workflowBundle: { code } });
  const wfRunning = wfWorker.run();
  const client = new Client({ connection: await Connection.connect({ address: temporal.address }) });
  const run = async (queue: string, n: number): Promise<void> =>
    void (await client.workflow.execute<typeof echoOnNode>('echoOnNode', {
      taskQueue: 'bench-wf',
      workflowId: `bench-${queue}-${Date.now()}`,
      args: [queue, 'x', n],
    }));
  await run(nodeQueue('bench-0'), 50);
  await run('node-direct', 50);
  const gaps = { door: [] as number[], direct: [] as number[] };
  for (let b = 0; b < BLOCKS; b++) {
    for (const [side, queue] of [
      ['door', nodeQueue('bench-0')],
      ['direct', 'node-direct'],
    ] as const) {
      starts[side] = [];
      await run(queue, PER_BLOCK + 1);
      const s = starts[side];
      for (let i = 1; i < s.length; i++) gaps[side].push((s[i] as number) - (s[i - 1] as number));
    }
  }
  const { door: d, direct: r } = gaps;
  console.log(
    `Activity round trip (completion + next task's delivery), ${d.length} through the door, ${r.length} direct, interleaved in blocks of ${PER_BLOCK}`,
  );
  console.log(`  through the door  median ${pct(d, 50).toFixed(2)} ms   p90 ${pct(d, 90).toFixed(2)} ms`);
  console.log(`  direct            median ${pct(r, 50).toFixed(2)} ms   p90 ${pct(r, 90).toFixed(2)} ms`);
  console.log(`  the door adds     ${(pct(d, 50) - pct(r, 50)).toFixed(2)} ms per round trip (difference of medians)`);
  // The same through a unary call alone: DescribeNamespace on the worker's own NativeConnection, door vs direct.
  const calls = { door: [] as number[], direct: [] as number[] };
  const describe = async (side: keyof typeof calls, conn: NativeConnection): Promise<void> => {
    const t = performance.now();
    await conn.workflowService.describeNamespace({ namespace: 'default' });
    calls[side].push(performance.now() - t);
  };
  for (let i = 0; i < 100; i++) await describe('door', viaDoor.conn);
  calls.door = [];
  for (let i = 0; i < BLOCKS * PER_BLOCK; i++) {
    await describe('door', viaDoor.conn);
    await describe('direct', direct);
  }
  console.log(
    `One unary call (DescribeNamespace, gzip, on a NativeConnection), ${calls.door.length} each way, interleaved`,
  );
  console.log(
    `  through the door  median ${pct(calls.door, 50).toFixed(3)} ms   p90 ${pct(calls.door, 90).toFixed(3)} ms`,
  );
  console.log(
    `  direct            median ${pct(calls.direct, 50).toFixed(3)} ms   p90 ${pct(calls.direct, 90).toFixed(3)} ms`,
  );
  console.log(
    `  the door adds     ${(pct(calls.door, 50) - pct(calls.direct, 50)).toFixed(3)} ms per call (an activity round trip crosses it twice: the completion and the next poll's answer)`,
  );
  const after = await stats();
  console.log(
    `  door after: ${after.door.passed} calls passed, ${after.door.refused} refused, ${after.tokens.tokens} task tokens held`,
  );

  for (const w of [doorWorker, directWorker, wfWorker]) w.shutdown();
  await Promise.all([doorRunning, directRunning, wfRunning].map((p) => p.catch(() => undefined)));
  for (const c of [viaDoor.conn, direct, wfConn]) await c.close();
  await client.connection.close();
  child.kill();
  await pool.end();
  await dropDatabase(mysqlUrl);
  await temporal.stop();
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});

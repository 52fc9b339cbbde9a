/**
 * Temporal's front door for nodes, with a real Temporal dev server behind it, the real control plane (MariaDB,
 * mTLS) in front, and real node workers connecting with node certificates: a node worker runs a real replica's
 * shard through it (polls, heartbeats, the cancel answer); the same worker on another node's queue is refused; a
 * node certificate may not start or terminate workflows; a task token handed to one node is refused from another;
 * a revoked node's open poll is cut; a Temporal restart behind the door is survived by a node worker.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import http2 from 'node:http2';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { Connection, type Client } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { startTemporalDev, type DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { CertificateGate } from '../../gateway/mtls';
import { TaskTokenMemory, tokenDigest } from '../../gateway/door/task-tokens';
import { POLL_MARGIN_MS, startTemporalDoor } from '../../gateway/door/door';
import { nodeQueue, QUEUES, workflowIds } from '../../lib/names';
import type { TlsCredentials } from '../../lib/tls-client';
import { NODE_WORKER_OPTIONS, nodeConnection } from '../../workers/agent/worker';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { scaleUpdate } from '../../workflows/contracts/model';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { freePort } from '../helpers/ports';
import { certClient } from '../helpers/tls';
import { waitFor } from '../helpers/wait';
import { temporalCredentials } from '../../lib/temporal-connect';
import type { echoOnNode } from '../helpers/door-workflow';

const MODEL = 'door-sim';
const WF_QUEUE = 'door-test-workflows';
const quiet = {
  info: () => undefined,
  warn: () => undefined,
  error: console.error,
  debug: () => undefined,
  trace: () => undefined,
  log: () => undefined,
};

/** A gRPC error's status code and message (grpc-js puts them on the error). */
const grpcError = async (p: Promise<unknown>): Promise<{ code: number; details: string }> => {
  try {
    await p;
  } catch (err) {
    const e = err as { code?: number; details?: string; message: string };
    return { code: e.code ?? -1, details: e.details ?? e.message };
  }
  throw new Error('expected the call to be refused');
};

describe("Temporal's front door for nodes (real Temporal, control plane, node workers)", () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-door-'));
  let port = 0;
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let client: Client;
  let wfConn: NativeConnection;
  let wfWorker: Worker;
  let wfRunning: Promise<void>;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const connections: Connection[] = [];
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];
  const refusals = (cn: string): Record<string, unknown>[] =>
    logs.filter((l) => l.msg === 'temporal call refused' && l.fields.cn === cn).map((l) => l.fields);
  const startTemporal = (): Promise<DevServer> =>
    startTemporalDev({ port, uiPort: null, dbFile: join(dir, 'temporal.db') });

  const creds = async (cn: string, fresh = false): Promise<TlsCredentials> =>
    (await certClient(config, cp.store, cn, { fresh })).cert;
  /** A plain gRPC client (grpc-js) to the door presenting `cn`'s node certificate. */
  const grpcAs = async (c: TlsCredentials, address = cp.door.address): Promise<Connection> => {
    const conn = await Connection.connect({
      address,
      tls: {
        serverNameOverride: 'localhost',
        serverRootCACertificate: Buffer.from(c.caPem),
        clientCertPair: { crt: Buffer.from(c.certPem), key: Buffer.from(c.keyPem) },
      },
    });
    connections.push(conn);
    return conn;
  };
  /** A worker made like a node's (its options, its connection to the door) offering the echo activity. */
  const echoWorker = async (
    cn: string,
  ): Promise<{ worker: Worker; ended: Promise<Error | null>; conn: NativeConnection }> => {
    const conn = await nodeConnection({ address: cp.door.address, namespace: 'default', mtls: true }, await creds(cn));
    const worker = await Worker.create({
      ...NODE_WORKER_OPTIONS,
      connection: conn,
      taskQueue: nodeQueue(cn),
      activities: { echo: async (s: string) => `${cn}:${s}` },
    });
    const ended = worker.run().then(
      () => null,
      (err: Error) => err,
    );
    return { worker, ended, conn };
  };
  const echo = (cn: string, input: string, count = 1): Promise<string> =>
    client.workflow.execute<typeof echoOnNode>('echoOnNode', {
      taskQueue: WF_QUEUE,
      workflowId: `echo-${cn}-${input}-${Date.now()}`,
      args: [nodeQueue(cn), input, count],
      workflowExecutionTimeout: '90s',
    });

  beforeAll(async () => {
    port = await freePort();
    temporal = await startTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://door',
          replicas: 1,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] },
          ],
        },
      ],
    });
    cp = await startControlPlane({
      config,
      workflowBundle: { codePath: await workflowBundlePath() },
      log: (msg, fields) => void logs.push({ msg, fields }),
    });
    client = cp.client;
    // The test's own workflows run on the operator side, straight to Temporal.
    const { code } = await bundleWorkflowCode({
      workflowsPath: require.resolve('../helpers/door-workflow'),
      logger: quiet,
    });
    wfConn = await NativeConnection.connect({ address: temporal.address });
    wfWorker = await Worker.create({ connection: wfConn, taskQueue: WF_QUEUE, workflowBundle: { code } });
    wfRunning = wfWorker.run();
  }, 120_000);

  afterAll(async () => {
    for (const c of connections) await c.close().catch(() => undefined);
    wfWorker?.shutdown();
    await wfRunning?.catch(() => undefined);
    await wfConn?.close();
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL)],
      workers,
      pids,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('a node worker runs a real replica through the door: its own queue polled, the shard heartbeating, its cancel answered', async () => {
    await registerNode(cp, 'na', simInventory({ gpus: 1 }));
    workers.push(await startNodeWorker(cp.door.address, 'na', pids, { cp, door: await creds('na') }));
    const handle = await client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    const ready = await waitFor(async () => (await cp.store.listReplicas(MODEL)).find((r) => r.state === 'ready'), {
      timeoutMs: 60_000,
      what: 'the replica to serve on na',
    });
    expect((await fetch(`${ready.endpoint}/health`)).status).toBe(200);
    // The running shard holds the one task token the door handed to na.
    expect(cp.door.tokens.stats()).toMatchObject({ tokens: 1, nodes: 1 });
    await handle.executeUpdate(scaleUpdate, { args: [0] });
    await waitFor(
      async () =>
        (await cp.store.listReplicas(MODEL)).every((r) => r.state === 'stopped') && cp.door.tokens.stats().tokens === 0,
      { timeoutMs: 30_000, what: 'the replica stopped and its token forgotten after the cancel answer' },
    );
    expect(refusals('na')).toEqual([]);
  });

  test("the same worker pointed at another node's queue is refused, and says so", async () => {
    const before = logs.length;
    const w = await startNodeWorker(cp.door.address, 'na', pids, { door: await creds('na'), queue: nodeQueue('nb') });
    workers.push(w);
    const reason = 'node na may poll only its own queue node-na, not "node-nb"';
    const line = await waitFor(
      () =>
        logs
          .slice(before)
          .find((l) => l.msg === 'temporal call refused' && l.fields.method === 'PollActivityTaskQueue'),
      { timeoutMs: 15_000, what: "the door to refuse na's poll of node-nb" },
    );
    expect(line.fields).toEqual({ cn: 'na', method: 'PollActivityTaskQueue', reason });
    // What that worker is told, on every poll (the SDK fails the worker after a minute of refused polls).
    const raw = await grpcAs(await creds('na'));
    const refused = await grpcError(
      raw.withDeadline(Date.now() + 10_000, () =>
        raw.workflowService.pollActivityTaskQueue({ namespace: 'default', taskQueue: { name: nodeQueue('nb') } }),
      ),
    );
    expect(refused).toEqual({
      code: 7,
      details: `LLMGW_TEMPORAL_CALL_REFUSED: PollActivityTaskQueue refused for node na: ${reason}`,
    });
    await w.stop();
  });

  test('a node certificate may not start, signal or terminate a workflow (PERMISSION_DENIED, named in the log)', async () => {
    const conn = await grpcAs(await creds('na'));
    const started = await grpcError(
      conn.workflowService.startWorkflowExecution({
        namespace: 'default',
        workflowId: 'from-a-node',
        workflowType: { name: 'modelDeployment' },
        taskQueue: { name: QUEUES.control },
        requestId: 'door-test-1',
      }),
    );
    expect(started.code).toBe(7);
    expect(started.details).toMatch(
      /^LLMGW_TEMPORAL_CALL_REFUSED: StartWorkflowExecution refused for node na: not a call a node's worker makes/,
    );
    const execution = { workflowId: workflowIds.model(MODEL) };
    for (const call of [
      conn.workflowService.terminateWorkflowExecution({
        namespace: 'default',
        workflowExecution: execution,
        reason: 'a node tries',
      }),
      conn.workflowService.signalWorkflowExecution({
        namespace: 'default',
        workflowExecution: execution,
        signalName: 'replace',
      }),
      conn.workflowService.pollWorkflowTaskQueue({ namespace: 'default', taskQueue: { name: QUEUES.control } }),
      conn.workflowService.respondActivityTaskCompletedById({ namespace: 'default', workflowId: 'x', activityId: '1' }),
    ])
      expect((await grpcError(call)).code).toBe(7);
    expect(refusals('na').map((r) => r.method)).toEqual(
      expect.arrayContaining([
        'StartWorkflowExecution',
        'TerminateWorkflowExecution',
        'SignalWorkflowExecution',
        'PollWorkflowTaskQueue',
        'RespondActivityTaskCompletedById',
      ]),
    );
    // The workflow a node tried to terminate runs on.
    expect((await client.workflow.getHandle(workflowIds.model(MODEL)).describe()).status.name).toBe('RUNNING');
  });

  test("an operator certificate passes unread; a node's poll ends at Temporal POLL_MARGIN_MS before its own deadline", async () => {
    const op = await grpcAs((await certClient(config, cp.store, 'door-operator', { role: 'operator' })).cert);
    const d = await op.workflowService.describeWorkflowExecution({
      namespace: 'default',
      execution: { workflowId: workflowIds.model(MODEL) },
    });
    expect(d.workflowExecutionInfo?.type?.name).toBe('modelDeployment');
    const na = await grpcAs(await creds('na'));
    const t0 = Date.now();
    // Temporal ends a long poll empty a second before the deadline it was given. The door gives it the node's
    // deadline less POLL_MARGIN_MS (5 s), so a 12 s poll ends empty after ~6 s — not after ~11 s as it would with the
    // node's own deadline, and not after a minute: the answer, were it a task, reaches the node well in time.
    const ended = await na
      .withDeadline(Date.now() + 12_000, () =>
        na.workflowService.pollActivityTaskQueue({ namespace: 'default', taskQueue: { name: nodeQueue('na') } }),
      )
      .then(
        (r) => ({ code: 0, tokenBytes: r.taskToken?.length ?? 0 }),
        (err: { code?: number; details?: string }) => ({ code: err.code, tokenBytes: 0, details: err.details }),
      );
    const took = Date.now() - t0;
    expect(ended).toEqual({ code: 0, tokenBytes: 0 });
    expect(took).toBeGreaterThan(3000);
    expect(took).toBeLessThan(12_000 - POLL_MARGIN_MS + 1500);
  });

  test("a node's gzip call reaches Temporal gunzipped, so its answer comes back uncompressed; an operator's stays gzip", async () => {
    // DescribeNamespaceRequest { namespace: "default" } (field 1, a string), gzipped as the native client sends it.
    const describe = Buffer.concat([Buffer.from([0x0a, 7]), Buffer.from('default')]);
    const call = async (c: TlsCredentials): Promise<{ status: unknown; encoding: unknown; flag: number }> => {
      const session = http2.connect(`https://${cp.door.address}`, {
        ca: c.caPem,
        cert: c.certPem,
        key: c.keyPem,
        servername: 'localhost',
      });
      try {
        const zipped = gzipSync(describe);
        const head = Buffer.alloc(5);
        head[0] = 1;
        head.writeUInt32BE(zipped.length, 1);
        const stream = session.request({
          ':method': 'POST',
          ':path': '/temporal.api.workflowservice.v1.WorkflowService/DescribeNamespace',
          'content-type': 'application/grpc',
          te: 'trailers',
          'grpc-encoding': 'gzip',
          'grpc-accept-encoding': 'gzip,identity',
        });
        const chunks: Buffer[] = [];
        const got = new Promise<{ status: unknown; encoding: unknown; flag: number }>((resolve, reject) => {
          let encoding: unknown;
          stream.on('response', (h) => void (encoding = h['grpc-encoding']));
          stream.on('data', (b: Buffer) => chunks.push(b));
          stream.on('trailers', (t) => resolve({ status: t['grpc-status'], encoding, flag: chunks[0]?.[0] ?? -1 }));
          stream.on('error', reject);
        });
        stream.end(Buffer.concat([head, zipped]));
        return await got;
      } finally {
        session.close();
      }
    };
    expect(await call(await creds('nz'))).toEqual({ status: '0', encoding: undefined, flag: 0 });
    const op = (await certClient(config, cp.store, 'door-operator', { role: 'operator' })).cert;
    expect(await call(op)).toEqual({ status: '0', encoding: 'gzip', flag: 1 });
  });

  test('a task token handed to node A is refused from node B, and accepted from A', async () => {
    const a = await grpcAs(await creds('ta'));
    const b = await grpcAs(await creds('tb'));
    const run = echo('ta', 'replay');
    const task = await a.withDeadline(Date.now() + 30_000, () =>
      a.workflowService.pollActivityTaskQueue({
        namespace: 'default',
        taskQueue: { name: nodeQueue('ta') },
        identity: 'raw-ta',
      }),
    );
    expect(task.taskToken?.length).toBeGreaterThan(0);
    const result = {
      payloads: [
        { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from(JSON.stringify('answered by ta')) },
      ],
    };
    const stolen = await grpcError(
      b.workflowService.respondActivityTaskCompleted({ namespace: 'default', taskToken: task.taskToken, result }),
    );
    expect(stolen.code).toBe(7);
    expect(stolen.details).toContain('with a task token this door never handed to tb');
    expect(
      (
        await grpcError(
          b.workflowService.recordActivityTaskHeartbeat({ namespace: 'default', taskToken: task.taskToken }),
        )
      ).code,
    ).toBe(7);
    await a.workflowService.recordActivityTaskHeartbeat({ namespace: 'default', taskToken: task.taskToken });
    await a.workflowService.respondActivityTaskCompleted({ namespace: 'default', taskToken: task.taskToken, result });
    expect(await run).toBe('answered by ta');
    // Completed, the token is forgotten: not even A may use it again.
    expect(
      (
        await grpcError(
          a.workflowService.recordActivityTaskHeartbeat({ namespace: 'default', taskToken: task.taskToken }),
        )
      ).code,
    ).toBe(7);
    expect(refusals('tb')).toContainEqual(expect.objectContaining({ method: 'RespondActivityTaskCompleted' }));
  });

  test("a restarted door (new memory, the same MySQL) takes A's task token from A and still refuses it from B", async () => {
    const a = await grpcAs(await creds('ra'));
    const run = echo('ra', 'restart');
    const task = await a.withDeadline(Date.now() + 30_000, () =>
      a.workflowService.pollActivityTaskQueue({
        namespace: 'default',
        taskQueue: { name: nodeQueue('ra') },
        identity: 'raw-ra',
      }),
    );
    const token = task.taskToken as Uint8Array;
    await waitFor(() => cp.store.hasTaskToken('ra', tokenDigest(token)), {
      timeoutMs: 5000,
      what: 'the token recorded in MySQL',
    });
    // What a restarted control plane runs: a gate and a door of its own, nothing in memory.
    const read = (f: string): string => readFileSync(f, 'utf8');
    const gate = new CertificateGate({
      caPem: read(config.tls.ca),
      log: () => undefined,
      lookup: {
        bySerial: async (s) => {
          const c = await cp.store.certificateBySerial(s);
          return c && { cn: c.cn, role: c.role, revokedAt: c.revokedAt };
        },
        revokedSerials: async () => (await cp.store.revokedSerials()).map((r) => r.serial),
      },
    });
    await gate.start();
    const restarted = await startTemporalDoor({
      host: '127.0.0.1',
      port: 0,
      upstream: temporalCredentials(config.temporal),
      namespace: 'default',
      gate,
      log: (msg, fields) => void logs.push({ msg, fields }),
      tls: { caPem: read(config.tls.ca), certPem: read(config.tls.serverCert), keyPem: read(config.tls.serverKey) },
      tokens: new TaskTokenMemory({ backing: cp.store }),
    });
    try {
      const b2 = await grpcAs(await creds('rb'), restarted.address);
      expect(
        (await grpcError(b2.workflowService.recordActivityTaskHeartbeat({ namespace: 'default', taskToken: token })))
          .code,
      ).toBe(7);
      const a2 = await grpcAs(await creds('ra'), restarted.address);
      await a2.workflowService.recordActivityTaskHeartbeat({ namespace: 'default', taskToken: token });
      await a2.workflowService.respondActivityTaskCompleted({
        namespace: 'default',
        taskToken: token,
        result: {
          payloads: [{ metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('"after the restart"') }],
        },
      });
      expect(await run).toBe('after the restart');
      await waitFor(async () => !(await cp.store.hasTaskToken('ra', tokenDigest(token))), {
        timeoutMs: 5000,
        what: "the completed task's token gone from MySQL",
      });
    } finally {
      await restarted.close();
      gate.stop();
    }
  });

  test("a revoked node's open poll is cut at once, and its worker is refused after", async () => {
    const raw = await grpcAs(await creds('nc', true));
    const w = await echoWorker('nc');
    expect(await echo('nc', 'before')).toBe('nc:before#0');
    const poll = grpcError(
      raw.withDeadline(Date.now() + 70_000, () =>
        raw.workflowService.pollActivityTaskQueue({
          namespace: 'default',
          taskQueue: { name: nodeQueue('nc') },
          identity: 'raw-nc',
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, 500));
    const operator = await certClient(config, cp.store, 'door-operator', { role: 'operator' });
    const at = Date.now();
    const res = await operator.fetch(`${cp.url}/v1/nodes/nc/revoke`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'door test' }),
    });
    expect(res.status).toBe(200);
    // A long poll ends after a minute; this one ends at once: its connection is cut (UNAVAILABLE), and the client's
    // own retry on a new connection is refused (PERMISSION_DENIED, revoked).
    const cut = await poll;
    expect(Date.now() - at).toBeLessThan(3000);
    expect([14, 7]).toContain(cut.code);
    if (cut.code === 7) expect(cut.details).toContain('(revoked)');
    expect(logs).toContainEqual({
      msg: 'certificate refused',
      fields: expect.objectContaining({ reason: 'revoked', detail: 'revoked while connected: connection closed' }),
    });
    const again = await grpcError(raw.workflowService.getSystemInfo({}));
    expect(again.code).toBe(7);
    expect(again.details).toMatch(/^LLMGW_CERT_REFUSED: client certificate refused \(revoked\)/);
    // The worker's own connection was cut too; each time it comes back it is refused.
    await waitFor(
      () =>
        logs.some(
          (l) =>
            l.msg === 'temporal call refused' &&
            l.fields.cn === 'nc' &&
            l.fields.reason === 'revoked' &&
            l.fields.method === 'PollActivityTaskQueue',
        ),
      { timeoutMs: 20_000, what: "the revoked worker's polls to be refused" },
    );
    w.worker.shutdown();
    await w.ended;
    await w.conn.close();
  });

  test('a Temporal restart behind the door is survived by a node worker', async () => {
    const w = await echoWorker('nd');
    expect(await echo('nd', 'before')).toBe('nd:before#0');
    await temporal.stop();
    temporal = await startTemporal();
    expect(await echo('nd', 'after', 3)).toBe('nd:after#2');
    const still = await Promise.race([w.ended, new Promise((r) => setTimeout(() => r('running'), 100))]);
    expect(still).toBe('running');
    w.worker.shutdown();
    await w.ended;
    await w.conn.close();
  }, 90_000);
});

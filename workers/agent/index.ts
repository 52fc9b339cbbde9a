/**
 * The node agent: discovers the node, registers and heartbeats with the control plane, runs the node worker on
 * `node-<id>`, and at start collects engines a previous agent left that no shard wants.
 */
import { accessSync, constants, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createNodeActivities } from '../../activities/node';
import { createEngineSetup } from '../../activities/node/engine-setup';
import type { OperatorBins } from '../../lib/engines/install';
import { collectOrphans, type AssignedShard, type Collection } from '../../activities/node/gc';
import { doctorColumn, runDoctor } from '../../lib/doctor';
import { discoverFabricIdentity } from '../../lib/fabrics';
import { readCpuFlags } from '../../lib/hardware/cpu';
import { runCommand } from '../../lib/hardware/exec';
import { ensureSminfo } from '../../lib/hardware/ibdiags';
import { readIbAdapters } from '../../lib/hardware/infiniband';
import { queryGpus } from '../../lib/hardware/nvidia';
import { LlmgwError } from '../../lib/errors';
import { certificateInfo, makeNodeCsr, renewAt } from '../../lib/pki';
import { TlsClient, type TlsCredentials } from '../../lib/tls-client';
import type { NodeTemporal, RenewedCertificate } from '../../gateway/control/contract';
import { nodeQueue } from '../../lib/names';
import { startNodeWeights } from './weights';
import { simEngineArgv } from '../../lib/sim/argv';
import type { EngineName, NodeId, NodeInventory } from '../../lib/types';

export interface AgentOptions {
  nodeId: NodeId;
  /** Control plane base URL, e.g. https://127.0.0.1:7443 */
  server: string;
  /** This node's client certificate (CN = node id), its key and the cluster CA (`--cert`, `--key`, `--ca`) */
  tls: TlsCredentials;
  /** Where a renewed certificate and its new key are written (the `--cert`/`--key` files), so a restart uses them */
  certFiles?: { cert: string; key: string };
  nvidiaSmi: string;
  /** sysfs root holding class/infiniband */
  ibRoot: string;
  /** sminfo (infiniband-diags) to read each declared port's subnet manager with (`--sminfo`; default `sminfo` on PATH) */
  sminfo?: string;
  cpuinfo: string;
  /** `--fabric` values as given */
  fabrics: string[];
  /** Address the gateway and other ranks reach this node's engines on */
  advertiseHost: string;
  /** The weights cache (`--weights-dir`) and where peers fetch from it (`--weights-listen`); absent: no URL sources here */
  weights?: { dir: string; listen: { host: string; port: number } };
  /** Where and from what the engines server.yaml names are installed (`--engines-dir`, `--llamacpp-bin`, …) */
  engineSetup: { enginesDir: string; bins: OperatorBins; wheelhouse?: string; python?: string };
  /** A node declared to have no GPU: skip nvidia-smi */
  noGpu: boolean;
  /** Where engines are recorded, so the next agent adopts them (`--state-dir`) */
  stateDir: string;
  /** Stop the engines when the agent stops, instead of leaving them for the next agent (the local cluster) */
  stopEnginesOnExit: boolean;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface Agent {
  inventory: NodeInventory;
  close(): Promise<void>;
}

/**
 * Everything the node reports about itself, with its fabrics' subnet-manager identity and its `llmgw doctor`
 * results. Fails loudly when nvidia-smi is missing or fails, and refuses (LLMGW_BAD_REQUEST, LLMGW_FABRIC_SPLIT)
 * a --fabric naming a missing, down or RoCE adapter, one adapter under two fabrics, or one fabric whose ports see
 * different subnet managers. Failed doctor checks are reported, not refused.
 */
export async function discover(opts: Omit<AgentOptions, 'tls' | 'engineSetup'>, engines?: EngineName[]): Promise<NodeInventory> {
  const gpuQuery = opts.noGpu ? null : await queryGpus(opts.nvidiaSmi, runCommand);
  if (gpuQuery?.kind === 'failed') throw new LlmgwError('LLMGW_NVIDIA_SMI_FAILED', `${gpuQuery.reason} (or pass --no-gpu for a node that has none)`);
  const gpus = gpuQuery?.gpus ?? [];
  const adapters = await readIbAdapters(opts.ibRoot);
  const sminfo = opts.sminfo ?? (await findSminfo(opts));
  const found = await discoverFabricIdentity({ flags: opts.fabrics, adapters, ibRoot: opts.ibRoot, sminfo, run: runCommand });
  if (found.kind === 'refused') throw new LlmgwError(found.error.code, `agent not started: ${found.error.message}`, found.error.context);
  for (const w of found.warnings) opts.log('fabric identity warning', { warning: w });
  const cpuFlags = await readCpuFlags(opts.cpuinfo);
  const doctor = await runDoctor({
    nvidiaSmi: opts.noGpu ? null : opts.nvidiaSmi, fabrics: opts.fabrics, sysRoot: opts.ibRoot, cpuinfo: opts.cpuinfo, sminfo, ...(engines ? { engines } : {}),
    known: { adapters, fabrics: found, ...(gpuQuery ? { gpus: gpuQuery } : {}) },
  });
  for (const r of doctor.filter((d) => d.status !== 'pass')) opts.log(`doctor: ${r.status} ${r.id}`, { summary: r.summary, fix: r.fix });
  opts.log('doctor', { checks: doctorColumn(doctor) });
  return { gpus, adapters, fabrics: found.fabrics, fabricIdentity: found.fabricIdentity, doctor, cpuFlags, engines: engines ?? [], host: opts.advertiseHost };
}

/**
 * sminfo for a node that declares fabrics: on PATH, or installed now (infiniband-diags) when the agent runs as
 * root; else a warning, and the fabric identity falls back to "declared only" (sminfo then fails to run).
 */
async function findSminfo(opts: Pick<AgentOptions, 'fabrics' | 'log'>): Promise<string> {
  if (opts.fabrics.length === 0) return 'sminfo';
  const r = await ensureSminfo({ path: process.env.PATH ?? '', root: process.getuid?.() === 0, run: (c, a) => runCommand(c, a, { timeoutMs: 300_000 }), log: opts.log });
  if (r.kind === 'found') return r.path;
  opts.log('fabric identity warning', { warning: r.why });
  return 'sminfo';
}

/** The shards the control plane at `server` has placed on node `nodeId` (asked over `client`'s mTLS). */
export async function assignedShards(client: TlsClient, server: string, nodeId: string): Promise<AssignedShard[]> {
  const res = await client.fetch(`${server}/v1/agent/shards?node=${encodeURIComponent(nodeId)}`, { signal: AbortSignal.timeout(5000) });
  if (res.status !== 200) throw new Error(`GET /v1/agent/shards answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { shards: AssignedShard[] }).shards;
}

/** Creates the state dir; fails at start, naming the flag, rather than at the first shard. */
function ensureStateDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new LlmgwError('LLMGW_BAD_REQUEST', `--state-dir ${dir} is not a writable directory (${(err as Error).message}); pass --state-dir DIR the agent may write to`);
  }
}

async function post<T>(client: TlsClient, url: string, body: unknown): Promise<{ status: number; body: T }> {
  const res = await client.fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as T };
}

interface Registration { temporal: NodeTemporal; heartbeatMs: number }

/**
 * The connection of the node's worker: to Temporal's front door with the node's certificate (mtls), trusting the
 * door by the cluster CA; plain only where the control plane says the node may reach Temporal itself (tests).
 */
export function nodeConnection(temporal: NodeTemporal, tls: TlsCredentials): Promise<NativeConnection> {
  return NativeConnection.connect({
    address: temporal.address,
    ...(temporal.mtls ? { tls: { serverRootCACertificate: Buffer.from(tls.caPem), clientCertPair: { crt: Buffer.from(tls.certPem), key: Buffer.from(tls.keyPem) } } } : {}),
  });
}

/** Registers, retrying with backoff while the control plane is unreachable. */
async function register(client: TlsClient, opts: AgentOptions, inventory: NodeInventory, stopped: () => boolean): Promise<Registration> {
  let delay = 250;
  for (;;) {
    try {
      const r = await post<Registration & { error?: { message: string } }>(client, `${opts.server}/v1/agent/register`, { nodeId: opts.nodeId, inventory });
      if (r.status === 200) return r.body;
      throw new LlmgwError('LLMGW_BAD_REQUEST', `control plane refused registration (${r.status}): ${r.body.error?.message ?? JSON.stringify(r.body)}`);
    } catch (err) {
      if ((err as LlmgwError).code === 'LLMGW_BAD_REQUEST' || stopped()) throw err;
      opts.log('control plane not reachable yet, retrying', { server: opts.server, error: (err as Error).message, retryMs: delay });
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }
}

/** Worker options every node worker uses (the agent's and the tests'). */
export const NODE_WORKER_OPTIONS = {
  // A stopping agent cancels its shards at once: each leaves its engine for the next agent (LLMGW_AGENT_STOPPED)
  // or, with --stop-engines-on-exit, gives it its SIGTERM grace. (A grace here would only delay that cancel.)
  shutdownGraceTime: 0,
  // A cancel reaches a shard only in a heartbeat's answer; the default throttle (80% of the 10 s timeout)
  // left a stopped replica's engine running for 4-5 s after its workflow ended.
  maxHeartbeatThrottleInterval: '1s',
} as const;

/** Starts the agent: discovery, registration, heartbeat loop and node worker. */
export async function startAgent(opts: AgentOptions): Promise<Agent> {
  ensureStateDir(opts.stateDir);
  const gpus = { count: 0 };
  // What the last probe offered is offered again at once (and its shards' engines adopted); the control plane
  // has every registering node probe again (ensureEngines), which updates both.
  const engines = createEngineSetup({
    ...opts.engineSetup, stateDir: join(opts.stateDir, 'engine-setup'), sim: simEngineArgv(), gpus: () => gpus.count, log: opts.log,
  });
  const known = engines.statuses();
  const inventory = await discover(opts, known.length ? known.map((s) => s.engine) : undefined);
  inventory.engines = engines.offered();
  gpus.count = inventory.gpus.length;
  let closing = false;
  const client = new TlsClient(opts.tls);
  const reg = await register(client, opts, inventory, () => closing).catch(async (err: unknown) => {
    await client.close();
    throw err;
  });
  opts.log('registered', { node: opts.nodeId, gpus: inventory.gpus.length, fabrics: inventory.fabrics, temporal: reg.temporal.address, door: reg.temporal.mtls });

  const connection = await nodeConnection(reg.temporal, opts.tls);
  const weights = opts.weights
    ? await startNodeWeights({ nodeId: opts.nodeId, server: opts.server, client, tls: opts.tls, dir: opts.weights.dir, listen: opts.weights.listen, advertiseHost: opts.advertiseHost, log: opts.log })
      .catch(async (err: unknown) => {
        await connection.close();
        await client.close();
        throw err;
      })
    : null;
  const supervised = new Set<string>();
  const stopping = new AbortController();
  const activities = {
    ...createNodeActivities({
      nodeId: opts.nodeId,
      engineArgv: (engine, program) => engines.programs(engine, program) ?? [],
      engines,
      inventory,
      stateDir: opts.stateDir,
      stopEnginesOnExit: opts.stopEnginesOnExit,
      supervised,
      assigned: () => assignedShards(client, opts.server, opts.nodeId),
      stopping: stopping.signal,
      log: opts.log,
    }),
    ...weights?.activities,
  };
  const startWorker = async (conn: NativeConnection): Promise<{ conn: NativeConnection; worker: Worker; running: Promise<void> }> => {
    const w = await Worker.create({ connection: conn, namespace: reg.temporal.namespace, taskQueue: nodeQueue(opts.nodeId), activities, ...NODE_WORKER_OPTIONS });
    return { conn, worker: w, running: w.run() };
  };
  let current = await startWorker(connection);
  /**
   * A renewed certificate reaches the node worker too: a NativeConnection keeps the certificate it was made with,
   * and the door refuses the old one once it expires. A worker on a new connection polls first, then the old one
   * stops; its shards leave their engines running (LLMGW_AGENT_STOPPED) and the new worker adopts them, as across
   * an agent restart (with --stop-engines-on-exit their engines stop and are rebuilt).
   */
  const moveWorker = async (creds: TlsCredentials): Promise<void> => {
    if (!reg.temporal.mtls || closing) return;
    const next = await startWorker(await nodeConnection(reg.temporal, creds));
    if (closing) {
      next.worker.shutdown();
      await next.running.catch(() => undefined);
      return next.conn.close();
    }
    const old = current;
    current = next;
    if (old.worker.getState() === 'RUNNING') old.worker.shutdown();
    await old.running.catch(() => undefined);
    await old.conn.close();
    opts.log('node worker moved to the renewed certificate', { temporal: reg.temporal.address });
  };
  // After the worker polls, so a shard rescheduled for this node is adopted rather than collected.
  let gc: Collection | undefined;
  void collectOrphans({ stateDir: opts.stateDir, assigned: () => assignedShards(client, opts.server, opts.nodeId), supervised, log: opts.log })
    .then((c) => {
      gc = c;
      if (closing) c.cancel();
      if (c.stopped.length || c.pending.length || c.removed.length) opts.log('engine records collected', { stopped: c.stopped, pending: c.pending, removed: c.removed });
    }, (err: Error) => opts.log('engine collection failed', { error: err.message }));

  const renewal = startRenewal(client, opts, () => closing, (creds) => {
    weights?.useCredentials(creds);
    void moveWorker(creds).catch((err: Error) => opts.log('NODE WORKER NOT MOVED to the renewed certificate: it keeps the old one until the agent restarts', { error: err.message }));
  });
  const beat = setInterval(() => {
    void post<{ error?: { message: string } }>(client, `${opts.server}/v1/agent/heartbeat`, { nodeId: opts.nodeId }).then(async (r) => {
      if (r.status === 404) await register(client, opts, inventory, () => closing);
      else if (r.status === 401 || r.status === 403) opts.log('control plane refused this node\'s certificate', { status: r.status, error: r.body.error?.message });
    }).catch((err: Error) => opts.log('heartbeat failed', { error: err.message }));
  }, reg.heartbeatMs);

  return {
    inventory,
    async close(): Promise<void> {
      closing = true;
      stopping.abort();
      clearInterval(beat);
      renewal.stop();
      gc?.cancel();
      // The SDK may already be draining it (its own signal handling in other embeddings).
      if (current.worker.getState() === 'RUNNING') current.worker.shutdown();
      await current.running.catch(() => undefined);
      await weights?.close();
      await current.conn.close();
      await client.close();
    },
  };
}

/** Replaces a file whole (readers never see half of it). */
function writeAtomic(file: string, content: string, mode: number): void {
  writeFileSync(`${file}.tmp`, content, { mode });
  renameSync(`${file}.tmp`, file);
}

/**
 * Renews the node's certificate at two thirds of its lifetime: a new key made here and a CSR sent over the
 * current mTLS connection (the control plane takes the CN from that connection); then new connections present
 * the new certificate while requests in flight finish on the old ones. A failure is logged loudly with the
 * expiry and retried every minute (sooner near the end).
 */
function startRenewal(client: TlsClient, opts: AgentOptions, closing: () => boolean, renewed: (creds: TlsCredentials) => void): { stop(): void } {
  let creds = opts.tls;
  let timer: NodeJS.Timeout | undefined;
  // A timer fires after at most ~24.8 days (2^31 ms): a longer wait is taken in steps.
  const MAX_TIMER = 2 ** 31 - 1;
  const schedule = (ms: number): void => {
    timer = setTimeout(() => void (ms > MAX_TIMER ? schedule(ms - MAX_TIMER) : renew()), Math.min(Math.max(ms, 0), MAX_TIMER));
    timer.unref();
  };
  const fromNow = (): number => {
    const info = certificateInfo(creds.certPem);
    return renewAt(info.notBefore, info.notAfter).getTime() - Date.now();
  };
  const renew = async (): Promise<void> => {
    if (closing()) return;
    const info = certificateInfo(creds.certPem);
    try {
      const { csrPem, keyPem } = makeNodeCsr(opts.nodeId);
      const r = await post<RenewedCertificate & { error?: { message: string } }>(client, `${opts.server}/v1/agent/renew`, { nodeId: opts.nodeId, csr: csrPem });
      if (r.status !== 200) throw new Error(`the control plane answered ${r.status}: ${r.body.error?.message ?? JSON.stringify(r.body)}`);
      creds = { certPem: r.body.certPem, keyPem, caPem: creds.caPem };
      if (opts.certFiles) {
        writeAtomic(opts.certFiles.key, keyPem, 0o600);
        writeAtomic(opts.certFiles.cert, r.body.certPem, 0o644);
      }
      client.use(creds);
      renewed(creds);
      opts.log('certificate renewed', { serial: r.body.serial, previous: info.serial, notAfter: r.body.notAfter, renewAt: r.body.renewAt });
      schedule(fromNow());
    } catch (err) {
      const left = info.notAfter.getTime() - Date.now();
      opts.log('CERTIFICATE RENEWAL FAILED: the control plane refuses this node once its certificate expires', {
        error: (err as Error).message, serial: info.serial, expires: info.notAfter.toISOString(), fix: 'check the control plane log; or issue a new certificate (llmgw ca issue --node ID)',
      });
      schedule(Math.min(60_000, Math.max(1000, left / 10)));
    }
  };
  schedule(fromNow());
  return { stop: () => clearTimeout(timer) };
}

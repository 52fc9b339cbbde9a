/** The local cluster: Temporal dev server + UI, control plane, llmgw-ca worker, gateway and three sim nodes, each a real process. */
import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { createCaOperations } from '../../activities/ca';
import { DEFAULT_CONFIG, PINNED_ENGINES } from '../../config/defaults';
import { parseServerConfig } from '../../config/load';
import type { ServerConfig } from '../../config/types';
import { sameProcess } from '../../lib/engine-state';
import { localLlamacpp } from '../../lib/engines/llamacpp-install';
import { writeTinyLlamaGguf } from '../../lib/engines/tiny-gguf';
import type { ModelSpec } from '../../lib/types';
import { EXIT_WITH_PARENT, fileTail, pidAlive, stopProcess } from '../../lib/process';
import { caPaths, certificateInfo, initCa, renewAt } from '../../lib/pki';
import { keyDigest, keyPrefix, newApiKey } from '../../lib/api-keys';
import { openDatabase, parseMysqlUrl } from '../../lib/store/db';
import { KeyStore } from '../../lib/store/keys';
import { Store } from '../../lib/store/store';
import { TlsClient } from '../../lib/tls-client';
import { checkClusterPorts, clusterPorts } from './ports';
import { CLUSTER_CONFIG_HEADER, resetCluster } from './reset';
import { leftOverPid, startTemporalDev, type DevServer } from './temporal-dev';
import { PROJECT_ROOT } from '../../lib/paths';
import { readDoorRecord } from '../../workers/node-door/files';

const ROOT = PROJECT_ROOT;
const FIXTURES = join(ROOT, 'test/fixtures');
const LLMGW = join(ROOT, 'bin/llmgw.js');

/** The simulated nodes: two on fabric ib-a (2 fake GPUs each; the fake sminfo shows them one subnet manager), one island. */
export const SIM_NODES = [
  {
    id: 'sim-a',
    gpus: 2,
    fabric: ['--fabric', 'ib-a', '--ib-root', join(FIXTURES, 'sysfs/two-hdr'), '--sminfo', join(FIXTURES, 'sminfo')],
  },
  {
    id: 'sim-b',
    gpus: 2,
    fabric: ['--fabric', 'ib-a', '--ib-root', join(FIXTURES, 'sysfs/two-hdr'), '--sminfo', join(FIXTURES, 'sminfo')],
  },
  { id: 'sim-c', gpus: 2, fabric: ['--ib-root', join(FIXTURES, 'sysfs/none')] },
] as const;

/**
 * The real llama.cpp this machine built (scripts/llama-cpp.sh: .tools/llama.cpp-<build>), or null while it is not
 * there. With it the cluster also serves a tiny generated llama model on a real llama-server, placed like any other.
 */
export function localLlamaServer(): string | null {
  const l = localLlamacpp(PINNED_ENGINES.llamacpp);
  // The script writes .llmgw-key last: without it the install is missing or half made.
  return existsSync(join(l.venv, '.llmgw-key')) && existsSync(l['llama-server']) ? l['llama-server'] : null;
}

/** The model the local cluster adds when llama.cpp is built: the tiny GGUF (lib/engines/tiny-gguf.ts) on CPU, any node. */
export const TINY_LLAMA = 'tiny-llama';
function tinyLlamaSpec(stateDir: string): ModelSpec {
  return {
    name: TINY_LLAMA,
    source: join(stateDir, 'models', `${TINY_LLAMA}.gguf`),
    replicas: 1,
    // No GPU: llama.cpp's CPU backend; a small context, one slot, two threads (this machine's cores).
    profiles: [
      {
        name: 'cpu',
        engine: 'llamacpp',
        nodes: 1,
        gpusPerNode: 0,
        args: ['-c', '512', '-np', '1', '-t', '2', '--no-warmup', '--no-webui'],
      },
    ],
  };
}

export interface ClusterOptions {
  stateDir: string;
  /** null: the standard ports (Temporal 7233, UI 8233, control plane 7443, gateway 8080) */
  basePort: number | null;
  mysqlUrl: string;
  progress: (line: string) => void;
  /** false: leave tiny-llama out even where llama.cpp is built (fault tests want only sim engines) */
  llama?: boolean;
  /** start from empty state: drop the database and remove the state dir's entries first (saying which) */
  reset?: boolean;
  /**
   * false (`--no-door`): the agents run without a node door, and the gateway reaches each engine on its own port
   * (the way out while the door is new). Default: every agent serves its node door
   */
  door?: boolean;
}

export interface Cluster {
  config: ServerConfig;
  /** An inference key made at this start (every model, no quota), for the banner and clients */
  apiKey: string;
  configFile: string;
  gatewayUrl: string;
  controlUrl: string;
  /** The cluster page, and a key created at start to sign in to it with (null: the control plane refused one). */
  pageUrl: string;
  pageKey: string | null;
  uiUrl: string | null;
  /** Spawned role processes by name (sim-a, control-plane, …), for tests that kill one. */
  processes: Map<string, ChildProcess>;
  /** Every role's metrics page by role (gateway, control-plane, …; `temporal …` for an SDK exporter) */
  metricsUrls: Record<string, string>;
  /** Each sim node's door (HOST:PORT) by node id; empty with `door: false` */
  doors: Record<string, string>;
  /** Starts a role again with the arguments it was first started with (after a test killed it). */
  restart(name: string): ChildProcess;
  /** The Temporal dev server: kill it (SIGKILL) and start it again on the same database, for fault tests. */
  temporal: { kill(): void; start(): Promise<void> };
  close(): Promise<void>;
}

/**
 * Where the cluster's CA and certificates live in the state dir. tls.ca is a copy of the CA certificate under
 * certs/, with no key beside it: the control plane then treats the CA as on another host and signs renewals and
 * publishes CRLs through the llmgw-ca worker (which runs over ca/), as in production.
 */
function tlsPaths(stateDir: string): {
  caDir: string;
  tls: ServerConfig['tls'];
  node: (id: string) => { cert: string; key: string };
} {
  const certs = join(stateDir, 'certs');
  return {
    caDir: join(stateDir, 'ca'),
    tls: {
      ca: join(certs, 'ca.crt'),
      serverCert: join(certs, 'control-plane/server.crt'),
      serverKey: join(certs, 'control-plane/server.key'),
      clientCert: join(certs, 'operator/operator.crt'),
      clientKey: join(certs, 'operator/operator.key'),
      gatewayCert: join(certs, 'gateway/gateway.crt'),
      gatewayKey: join(certs, 'gateway/gateway.key'),
    },
    node: (id) => ({ cert: join(certs, id, 'node.crt'), key: join(certs, id, 'node.key') }),
  };
}

function writePem(file: string, content: string, mode: number): void {
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, content, { mode });
  chmodSync(file, mode);
}

/**
 * Creates the cluster's CA on the first run (reused after), and the control plane's server certificate, one
 * certificate per sim node and the operator certificate ctl uses — each issued (and recorded in MySQL) only
 * when the one on disk is missing, not this CA's, unrecorded, revoked, or past its renewal point: issuing is an
 * RSA key generation (180–350 ms each), and every issue would add a row to the certificates table.
 */
async function issueCertificates(o: ClusterOptions): Promise<string> {
  const p = tlsPaths(o.stateDir);
  const created = !existsSync(caPaths(p.caDir).cert);
  if (created) initCa(p.caDir);
  mkdirSync(join(p.tls.ca, '..'), { recursive: true });
  copyFileSync(caPaths(p.caDir).cert, p.tls.ca);
  const caPem = readFileSync(caPaths(p.caDir).cert, 'utf8');
  const pool = await openDatabase(o.mysqlUrl);
  const issued: string[] = [];
  try {
    const store = new Store(pool);
    const ops = createCaOperations({ caDir: p.caDir, store });
    const ensure = async (
      name: string,
      certFile: string,
      keyFile: string,
      issue: () => Promise<{ certPem: string; keyPem: string }>,
    ): Promise<void> => {
      if (existsSync(certFile) && existsSync(keyFile)) {
        const info = certificateInfo(readFileSync(certFile, 'utf8'));
        const rec = await store.certificateBySerial(info.serial);
        if (
          info.issuerMatches(caPem) &&
          rec &&
          !rec.revokedAt &&
          Date.now() < renewAt(info.notBefore, info.notAfter).getTime()
        )
          return;
      }
      const c = await issue();
      writePem(certFile, c.certPem, 0o644);
      writePem(keyFile, c.keyPem, 0o600);
      issued.push(name);
    };
    await ensure('control-plane', p.tls.serverCert, p.tls.serverKey, () =>
      ops.issueServerCertificate({ name: 'control-plane', hosts: ['127.0.0.1', 'localhost'] }),
    );
    for (const n of SIM_NODES)
      await ensure(n.id, p.node(n.id).cert, p.node(n.id).key, () => ops.issueNodeCertificate({ nodeId: n.id }));
    await ensure('operator', p.tls.clientCert, p.tls.clientKey, () =>
      ops.issueOperatorCertificate({ name: 'operator' }),
    );
    await ensure('gateway', p.tls.gatewayCert, p.tls.gatewayKey, () =>
      ops.issueClientCertificate({ role: 'gateway', name: 'gateway' }),
    );
  } finally {
    await pool.end();
  }
  const all = ['control-plane', ...SIM_NODES.map((n) => n.id), 'operator', 'gateway'];
  return `${created ? 'created the CA' : 'reusing the CA'} in ${p.caDir}; certificates for ${all.join(', ')} in ${join(o.stateDir, 'certs')} (${issued.length ? `issued: ${issued.join(', ')}` : 'all still valid, reused'})`;
}

/** Writes server.yaml for this cluster (only what differs from the embedded defaults). */
function writeConfig(
  o: ClusterOptions,
  llama: boolean,
): { file: string; config: ServerConfig; temporalPort: number; uiPort: number } {
  const b = o.basePort;
  const ports = clusterPorts(b);
  const doc = {
    temporal: { address: `127.0.0.1:${ports.temporal}`, namespace: 'default', uiUrl: `http://127.0.0.1:${ports.ui}` },
    mysql: { url: o.mysqlUrl },
    listeners: {
      controlPlane: { host: '127.0.0.1', port: ports.control },
      gateway: { host: '127.0.0.1', port: ports.gateway },
      temporalDoor: { host: '127.0.0.1', port: ports.door },
    },
    tls: tlsPaths(o.stateDir).tls,
    metrics: {
      gateway: { host: '127.0.0.1', port: ports.metrics },
      controlPlane: { host: '127.0.0.1', port: ports.metrics + 1, temporalPort: ports.metrics + 2 },
      caWorker: { host: '127.0.0.1', port: ports.metrics + 3, temporalPort: ports.metrics + 4 },
    },
    enginePorts: { base: ports.engines, count: b === null ? 2000 : 200 },
    // With llama.cpp built: the operator's own binary ("", each agent's --llamacpp-bin) and the tiny model.
    ...(llama
      ? {
          engines: { ...DEFAULT_CONFIG.engines, llamacpp: '' },
          catalog: [...DEFAULT_CONFIG.catalog, tinyLlamaSpec(o.stateDir)],
        }
      : {}),
  };
  const text = `${CLUSTER_CONFIG_HEADER}; edit config/server.example.yaml's copy instead.\n${stringify(doc)}`;
  const file = join(o.stateDir, 'server.yaml');
  writeFileSync(file, text);
  return { file, config: parseServerConfig(text, file), temporalPort: ports.temporal, uiPort: ports.ui };
}

/** Each sim node's door listener (127.0.0.1, one port each from ports.nodeDoors), by node id; {} without doors. */
function nodeDoors(o: ClusterOptions): Record<string, string> {
  if (o.door === false) return {};
  const first = clusterPorts(o.basePort).nodeDoors;
  return Object.fromEntries(SIM_NODES.map((n, i) => [n.id, `127.0.0.1:${first + i}`]));
}

/** The node doors this state dir's agents left running (a node's door outlives its agent), by pid. */
function leftOverDoors(stateDir: string): number[] {
  return SIM_NODES.flatMap((n) => {
    const r = readDoorRecord(join(stateDir, 'engines', n.id));
    return r && sameProcess(r.pid, r.startTime) ? [r.pid] : [];
  });
}

/** Stops (SIGTERM: it answers what is in flight, then exits; SIGKILL after 10 s) the node doors still running. */
async function stopLeftOverDoors(stateDir: string): Promise<void> {
  await Promise.all(
    leftOverDoors(stateDir).map(async (pid) => {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        return; // gone meanwhile
      }
      for (let i = 0; i < 200 && pidAlive(pid); i++) await new Promise((r) => setTimeout(r, 50));
      if (pidAlive(pid)) process.kill(pid, 'SIGKILL'); // still answering after 10 s: a stalled client
    }),
  );
}

/** Brings the whole cluster up and deploys the catalog; resolves when every catalog replica serves. */
export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  parseMysqlUrl(o.mysqlUrl);
  const doors = nodeDoors(o);
  // Before anything starts: a port held by another process is refused, naming it (this state dir's own Temporal,
  // left by a killed run, may hold its ports: it is stopped below; a node door its agents left is adopted).
  const temporalLeft = leftOverPid(join(o.stateDir, 'temporal.pid'), join(o.stateDir, 'temporal.db'));
  await checkClusterPorts(clusterPorts(o.basePort), o.basePort !== null, Object.keys(doors), [
    ...(temporalLeft === null ? [] : [temporalLeft]),
    ...leftOverDoors(o.stateDir),
  ]);
  if (o.reset) await resetCluster({ stateDir: o.stateDir, mysqlUrl: o.mysqlUrl, say: o.progress });
  mkdirSync(join(o.stateDir, 'logs'), { recursive: true });
  const llamaServer = o.llama === false ? null : localLlamaServer();
  const { file, config, temporalPort, uiPort } = writeConfig(o, llamaServer !== null);
  const processes = new Map<string, ChildProcess>();
  const started = new Map<string, { args: string[]; env: Record<string, string> }>();
  let temporal: DevServer | null = null;

  const role = (name: string, args: string[], env: Record<string, string> = {}): ChildProcess => {
    started.set(name, { args, env });
    // The role writes its log file itself (not through a pipe to us), so it outlives us intact if we are killed.
    const log = openSync(join(o.stateDir, 'logs', `${name}.log`), 'a');
    // Own process group: Ctrl-C reaches only \`llmgw cluster\`, which stops the roles in order (nodes first,
    // Temporal last, so every engine's stop is recorded). A role whose parent dies stops itself.
    const child = spawn(process.execPath, [LLMGW, ...args], {
      stdio: ['ignore', log, log],
      detached: true,
      env: { ...process.env, ...env, [EXIT_WITH_PARENT]: '1' },
    });
    closeSync(log);
    child.once('exit', (code, signal) => {
      if (closing) return;
      const logFile = join(o.stateDir, 'logs', `${name}.log`);
      const line = `${name} exited (${signal ?? `code ${code}`}); see ${logFile}`;
      o.progress(`! ${line}`);
      // While starting, a role that dies fails the start: the cluster is not "up" without it. Its last log lines go
      // with the error, so a CI log (whose state dir is gone) still says why.
      died ??= `${line}\n${fileTail(logFile, 15)}`;
    });
    processes.set(name, child);
    return child;
  };
  let closing = false;
  let died: string | null = null;
  const alive = (): void => {
    if (died) throw new Error(`${died}: the cluster did not start`);
  };
  const close = async (): Promise<void> => {
    closing = true;
    // Nodes first (their engines stop and Temporal records it), then the control side, Temporal last.
    const nodes = SIM_NODES.map((n) => processes.get(n.id)).filter((c) => c !== undefined);
    await Promise.all(nodes.map((c) => stopProcess(c, 25_000)));
    // Each agent stops its door (--stop-engines-on-exit), but one stopped while still starting (waiting for a control
    // plane that is gone) exits at once, and one killed after its grace cannot: its door would outlive the cluster.
    await stopLeftOverDoors(o.stateDir);
    await Promise.all([...processes.values()].filter((c) => !nodes.includes(c)).map((c) => stopProcess(c, 25_000)));
    await temporal?.stop();
  };

  let operator: TlsClient | null = null;
  try {
    o.progress(`      mutual TLS: ${await issueCertificates(o)}`);
    const paths = tlsPaths(o.stateDir);
    const pem = (f: string): string => readFileSync(f, 'utf8');
    operator = new TlsClient({
      caPem: pem(paths.tls.ca),
      certPem: pem(paths.tls.clientCert),
      keyPem: pem(paths.tls.clientKey),
    });
    const cpFetch = operator.fetch;
    o.progress(
      `[1/5] Temporal dev server on 127.0.0.1:${temporalPort} (UI ${config.temporal.uiUrl}), history in ${o.stateDir}/temporal.db`,
    );
    const temporalOptions = {
      port: temporalPort,
      uiPort,
      dbFile: join(o.stateDir, 'temporal.db'),
      pidFile: join(o.stateDir, 'temporal.pid'),
      log: o.progress,
    };
    temporal = await startTemporalDev(temporalOptions);
    o.progress(`[2/5] control plane + control worker (MySQL ${o.mysqlUrl}), llmgw-ca worker over ${paths.caDir}`);
    // Not waited for: only renewals and revocations need it, and their workflows wait for it to poll.
    role('ca-worker', ['ca-worker', '--config', file, '--ca-dir', paths.caDir]);
    // --no-apply: the catalog is deployed at step 5, once every node is up (placed earlier, sim-small could take a
    // fabric node's GPUs while its pair is not registered yet and leave sim-large nowhere to go).
    role('control-plane', ['control-plane', '--config', file, '--no-apply']);
    const controlUrl = `https://${config.listeners.controlPlane.host}:${config.listeners.controlPlane.port}`;
    await waitFor(
      async () => (await cpFetch(`${controlUrl}/health`, { signal: AbortSignal.timeout(1000) })).ok,
      60_000,
      'control plane',
      alive,
    );
    // A key to sign in to the cluster page with, new at each start (llmgw ctl page-key list shows them).
    const keyRes = await cpFetch(`${controlUrl}/v1/page-keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: `local-${Date.now().toString(36)}` }),
      signal: AbortSignal.timeout(10_000),
    });
    const pageKey = keyRes.ok ? ((await keyRes.json()) as { key: string }).key : null;
    o.progress('[3/5] gateway');
    role('gateway', ['gateway', '--config', file]);
    const gatewayUrl = `http://${config.listeners.gateway.host}:${config.listeners.gateway.port}`;
    await waitHttp(`${gatewayUrl}/health`, 30_000, 'gateway', alive);
    o.progress(
      `[4/5] sim nodes ${SIM_NODES.map((n) => n.id).join(', ')}, ${
        Object.keys(doors).length
          ? `each behind its node door (${Object.entries(doors)
              .map(([id, at]) => `${id} ${at}`)
              .join(', ')}; engines on 127.0.0.1)`
          : 'without node doors (--no-door: the gateway reaches each engine on its own port)'
      }`,
    );
    if (llamaServer) {
      const gguf = tinyLlamaSpec(o.stateDir).source;
      if (!existsSync(gguf)) {
        mkdirSync(join(gguf, '..'), { recursive: true });
        await writeTinyLlamaGguf(gguf);
      }
      o.progress(
        `      llama.cpp ${PINNED_ENGINES.llamacpp} found (${llamaServer}): every node offers it, and the catalog adds ${TINY_LLAMA} (${gguf})`,
      );
    } else {
      o.progress(
        `      llama.cpp not built here: ${TINY_LLAMA} is left out (set-up builds it in the background, about 6 min of two idle cores the first time: bash scripts/llama-cpp.sh waits for it; start the cluster again after)`,
      );
    }
    const agentMetrics = clusterPorts(o.basePort).agentMetrics;
    const startAgent = (n: (typeof SIM_NODES)[number], i: number): void => {
      role(
        n.id,
        [
          'agent',
          '--node',
          n.id,
          '--server',
          controlUrl,
          '--cert',
          paths.node(n.id).cert,
          '--key',
          paths.node(n.id).key,
          '--ca',
          paths.tls.ca,
          '--nvidia-smi',
          join(FIXTURES, 'nvidia-smi'),
          ...n.fabric,
          '--state-dir',
          join(o.stateDir, 'engines', n.id),
          '--weights-dir',
          join(o.stateDir, 'weights', n.id),
          '--weights-listen',
          '127.0.0.1:0',
          '--stop-engines-on-exit',
          // Its agents share this machine's network namespace: one's sweep would remove the others' fences.
          '--no-rank-fence',
          // One door port per node: they share this machine's addresses.
          ...(doors[n.id] ? ['--door', doors[n.id] as string] : []),
          ...(agentMetrics === null
            ? ['--metrics', '127.0.0.1:0']
            : [
                '--metrics',
                `127.0.0.1:${agentMetrics + 2 * i}`,
                '--temporal-metrics',
                `127.0.0.1:${agentMetrics + 2 * i + 1}`,
              ]),
          ...(llamaServer ? ['--llamacpp-bin', llamaServer] : []),
        ],
        { FAKE_NVIDIA_GPUS: String(n.gpus), FAKE_NVIDIA_SEED: n.id },
      );
    };
    // The island first, registered before the fabric nodes start. On a restart the deployments are already running
    // and place their replicas the moment a node registers: a fabric node coming up first took both sim-small
    // replicas (the island not back yet) and left sim-large no pair, for good (seen once in a fresh-clone run).
    // With the island registered first, single-node replicas go there (placement puts them on islands first).
    const islandIds: string[] = SIM_NODES.filter((n) => !n.fabric.includes('--fabric')).map((n) => n.id);
    const since = Date.now() - 1000;
    for (const [i, n] of SIM_NODES.entries()) if (islandIds.includes(n.id)) startAgent(n, i);
    await waitFor(
      async () => {
        const { nodes } = (await (await cpFetch(`${controlUrl}/v1/nodes`)).json()) as {
          nodes: { id: string; state: string; registeredAt?: string }[];
        };
        return islandIds.every((id) =>
          nodes.some((n) => n.id === id && n.state !== 'down' && Date.parse(n.registeredAt ?? '') >= since),
        );
      },
      60_000,
      'the island node to register',
      alive,
    );
    for (const [i, n] of SIM_NODES.entries()) if (!islandIds.includes(n.id)) startAgent(n, i);
    await waitFor(
      async () => {
        const { nodes } = (await (await cpFetch(`${controlUrl}/v1/nodes`)).json()) as {
          nodes: { id: string; state: string }[];
        };
        return SIM_NODES.every((s) => nodes.some((n) => n.id === s.id && n.state !== 'down'));
      },
      60_000,
      'the sim nodes to register',
      alive,
    );
    o.progress('[5/5] deploying the catalog');
    for (const spec of config.catalog) {
      await runCli(['ctl', 'deploy', spec.name, '--config', file, '--timeout', '120'], (line) =>
        o.progress(`      ${line}`),
      );
    }
    // Ready in the store is not yet routed: the gateway's table follows it within gateway.refreshMs. Up means a
    // client's first request is answered, so wait for the gateway's own table.
    // A key of this start's own (only its SHA-256 is stored, so an earlier one cannot be shown again): the banner
    // and its try: line print it. Earlier local-* keys stay valid for clients configured with them.
    const key = await createLocalKey(o.mysqlUrl);
    await waitFor(
      async () => {
        const r = await fetch(`${gatewayUrl}/health/routes`, {
          headers: key ? { authorization: `Bearer ${key}` } : {},
          signal: AbortSignal.timeout(1000),
        });
        const { models } = (await r.json()) as { models: Record<string, number> };
        return r.ok && config.catalog.every((m) => (models[m.name] ?? 0) >= m.replicas);
      },
      10_000,
      'the gateway to route every catalog replica',
      alive,
    );
    alive();
    const restart = (name: string): ChildProcess => {
      const r = started.get(name);
      if (!r) throw new Error(`no role ${name} in this cluster (roles: ${[...started.keys()].join(', ')})`);
      return role(name, r.args, r.env);
    };
    const temporalControl = {
      kill: (): void => void temporal?.process.kill('SIGKILL'),
      start: async (): Promise<void> => void (temporal = await startTemporalDev(temporalOptions)),
    };
    return {
      config,
      configFile: file,
      apiKey: key,
      gatewayUrl,
      controlUrl,
      pageUrl: `${controlUrl}/page/`,
      pageKey,
      uiUrl: temporal.uiUrl,
      processes,
      metricsUrls: metricsUrls(config, clusterPorts(o.basePort).agentMetrics, o.stateDir),
      doors,
      restart,
      temporal: temporalControl,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  } finally {
    await operator?.close();
  }
}

/** The metrics pages of the cluster's roles, as its server.yaml and agent flags place them. */
function metricsUrls(config: ServerConfig, agentMetrics: number | null, stateDir: string): Record<string, string> {
  const urls: Record<string, string> = {};
  const page = (host: string, port: number): string => `http://${host}:${port}/metrics`;
  for (const [role, m] of [
    ['gateway', config.metrics.gateway],
    ['control-plane', config.metrics.controlPlane],
    ['ca-worker', config.metrics.caWorker],
  ] as const) {
    if (!m) continue;
    urls[role] = page(m.host, m.port);
    if (m.temporalPort) urls[`${role} temporal`] = page(m.host, m.temporalPort);
  }
  SIM_NODES.forEach((n, i) => {
    if (agentMetrics === null) {
      // Any free port: the agent said which in its "agent running" line.
      const url = agentMetricsUrl(join(stateDir, 'logs', `${n.id}.log`));
      if (url) urls[n.id] = url;
      return;
    }
    urls[n.id] = page('127.0.0.1', agentMetrics + 2 * i);
    urls[`${n.id} temporal`] = page('127.0.0.1', agentMetrics + 2 * i + 1);
  });
  return urls;
}

/** The metrics address in an agent log's last "agent running" line, or null. */
function agentMetricsUrl(logFile: string): string | null {
  let url: string | null = null;
  const text = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
  for (const line of text.split('\n')) {
    if (!line.includes('"agent running"')) continue;
    try {
      const m = (JSON.parse(line) as { metrics?: unknown }).metrics;
      if (typeof m === 'string') url = m;
    } catch {
      // not a whole JSON line
    }
  }
  return url;
}

/** Runs an llmgw CLI command as a child, streaming its output lines. */
export function runCli(args: string[], onLine: (l: string) => void): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [LLMGW, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    const feed = (b: Buffer): void => {
      buf += b.toString();
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      lines.forEach(onLine);
    };
    child.stdout.on('data', feed);
    child.stderr.on('data', feed);
    child.once('exit', (code) => {
      if (buf) onLine(buf);
      if (code === 0) resolvePromise();
      else reject(new Error(`llmgw ${args.join(' ')} exited with code ${code}`));
    });
  });
}

async function waitHttp(url: string, ms: number, what: string, alive: () => void): Promise<void> {
  await waitFor(async () => (await fetch(url, { signal: AbortSignal.timeout(1000) })).ok, ms, what, alive);
}

async function waitFor(
  fn: () => Promise<boolean>,
  ms: number,
  what: string,
  alive: () => void = () => undefined,
): Promise<void> {
  const deadline = Date.now() + ms;
  let last = '';
  while (Date.now() < deadline) {
    alive();
    try {
      if (await fn()) return;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${ms / 1000}s waiting for ${what}${last ? ` (${last})` : ''}`);
}

/** Makes an inference key named local-<time> (every model, no quota) in the cluster's MySQL; returns the key. */
async function createLocalKey(mysqlUrl: string): Promise<string> {
  const pool = await openDatabase(mysqlUrl);
  try {
    const key = newApiKey();
    const name = `local-${new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15)}`.toLowerCase();
    await new KeyStore(pool).create(
      { name, models: null, rpm: null, tpm: null, expiresAt: null },
      keyDigest(key),
      keyPrefix(key),
    );
    return key;
  } finally {
    await pool.end();
  }
}

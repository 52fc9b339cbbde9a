/**
 * What an onboarding test needs around its test hosts: Temporal, MariaDB, a control plane, gateway and Temporal
 * door listening on the test network (so the nodes reach them), the llmgw-ca worker over a CA of the test's own
 * (its certificate names the network address), the CA host's ssh key, a server.yaml for the CLI, and the
 * release artefact.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { ServerConfig } from '../../config/types';
import { RoutingTable } from '../../gateway/inference/routing';
import { startGateway, type RunningGateway } from '../../gateway/inference/server';
import { doorAgentFromFiles } from '../../lib/door-agent';
import { initCa, issueClientCertificate, issueOperatorCertificate, issueServerCertificate } from '../../lib/pki';
import { parseNodeId, type ModelSpec } from '../../lib/types';
import type { BuiltArtefact } from '../../scripts/release';
import { startCaWorker, type CaWorker } from '../../workers/ca';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import type { OnboardInput } from '../../workflows/contracts/onboard';
import { workflowBundlePath } from './bundle';
import { dropDatabase, startTestTemporal, testMysqlUrl } from './cluster-parts';
import { freePort, testEnginePortBase } from './ports';
import { testArtefact } from './release';
import { startTestNetwork, type TestNetwork } from './test-host';

const ROOT = resolve(__dirname, '../..');

export interface OnboardCluster {
  lan: TestNetwork;
  temporal: DevServer;
  config: ServerConfig;
  /** server.yaml for llmgw onboard-node / ctl */
  configFile: string;
  cp: ControlPlane;
  ca: CaWorker;
  gateway: RunningGateway;
  artefact: BuiltArtefact;
  /** the CA host's ssh key (private) and its public line for authorized_keys */
  sshKey: string;
  sshPub: string;
  dir: string;
  /** onboarding input for a test host at `addr` (what the CLI would send) */
  input(nodeId: string, addr: string, o?: Partial<OnboardInput>): OnboardInput;
  /** runs `llmgw ARGS…` from the checkout; resolves with its exit and output */
  cli(
    args: string[],
    o?: {
      onOutput?: (s: string, kill: (sig: NodeJS.Signals) => void) => void;
      onErrOutput?: (s: string, kill: (sig: NodeJS.Signals) => void) => void;
      timeoutMs?: number;
    },
  ): Promise<{ code: number | null; out: string; err: string }>;
  close(): Promise<void>;
}

/** Starts everything; `catalog` (and `engines`, default sim only) are the control plane's. */
export async function startOnboardCluster(o: {
  catalog: ModelSpec[];
  engines?: ServerConfig['engines'];
}): Promise<OnboardCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-onboard-'));
  const artefact = testArtefact(); // building (or found) meanwhile
  const lan = await startTestNetwork();
  const temporal = await startTestTemporal();
  const caDir = join(dir, 'ca');
  const ca = initCa(caDir, { keyBits: 2048 });
  const server = issueServerCertificate(ca, 'control-plane', [lan.gateway, '127.0.0.1', 'localhost']);
  const operator = issueOperatorCertificate(ca, 'operator');
  // What the control plane (waiting on a new replica's /health) and the gateway present at the nodes' doors.
  const gatewayCert = issueClientCertificate(ca, 'gateway', 'gateway');
  const file = (name: string, content: string): string => {
    writeFileSync(join(dir, name), content, { mode: 0o600 });
    return join(dir, name);
  };
  // Every listener on the test network's address: the nodes reach the control plane and the Temporal door there.
  const listeners = Object.fromEntries(
    await Promise.all(
      Object.keys(DEFAULT_CONFIG.listeners).map(async (k) => [k, { host: lan.gateway, port: await freePort() }]),
    ),
  ) as ServerConfig['listeners'];
  const config: ServerConfig = {
    ...DEFAULT_CONFIG,
    temporal: { ...DEFAULT_CONFIG.temporal, address: temporal.address },
    mysql: { url: testMysqlUrl() },
    listeners,
    tls: {
      ca: join(caDir, 'ca.crt'),
      serverCert: file('server.crt', server.certPem),
      serverKey: file('server.key', server.keyPem),
      clientCert: file('operator.crt', operator.certPem),
      clientKey: file('operator.key', operator.keyPem),
      gatewayCert: file('gateway.crt', gatewayCert.certPem),
      gatewayKey: file('gateway.key', gatewayCert.keyPem),
    },
    enginePorts: { base: testEnginePortBase(), count: 100 },
    catalog: o.catalog,
    ...(o.engines ? { engines: o.engines } : {}),
  };
  const configFile = join(dir, 'server.yaml');
  writeFileSync(
    configFile,
    [
      'temporal:',
      `  address: ${JSON.stringify(temporal.address)}`,
      'mysql:',
      `  url: ${JSON.stringify(config.mysql.url)}`,
      'tls:',
      ...Object.entries(config.tls).map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`),
      'listeners:',
      ...Object.entries(listeners).map(([k, v]) => `  ${k}: { host: ${JSON.stringify(v.host)}, port: ${v.port} }`),
      '',
    ].join('\n'),
  );
  const cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
  // The operator certificate the CLI presents (ctl, add-node's CPU check) and the gateway's are ones this cluster
  // issued: recorded.
  for (const c of [operator, gatewayCert])
    await cp.store.recordCertificate({
      serial: c.serial,
      cn: c.cn,
      role: c.role,
      notBefore: c.notBefore,
      notAfter: c.notAfter,
      pem: c.certPem,
    });
  const caWorker = await startCaWorker({ config, caDir });
  const doorAgent = doorAgentFromFiles(config.tls, config.gateway.timeouts.connectMs) ?? undefined;
  const gateway = await startGateway({
    host: '127.0.0.1',
    port: 0,
    routing: new RoutingTable(() => cp.store.routeRows(), { refreshMs: config.gateway.refreshMs }),
    apiKeys: [],
    doorAgent,
  });
  const sshKey = join(dir, 'id_ed25519');
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'llmgw CA host', '-f', sshKey]);
  const art = await artefact;
  return {
    lan,
    temporal,
    config,
    configFile,
    cp,
    ca: caWorker,
    gateway,
    artefact: art,
    sshKey,
    sshPub: readFileSync(`${sshKey}.pub`, 'utf8').trim(),
    dir,
    input: (nodeId, addr, extra = {}) => ({
      nodeId: parseNodeId(nodeId),
      addr,
      sshPort: 22,
      sshUser: 'root',
      sshKeyPath: sshKey,
      server: cp.url,
      advertiseHost: addr,
      fabrics: [],
      noGpu: false,
      nvidiaSmi: '/usr/local/bin/nvidia-smi',
      bins: {},
      artefact: {
        path: art.file,
        sha256: art.sha256,
        name: art.info.name,
        version: art.info.version,
        platform: art.platform,
      },
      sshDeadlineS: 60,
      registerTimeoutS: 60,
      ...extra,
    }),
    cli: (args, co = {}) =>
      new Promise((res) => {
        const child = spawn(process.execPath, [join(ROOT, 'bin/llmgw.js'), ...args], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        const timer = setTimeout(() => child.kill('SIGKILL'), co.timeoutMs ?? 120_000);
        child.stdout.on('data', (b: Buffer) => {
          out += b.toString();
          co.onOutput?.(out, (sig) => child.kill(sig));
        });
        child.stderr.on('data', (b: Buffer) => {
          err += b.toString();
          co.onErrOutput?.(err, (sig) => child.kill(sig));
        });
        child.on('close', (code) => {
          clearTimeout(timer);
          res({ code, out, err });
        });
      }),
    async close() {
      await gateway.close().catch(() => undefined);
      doorAgent?.destroy();
      await caWorker.close().catch(() => undefined);
      await cp.close().catch(() => undefined);
      await lan.close().catch(() => undefined);
      await temporal.stop().catch(() => undefined);
      await dropDatabase(config.mysql.url).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Puts the fake nvidia-smi (one GPU) where the onboarding input says it is. */
export async function fakeGpu(host: {
  exec(c: string, o?: { stdin?: string }): Promise<{ code: number }>;
}): Promise<void> {
  const script = readFileSync(join(ROOT, 'test/fixtures/nvidia-smi'), 'utf8');
  const r = await host.exec(
    'mkdir -p /usr/local/bin && cat > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi',
    { stdin: script },
  );
  if (r.code !== 0) throw new Error('could not put nvidia-smi on the test host');
}

/** `llmgw sim-fleet`: many simulated nodes in one process (or spread over a few), each a real agent (workers/sim-fleet). */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createCaOperations } from '../activities/ca';
import { loadServerConfig } from '../config/load';
import { caPaths, certificateInfo, DEFAULT_CA_DIR, makeNodeCsrAsync } from '../lib/pki';
import { openConfiguredDatabase } from '../lib/store/db';
import { Store } from '../lib/store/store';
import { fleetCatalog } from '../workers/sim-fleet/catalog';
import { startSimFleet } from '../workers/sim-fleet';
import { intOption, parse, UsageError } from './args';
import { controlApi, postControl } from './control-api';
import { runRole } from './role-process';
import { startFleetChildren } from './sim-fleet-procs';

const SIM_FLEET_USAGE = `
llmgw sim-fleet --nodes N [--gpus G] [--fabrics F] [--replicas-per-node R] [options]

Runs N simulated nodes in this one process, to see what a cluster of that size costs the control plane,
Temporal and MySQL (npm run bench:scale runs it at several sizes). Each node is the real agent: its own
certificate from the cluster CA, registration and heartbeats with the control plane, its node worker
(queue node-<id>) through the Temporal door, shard supervision. Only the hardware (fake nvidia-smi and
sminfo, a sysfs tree) and the engine process are simulated: a shard's sim engine is the sim engine's own
server started inside this process, on the node's own loopback address (node i: 127.1.x.y), serving
/health and completions. Nodes are fleet-0000, fleet-0001, …

  --nodes N              how many nodes (1-5000)
  --first I              index of the first node (default 0): a second fleet process adds fleet-I onwards
  --gpus G               fake GPUs per node (default: --replicas-per-node + 1, at least 1)
  --fabrics F            spread the nodes over F InfiniBand fabrics ib-0 … (node i on ib-<i mod F>);
                         default 0: every node an island
  --replicas-per-node R  once every node has registered, apply a catalog of sim models (fleet-m0, fleet-m1, …,
                         50 replicas each, one GPU per replica) totalling N×R replicas, through the control
                         plane's catalog apply (as llmgw ctl apply, with the operator certificate of --config);
                         default 0: deploy nothing
  --config FILE          server.yaml: the control plane (listeners.controlPlane), MySQL (certificates are
                         recorded there) and the operator certificate (default: the built-in defaults)
  --server URL           control plane URL (default: https:// and the config's listeners.controlPlane)
  --ca-dir DIR           the CA directory (llmgw ca init) node certificates are issued from (default ${DEFAULT_CA_DIR})
  --state-dir DIR        the nodes' state dirs, fake hardware scripts and certificates, which are reused on the
                         next run when this CA issued them and MySQL has them (default .llmgw/sim-fleet)
  --parallel K           agents starting at once (default 16)
  --fleet-proc P         spread the nodes over P child processes of this one (each an llmgw sim-fleet of its share,
                         --first onwards), so the fleet is not bound by one process's event loop; default 1: all
                         in this one. The catalog is applied once every child runs; stopping this stops them all
  --verbose              every node's log lines (default: only their warnings and errors)
`;

/**
 * A node's certificate and key: the one under `dir` when this CA issued it (recorded in `store` if it is not), else
 * a new one as a node gets it: its key made here (off the event loop) and its CSR signed by the CA.
 */
async function nodeCertificate(
  ops: ReturnType<typeof createCaOperations>,
  store: Store,
  caPem: string,
  dir: string,
): Promise<{ certPem: string; keyPem: string }> {
  const certFile = join(dir, 'node.crt');
  const keyFile = join(dir, 'node.key');
  const id = dir.split('/').at(-1) as string;
  if (existsSync(certFile) && existsSync(keyFile)) {
    const certPem = readFileSync(certFile, 'utf8');
    const info = certificateInfo(certPem);
    if (info.issuerMatches(caPem) && info.notAfter.getTime() > Date.now() + 86_400_000) {
      if (!(await store.certificateBySerial(info.serial)))
        await store.recordCertificate({
          serial: info.serial,
          cn: id,
          role: 'node',
          notBefore: info.notBefore,
          notAfter: info.notAfter,
          pem: certPem,
        });
      return { certPem, keyPem: readFileSync(keyFile, 'utf8') };
    }
  }
  const { csrPem, keyPem } = await makeNodeCsrAsync(id);
  const { certPem } = await ops.signNodeCsr({ csrPem, identity: id });
  mkdirSync(dir, { recursive: true });
  writeFileSync(certFile, certPem);
  writeFileSync(keyFile, keyPem, { mode: 0o600 });
  return { certPem, keyPem };
}

/** `llmgw sim-fleet` */
export async function simFleetCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: SIM_FLEET_USAGE,
    options: {
      nodes: { type: 'string' },
      first: { type: 'string' },
      gpus: { type: 'string' },
      fabrics: { type: 'string' },
      'replicas-per-node': { type: 'string' },
      config: { type: 'string' },
      server: { type: 'string' },
      'ca-dir': { type: 'string' },
      'state-dir': { type: 'string' },
      parallel: { type: 'string' },
      'fleet-proc': { type: 'string' },
      verbose: { type: 'boolean' },
    },
  });
  if (values.nodes === undefined) throw new UsageError(`--nodes N is required\n${SIM_FLEET_USAGE}`);
  const nodes = intOption(values.nodes, '--nodes', 0);
  if (nodes < 1 || nodes > 5000)
    throw new UsageError(`--nodes ${nodes}: give 1 to 5000 (simulated nodes in this one process)`);
  const perNode = intOption(values['replicas-per-node'], '--replicas-per-node', 0);
  const gpus = values.gpus === undefined ? Math.max(1, perNode + 1) : intOption(values.gpus, '--gpus', 0);
  if (perNode > gpus)
    throw new UsageError(`--replicas-per-node ${perNode} needs at least as many --gpus (got ${gpus}): one GPU each`);
  const fabrics = intOption(values.fabrics, '--fabrics', 0);
  const first = intOption(values.first, '--first', 0);
  const parallel = Math.max(1, intOption(values.parallel, '--parallel', 16));
  const procs = intOption(values['fleet-proc'], '--fleet-proc', 1);
  if (procs < 1 || procs > nodes)
    throw new UsageError(
      `--fleet-proc ${procs}: give 1 to --nodes (${nodes}) processes, each with a share of the nodes`,
    );
  const config = loadServerConfig(values.config);
  const api = controlApi(config, values.server);
  const caDir = resolve(values['ca-dir'] ?? DEFAULT_CA_DIR);
  const caFile = caPaths(caDir).cert;
  if (!existsSync(caFile))
    throw new UsageError(
      `--ca-dir ${caDir} holds no CA (${caFile} is missing): make one with llmgw ca init, or pass --ca-dir`,
    );
  const stateDir = resolve(values['state-dir'] ?? '.llmgw/sim-fleet');
  await runRole('sim-fleet', async (log) => {
    const applyCatalog = async (): Promise<void> => {
      if (perNode === 0) return;
      const catalog = fleetCatalog(nodes * perNode);
      const answer = await postControl<{ errors: string[] }>(
        api,
        '/v1/catalog/apply',
        { catalog, engines: config.engines, prune: false, dryRun: false },
        60_000,
      );
      log('catalog applied', { models: catalog.length, replicas: nodes * perNode, errors: answer.errors });
    };
    if (procs > 1) {
      // Each child is this command over its share of the nodes, without the catalog (applied here, once).
      const shared = argv.filter(
        (_, i, a) =>
          !['--nodes', '--first', '--fleet-proc', '--replicas-per-node'].some(
            (f) => a[i] === f || a[i - 1] === f || a[i]?.startsWith(`${f}=`),
          ),
      );
      const children = await startFleetChildren({ nodes, first, procs, argv: shared, log });
      await applyCatalog();
      log('sim-fleet running', { nodes, gpus, fabrics, processes: procs });
      return children;
    }
    const caPem = readFileSync(caFile, 'utf8');
    const pool = await openConfiguredDatabase(config.mysql);
    const store = new Store(pool);
    const ops = createCaOperations({ caDir, store });
    const fleet = await startSimFleet({
      nodes,
      first,
      gpus,
      fabrics,
      servers: [api.server],
      caPem,
      certificate: (id) => nodeCertificate(ops, store, caPem, join(stateDir, 'certs', id)),
      dir: join(stateDir, 'nodes'),
      parallel,
      log,
      ...(values.verbose
        ? { nodeLog: (node: string, msg: string, f?: Record<string, unknown>) => log(msg, { node, ...f }) }
        : {}),
    }).finally(() => pool.end());
    await applyCatalog();
    log('sim-fleet running', { nodes: fleet.nodes.length, gpus, fabrics });
    return fleet;
  });
}

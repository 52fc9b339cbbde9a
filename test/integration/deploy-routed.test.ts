/**
 * `ctl deploy` returns when the gateways route it (real Temporal, MariaDB, control plane, agent with the sim engine,
 * gateway roles with route push): the gateway writes its report as soon as it applies a pushed change, and the CLI
 * waits on the control plane's GET /v1/models/:name/routing until no live gateway misses a ready replica. A gateway
 * whose table is behind (no control plane to push to it, polling every ten minutes) is named, with what to do;
 * --no-wait does not wait. Prints ready → return for each deploy.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { doorAgentFromFiles, doorGet, type DoorAgent } from '../../lib/door-agent';
import { DrainStore } from '../../lib/store/drain';
import { workflowIds } from '../../lib/names';
import { parseNodeId, type ModelSpec } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent as NodeAgent } from '../../workers/agent/options';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { startGatewayRole, type GatewayRole } from '../../workers/gateway';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl, TEST_API_KEY } from '../helpers/cluster-parts';
import { freePort } from '../helpers/ports';
import { certClient, closeCertClients, writeGatewayCert, writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');
const NODE = parseNodeId('dr1');
const MODEL: ModelSpec = {
  name: 'routed-m',
  source: 'sim://routed-m',
  replicas: 1,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 0, args: ['--tokens-per-second', '0'] }],
};

describe('ctl deploy returns when the gateways route it (real control plane, agent, sim engine, gateways)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-deploy-routed-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let agent: NodeAgent | undefined;
  let gw: GatewayRole;
  let lagging: GatewayRole | undefined;
  let configFile = '';
  const figures: string[] = [];

  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand([...args, '--config', configFile], (s) => void (out += s));
    return out;
  };
  const startGw = async (over: Partial<ServerConfig['gateway']>): Promise<GatewayRole> =>
    startGatewayRole({
      config: {
        ...config,
        listeners: { ...config.listeners, gateway: { host: '127.0.0.1', port: await freePort() } },
        gateway: { ...config.gateway, ...over },
      },
    });
  /** Replicas of the model a gateway routes now (its in-memory table). */
  const routable = async (g: GatewayRole): Promise<number> => {
    const res = await fetch(`${g.url}/health/routes`, { headers: { authorization: `Bearer ${TEST_API_KEY}` } });
    return ((await res.json()) as { models: Record<string, number> }).models[MODEL.name] ?? 0;
  };
  const readyCount = async (): Promise<number> =>
    (await cp.store.listReplicas(MODEL.name)).filter((r) => r.state === 'ready').length;

  /** Runs `ctl …args` while polling MySQL every 5 ms for the `want`-th ready replica: ms from seen ready to return. */
  const timed = async (want: number, ...args: string[]): Promise<{ out: string; readyToReturnMs: number }> => {
    let readyAt = null as number | null;
    let polling = true;
    const poll = (async (): Promise<void> => {
      while (polling) {
        if (readyAt === null && (await readyCount()) >= want) readyAt = performance.now();
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    try {
      const out = await ctl(...args);
      const returnedAt = performance.now();
      polling = false;
      await poll;
      expect(readyAt).not.toBeNull();
      return { out, readyToReturnMs: returnedAt - (readyAt as number) };
    } finally {
      polling = false;
      await poll;
    }
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = {
      ...(await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [MODEL] })),
      engines: { sim: '1.0.0' },
    };
    configFile = join(dir, 'server.yaml');
    writeFileSync(configFile, stringify(config));
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    await writeOperatorCert(config, cp.store);
    await writeGatewayCert(config, cp.store);
    const { cert } = await certClient(config, cp.store, NODE);
    agent = await startAgent({
      nodeId: NODE,
      server: cp.url,
      tls: cert,
      nvidiaSmi: join(ROOT, 'test/fixtures/nvidia-smi'),
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      // The node's door: the replica is routed through it, and it serves the engine's signals the agent reads.
      door: { host: '127.0.0.1', port: 0 },
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'state'),
      stopEnginesOnExit: true,
      weights: { dir: join(dir, 'weights'), listen: { host: '127.0.0.1', port: 0 } },
      log: () => undefined,
    });
    await cp.client.workflow.getHandle(workflowIds.engines(NODE)).result();
    // Polling every ten minutes: only route push brings this gateway a new replica in time.
    gw = await startGw({ refreshMs: 600_000 });
  }, 180_000);

  afterAll(async () => {
    console.log(
      `ctl deploy, ready → returned (load ${(await import('node:os')).loadavg()[0].toFixed(2)}):\n${figures.join('\n')}`,
    );
    await cp?.client.workflow
      .getHandle(workflowIds.model(MODEL.name))
      .terminate()
      .catch(() => undefined);
    await lagging?.close();
    await gw?.close();
    await agent?.close();
    await cp?.close();
    await closeCertClients();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('deploy and scale return once the gateway routes the new replica, and a request through it is answered', async () => {
    for (const want of [1, 2]) {
      const args = want === 1 ? ['deploy', MODEL.name] : ['scale', MODEL.name, String(want)];
      const { out, readyToReturnMs } = await timed(want, ...args, '--timeout', '90');
      figures.push(
        `  ${args.slice(0, 1).join(' ')} to ${want}: ${readyToReturnMs.toFixed(0)} ms (${out.match(/\(\d+ ms after ready\)/)?.[0] ?? '?'})`,
      );
      expect(out).toContain(`${MODEL.name}: routed by the live gateway`);
      // At return, not after a wait: the gateway routes every ready replica and answers a request.
      expect(await routable(gw)).toBe(want);
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_API_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL.name, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
    }
  }, 180_000);

  test("the agent reads its replica's engine signals and the node's door serves them to a gateway certificate", async () => {
    const doorAgent = doorAgentFromFiles(config.tls, 2000);
    expect(doorAgent).not.toBeNull();
    try {
      const port = (agent as NodeAgent).inventory.door?.port as number;
      const replicas = (await cp.store.listReplicas(MODEL.name)).filter((r) => r.state === 'ready').map((r) => r.id);
      const signals = await waitFor(
        async () => {
          const r = await doorGet(
            doorAgent as DoorAgent,
            { host: '127.0.0.1', port, node: NODE, replica: '', base: `/nodes/${NODE}` },
            '/signals',
            2000,
          );
          const body = JSON.parse(r.body) as { replicas: Record<string, { waiting: number; ageMs: number }> };
          return replicas.every((id) => body.replicas[id]) && body.replicas;
        },
        { timeoutMs: 5000, what: "every ready replica's signal at the door" },
      );
      for (const id of replicas) {
        expect(signals[id]?.waiting).toBe(0);
        // Fresh as the gateways count it (they drop a signal older than 3 s); the agent reads every 500 ms.
        expect(signals[id]?.ageMs).toBeLessThan(3000);
      }
    } finally {
      doorAgent?.destroy();
    }
  });

  test('a gateway whose table is behind is named with what to do; --no-wait does not wait; without it deploy returns at once', async () => {
    const drains = new DrainStore(cp.store.pool);
    const before = new Set((await drains.liveReports()).map((r) => r.gatewayId));
    // No control plane to push to it (a closed port) and a ten-minute poll: it routes what it read at start.
    lagging = await startGw({ refreshMs: 600_000, controlPlanes: [`https://127.0.0.1:${await freePort()}`] });
    // Its first report is written in the background as it starts.
    const laggingId = await waitFor(
      async () => (await drains.liveReports()).map((r) => r.gatewayId).find((id) => !before.has(id)),
      { timeoutMs: 5000, what: "the new gateway's first report" },
    );

    const err = await ctl('scale', MODEL.name, '3', '--timeout', '90', '--route-timeout', '2').then(
      () => null,
      (e: Error) => e,
    );
    expect(err?.message).toContain('1 of 2 live gateways do not route its ready replicas 2 s after they became ready');
    expect(err?.message).toContain(`gateway ${laggingId} (reported`);
    for (const id of before) expect(err?.message).not.toContain(`gateway ${id} `);
    expect(err?.message).toContain("'route push lost'");
    expect(err?.message).toContain('--no-wait');
    // The up-to-date gateway routes all three; the lagging one still two.
    expect(await routable(gw)).toBe(3);
    expect(await routable(lagging)).toBe(2);

    // --no-wait: back as soon as the workflow took the request, with the lagging gateway still behind.
    const noWait = await ctl('deploy', MODEL.name, '--no-wait');
    expect(noWait).not.toContain('routed by');
    expect(noWait).not.toContain('ready');

    // Once it is gone (its row removed as it closes), deploy returns: every live gateway routes the model.
    await lagging.close();
    lagging = undefined;
    const { out, readyToReturnMs } = await timed(3, 'deploy', MODEL.name, '--timeout', '30');
    expect(out).toContain(`${MODEL.name}: routed by the live gateway`);
    figures.push(
      `  deploy of a model already served: ${readyToReturnMs.toFixed(0)} ms after its call (all ready before)`,
    );
  }, 180_000);
});

/**
 * The catalog is the desired state: a control plane started with one catalog deploys it; `llmgw ctl apply` with an
 * edited server.yaml adds a model, applies a changed count, rolls a changed profile make-before-break and, only with
 * --prune, drains and forgets a model the catalog dropped (the dry run says each, changing nothing). Profiles are
 * tried in catalog order. Real Temporal, MariaDB, control plane, node workers and sim engines; ctl as the operator.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { workflowIds } from '../../lib/names';
import type { ModelSpec, ReplicaRecord } from '../../lib/types';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { recordHistory } from '../helpers/histories';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const sim = (name: string, replicas: number, tps = '0', gpus = 1): ModelSpec => ({
  name,
  source: `sim://${name}`,
  replicas,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: gpus, args: ['--tokens-per-second', tps] }],
});
const FIRST = [sim('keep', 1), sim('grow', 1), sim('gone', 1)];
const EDITED = [sim('keep', 1, '1000'), sim('grow', 3), sim('added', 1)];
const FIT: ModelSpec = {
  name: 'fit',
  source: 'sim://fit',
  replicas: 1,
  profiles: [
    { name: 'big', engine: 'sim', nodes: 1, gpusPerNode: 8, args: [] },
    { name: 'small', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] },
  ],
};

describe('the catalog as the desired state', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-apply-'));
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();
  const file = (name: string, catalog: ModelSpec[]): string => {
    const f = join(dir, name);
    writeFileSync(f, stringify({ ...config, catalog }));
    return f;
  };
  const ctl = async (...args: string[]): Promise<string> => {
    let out = '';
    await ctlCommand(args, (s) => void (out += s));
    return out;
  };
  const live = async (model: string): Promise<ReplicaRecord[]> =>
    (await cp.store.listReplicas(model)).filter((r) => r.state !== 'stopped');
  const readyCount = (model: string, n: number): Promise<ReplicaRecord[]> =>
    waitFor(
      async () => {
        const rs = await live(model);
        if (rs.length !== n || rs.some((r) => r.state !== 'ready'))
          throw new Error(rs.map((r) => `${r.id} ${r.state} ${r.reason ?? ''}`).join('; ') || 'none');
        return rs;
      },
      { timeoutMs: 60_000, intervalMs: 200, what: `${n} replica(s) of ${model} ready and no other` },
    );

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: FIRST });
    for (const n of ['cat-a', 'cat-b']) workers.push(await startNodeWorker(temporal.address, n, pids));
    cp = await startControlPlane({
      config,
      workflowBundle: { codePath: await workflowBundlePath() },
      applyCatalog: true,
    });
    await writeOperatorCert(config, cp.store);
    for (const n of ['cat-a', 'cat-b']) await registerNode(cp, n, simInventory({ gpus: 4, fabric: false }));
  });

  afterAll(async () => {
    const models = ['keep', 'grow', 'gone', 'added', 'fit'];
    for (const m of models)
      for (const r of await cp.store.listReplicas(m))
        await cp.client.workflow
          .getHandle(workflowIds.replica(r.id))
          .terminate()
          .catch(() => undefined);
    await stopSimCluster({
      cp,
      model: 'keep',
      workflows: models.map(workflowIds.model),
      workers,
      pids,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
    rmSync(dir, { recursive: true, force: true });
  });

  test('a control plane started with a catalog deploys it', async () => {
    const applied = await cp.catalogApplied;
    expect(applied?.actions).toEqual(FIRST.map((m) => ({ kind: 'add', model: m.name, replicas: 1 })));
    for (const m of FIRST) await readyCount(m.name, 1);
  });

  test('ctl apply --dry-run says what an edited catalog changes, and changes nothing', async () => {
    const out = await ctl('apply', '--dry-run', '--config', file('edited.yaml', EDITED));
    expect(out.split('\n')).toEqual([
      `dry run: the catalog of ${join(dir, 'edited.yaml')} against the cluster`,
      expect.stringMatching(/^ {2}~ keep +roll 1 replica make-before-break, one at a time \(profiles changed\)$/),
      expect.stringMatching(/^ {2}~ grow +scale 1 → 3 replicas/),
      expect.stringMatching(/^ {2}\+ added +deploy 1 replica \(new in the catalog\)$/),
      expect.stringMatching(
        /^ {2}! gone +not in the catalog: kept with 1 replica \(llmgw ctl apply --prune drains and stops it\)$/,
      ),
      'nothing changed; llmgw ctl apply carries out the 3 changes above',
      '',
    ]);
    console.log(`ctl apply --dry-run:\n${out}`);
    expect((await cp.store.listModels()).map((m) => [m.name, m.replicas])).toEqual([
      ['gone', 1],
      ['grow', 1],
      ['keep', 1],
    ]);
    expect(
      await cp.client.workflow
        .getHandle(workflowIds.model('added'))
        .describe()
        .catch(() => null),
    ).toBeNull();
  });

  test('ctl apply adds, scales and rolls make-before-break; a dropped model is kept without --prune', async () => {
    const keep0 = (await live('keep'))[0] as ReplicaRecord;
    const out = await ctl('apply', '--config', file('edited.yaml', EDITED));
    console.log(`ctl apply:\n${out}`);
    expect(out).toMatch(/3 of 3 changes handed to the models' deployments/);
    await readyCount('added', 1);
    await readyCount('grow', 3);
    const [rolled] = await readyCount('keep', 1);
    // Its replacement served before the original stopped: the original's stop came after the replacement's ready.
    expect(rolled?.id).not.toBe(keep0.id);
    const events = (await cp.store.recentEvents(500)).reverse();
    const readyAt = events.findIndex((e) => e.replicaId === rolled?.id && e.kind === 'replica.ready');
    const stoppingAt = events.findIndex((e) => e.replicaId === keep0.id && e.kind === 'replica.stopping');
    expect(readyAt).toBeGreaterThanOrEqual(0);
    expect(stoppingAt).toBeGreaterThan(readyAt);
    expect(readFileSync(`/proc/${pids.get(`${rolled?.id}#0`)}/cmdline`, 'utf8').split('\0')).toEqual(
      expect.arrayContaining(['--tokens-per-second', '1000']),
    );
    expect(await live('gone')).toHaveLength(1);
    const models = await ctl('models', '--config', file('edited.yaml', EDITED));
    console.log(`ctl models:\n${models}`);
    expect(models).toMatch(/^gone +- +1 +1 +- /m);
    expect(models).toMatch(/^grow +3 +3 +3 +- +default \(sim, 1×1 GPU\)×3$/m);
  });

  test('ctl apply --prune drains and stops the dropped model, then forgets it; a ctl scale stands', async () => {
    const out = await ctl('apply', '--prune', '--config', file('edited.yaml', EDITED));
    console.log(`ctl apply --prune:\n${out}`);
    expect(out).toMatch(/^ {2}- gone +drain and stop 1 replica, then forget the model/m);
    await waitFor(async () => (await cp.store.listModels()).every((m) => m.name !== 'gone'), {
      timeoutMs: 60_000,
      what: 'the model gone to be forgotten',
    });
    expect(await live('gone')).toEqual([]);
    // The deployment's last step (its event and return) lands a moment after the rows are gone.
    const gone = cp.client.workflow.getHandle(workflowIds.model('gone'));
    await waitFor(async () => (await gone.describe()).status.name === 'COMPLETED', {
      timeoutMs: 30_000,
      what: "the model gone's deployment workflow to complete",
    });
    expect((await cp.store.recentEvents(100)).find((e) => e.kind === 'model.removed')?.message).toMatch(
      /gone-0 stopped, model forgotten/,
    );

    // Replay fixtures (LLMGW_RECORD_HISTORIES=1): a deployment that rolled its replica, and one that retired.
    recordHistory(temporal.address, 'model-rolled.json', workflowIds.model('keep'));
    recordHistory(temporal.address, 'model-retired.json', workflowIds.model('gone'));
    await ctl('scale', 'grow', '2', '--config', file('edited.yaml', EDITED));
    expect(await ctl('apply', '--dry-run', '--config', file('edited.yaml', EDITED))).toMatch(
      /! grow +kept at 2 replicas by llmgw ctl scale \(the catalog says 3, unchanged since the last apply\)/,
    );
  });

  test('profiles are tried in catalog order: the first that fits is placed, and a waiting replica names each', async () => {
    await ctl('apply', '--config', file('fit.yaml', [...EDITED, FIT]));
    const [r] = await readyCount('fit', 1);
    expect(r?.profile).toBe('small');
    expect(await ctl('replicas', '--model', 'fit', '--config', file('fit.yaml', [...EDITED, FIT]))).toMatch(
      /^fit-0 +fit +small +ready +cat-[ab]#0\[\d\]/m,
    );
    await cp.store.setNodeState('cat-a', 'cordoned');
    await cp.store.setNodeState('cat-b', 'cordoned');
    await ctl('scale', 'fit', '2', '--no-wait', '--config', file('fit.yaml', [...EDITED, FIT]));
    const waiting = await waitFor(async () => (await live('fit')).find((x) => x.state === 'waiting'), {
      timeoutMs: 30_000,
      what: 'a second fit replica waiting',
    });
    expect(waiting.reason).toBe(
      'none of the 2 profiles of fit fits (tried in catalog order): [big] no node can take fit/big (sim, 8 GPUs): cat-a: cordoned; cat-b: cordoned [small] no node can take fit/small (sim, 1 GPU): cat-a: cordoned; cat-b: cordoned',
    );
  });
});

/**
 * The cluster page in a real headless chromium against a real control plane (Temporal dev server, MariaDB,
 * three sim nodes with node workers and sim engines, a gateway role): sign-in refused with a wrong key; the
 * session cookie's flags; the overview shows the nodes and replicas, and the requests sent through the gateway
 * as a requests/s sparkline and TTFT p50/p99; a drain started from the page moves the replicas and the
 * page shows them move, live. With LLMGW_SCREENSHOTS=1 (npm run screenshots) it saves each view into
 * docs/cluster-page/.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { workflowIds } from '../../lib/names';
import { ModelStatsStore } from '../../lib/store/model-stats';
import { PageAuthStore } from '../../lib/store/page-auth';
import { startModelDeployment } from '../../lib/workflow-starts';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { startGatewayRole } from '../../workers/gateway';
import type { ModelTraffic } from '../../gateway/control/page/traffic';
import { workflowBundlePath } from '../helpers/bundle';
import { startChromium, type Browser, type BrowserPage } from '../helpers/chromium';
import { dropDatabase, startTestTemporal, TEST_API_KEY, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { registerNode, simInventory, startNodeWorker, stopSimCluster, type NodeWorker } from '../helpers/node-workers';
import { certClient } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'solo';
const SHOTS = process.env.LLMGW_SCREENSHOTS ? join(__dirname, '../../docs/cluster-page') : null;

describe('the cluster page', () => {
  let temporal: DevServer;
  let config: ServerConfig;
  let cp: ControlPlane;
  let browser: Browser;
  let page: BrowserPage;
  let key: string;
  const workers: NodeWorker[] = [];
  const pids = new Map<string, number>();

  const shot = async (name: string): Promise<void> => {
    if (!SHOTS) return;
    mkdirSync(SHOTS, { recursive: true });
    writeFileSync(join(SHOTS, `${name}.png`), await page.screenshot());
  };
  const view = async (name: string): Promise<void> => {
    await page.eval(`location.hash = '#${name}'`);
    await page.until(`document.getElementById('view').dataset.view === '${name}'`, `the ${name} view`);
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({
      temporalAddress: temporal.address,
      mysqlUrl: testMysqlUrl(),
      catalog: [
        {
          name: MODEL,
          source: 'sim://solo',
          replicas: 2,
          profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: [] }],
        },
      ],
    });
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    // n1 alone first, with room for both replicas, so a drain of it has two to move.
    await registerNode(cp, 'n1', simInventory({ gpus: 2 }));
    workers.push(await startNodeWorker(temporal.address, 'n1', pids, { cp }));
    await startModelDeployment(cp.client, MODEL);
    await waitFor(async () => (await cp.store.listReplicas(MODEL)).filter((r) => r.state === 'ready').length === 2, {
      timeoutMs: 60_000,
      what: 'both replicas ready on n1',
    });
    // A few requests through a gateway, streamed and not: its model stats reach MySQL when it closes (its last
    // write), and the overview's traffic figures within the page's 10 s cache.
    const gw = await startGatewayRole({ config });
    for (const stream of [true, false, true, false, true, false]) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TEST_API_KEY}` },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
    await gw.close();
    for (const id of ['n2', 'n3']) {
      await registerNode(cp, id, simInventory({ gpus: 1, fabric: id === 'n2' }));
      workers.push(await startNodeWorker(temporal.address, id, pids, { cp }));
    }
    // As `llmgw ctl page-key create` does: through the operator API, with an operator certificate.
    const { fetch: opFetch } = await certClient(cp.config, cp.store, 'ops', { role: 'operator' });
    const created = await opFetch(`${cp.url}/v1/page-keys`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'test-operator' }),
    });
    expect(created.status).toBe(200);
    ({ key } = (await created.json()) as { key: string });
    expect(await new PageAuthStore(cp.store.pool).listKeys()).toMatchObject([
      { name: 'test-operator', revokedAt: null },
    ]);
    browser = await startChromium();
    page = await browser.newPage();
  });

  afterAll(async () => {
    await browser?.close();
    await stopSimCluster({
      cp,
      model: MODEL,
      workflows: [workflowIds.model(MODEL), workflowIds.drain('n1')],
      workers,
      pids,
      temporal,
      mysqlUrl: config.mysql.url,
      dropDatabase,
    });
  });

  test('a wrong key is refused and nothing of the cluster is shown', async () => {
    await page.setViewport(1280, 800);
    await page.navigate(`${cp.url}/page/`);
    await page.until(`!document.getElementById('signin').hidden`, 'the sign-in form');
    await shot('sign-in');
    await page.eval(
      `document.getElementById('key').value = 'llmgw-page-wrong'; document.querySelector('#signin button').click()`,
    );
    const error = await page.until<string>(`document.getElementById('signin-error').textContent`, 'the refusal');
    expect(error).toMatch(/not a cluster page key/);
    expect(await page.eval(`document.getElementById('view').textContent`)).toBe('');
    // The data routes refuse too, whatever the script does.
    const statuses = await page.eval<number[]>(
      `Promise.all(['/page/api/snapshot', '/page/api/session', '/v1/nodes'].map((u) => fetch(u).then((r) => r.status)))`,
    );
    expect(statuses).toEqual([401, 401, 401]);
    // An agent or operator API route still needs its certificate: a node's is refused on the page's neighbours.
    const { fetch: nodeFetch } = await certClient(cp.config, cp.store, 'n1');
    expect((await nodeFetch(`${cp.url}/v1/nodes`)).status).toBe(403);
  });

  test('the right key signs in with an HttpOnly, Secure, SameSite=Strict cookie; the overview shows the cluster', async () => {
    await page.eval(
      `document.getElementById('key').value = ${JSON.stringify(key)}; document.querySelector('#signin button').click()`,
    );
    await page.until(`document.querySelector('#card-nodes .big')?.textContent === '3'`, 'three nodes on the overview');
    const { cookies } = await page.send<{
      cookies: { name: string; httpOnly: boolean; secure: boolean; sameSite?: string; path: string }[];
    }>('Network.getCookies', { urls: [cp.url] });
    const session = cookies.find((c) => c.name === '__Host-llmgw-page');
    expect(session).toMatchObject({ httpOnly: true, secure: true, sameSite: 'Strict', path: '/' });
    // The script cannot read it.
    expect(await page.eval(`document.cookie`)).toBe('');
    expect(await page.eval(`document.querySelector('#card-replicas .big').textContent`)).toBe('2');
    expect(await page.eval(`document.querySelector('#card-gpus .big').textContent`)).toBe('2/4');
    expect(await page.eval(`document.querySelector('#models tr[data-model="${MODEL}"]').textContent`)).toContain('2');
    // The requests sent through the gateway: a sparkline that is not flat, and a TTFT p50.
    const row = `#traffic tr[data-traffic="${MODEL}"]`;
    await page.until(`document.querySelector('${row} svg.spark')`, 'the requests/s sparkline', 20_000);
    const points = await page.eval<string>(`document.querySelector('${row} .spark-line').getAttribute('points')`);
    const ys = points.split(' ').map((p) => Number(p.split(',')[1]));
    expect(Math.min(...ys)).toBeLessThan(Math.max(...ys));
    expect(Number(await page.eval<string>(`document.querySelector('${row} [data-p50]').dataset.p50`))).toBeGreaterThan(
      0,
    );
    const snapshot = await page.eval<{ overview: { traffic: ModelTraffic[] } }>(
      `fetch('/page/api/snapshot').then((r) => r.json())`,
    );
    expect(snapshot.overview.traffic).toMatchObject([{ model: MODEL, requests: 6, errors5xx: 0 }]);
    expect(snapshot.overview.traffic[0]!.ttftP99Ms).toBeGreaterThanOrEqual(snapshot.overview.traffic[0]!.ttftP50Ms!);
    if (SHOTS) {
      // For the screenshot only: an hour of made-up traffic from a second gateway id, so the sparkline has a shape.
      const minute = Date.now() - (Date.now() % 60_000);
      await new ModelStatsStore(cp.store.pool).write(
        'screenshot-history',
        Array.from({ length: 59 }, (_, i) => {
          const requests = Math.round(600 + 400 * Math.sin(i / 6) + 15 * (i % 7));
          const ttft = [0, 0, 0, Math.round(requests * 0.3), Math.round(requests * 0.6), 0, 0, 0, 0, 0, 0];
          ttft[5] = requests - ttft[3]! - ttft[4]!;
          return {
            minute: minute - (59 - i) * 60_000,
            model: MODEL,
            requests,
            errors5xx: i % 20 ? 0 : 3,
            errors4xx: 0,
            ttft,
          };
        }),
      );
      await page.until(`document.querySelector('${row} [data-p50]')?.dataset.p50 > 50`, 'the seeded hour', 20_000);
    }
    await shot('overview');
    await view('nodes');
    expect(
      await page.eval(`[...document.querySelectorAll('#nodes tr[data-node]')].map((r) => r.dataset.node)`),
    ).toEqual(['n1', 'n2', 'n3']);
    await shot('nodes');
    await view('replicas');
    expect(
      await page.eval(`[...document.querySelectorAll('#replicas tr[data-replica]')].map((r) => r.dataset.nodes)`),
    ).toEqual(['n1', 'n1']);
    await shot('replicas');
    await view('fabrics');
    await shot('fabrics');
    await view('workflows');
    await page.until(
      `document.querySelector('#workflows tr[data-workflow="model/${MODEL}"] a')?.href.includes('/workflows/model%2F')`,
      'the deployment linked into the Temporal UI',
    );
    await shot('workflows');
    await view('events');
    await shot('events');
    if (SHOTS) {
      await view('overview');
      await page.setViewport(390, 844, true);
      await shot('overview-phone');
      await view('nodes');
      await shot('nodes-phone');
      await page.setViewport(1280, 800);
    }
  });

  test('an action without the CSRF token is refused', async () => {
    const status = await page.eval<number>(
      `fetch('/page/api/nodes/n3/cordon', { method: 'POST' }).then((r) => r.status)`,
    );
    expect(status).toBe(403);
    expect(await cp.store.nodeState('n3' as never)).toBe('ready');
  });

  test('a drain started from the page moves both replicas off n1, and the page shows them move', async () => {
    await view('nodes');
    await page.eval(`document.querySelector('#nodes tr[data-node="n1"] button[data-action="drain"]').click()`);
    await page.until(`document.getElementById('confirm').open`, 'the confirmation');
    expect(await page.eval(`document.getElementById('confirm-text').textContent`)).toMatch(/^Drain n1\?/);
    await shot('confirm-drain');
    await page.eval(`document.getElementById('confirm-ok').click()`);
    const flash = await page.until<string>(`document.querySelector('#flash a')?.href`, 'the Temporal UI link');
    expect(flash).toContain('/workflows/drain%2Fn1');
    await page.until(
      `document.querySelector('#nodes tr[data-node="n1"] [data-state]')?.dataset.state === 'cordoned'`,
      'n1 shown cordoned',
      5000,
    );
    await view('replicas');
    // Live: each time the store says where the replicas are, the page says so too within about a second.
    const placed = async (): Promise<string> =>
      (await cp.store.listReplicas(MODEL))
        .filter((r) => r.state === 'ready')
        .map((r) => r.shards.map((s) => s.nodeId).join('+'))
        .sort()
        .join(',');
    const shown = (): Promise<string> =>
      page.eval<string>(
        `[...document.querySelectorAll('#replicas tr[data-replica]')].filter((r) => r.querySelector('[data-state]').dataset.state === 'ready').map((r) => r.dataset.nodes).sort().join(',')`,
      );
    let moves = 0;
    let last = await placed();
    await waitFor(
      async () => {
        const now = await placed();
        if (now !== last) {
          last = now;
          moves++;
          await waitFor(async () => (await shown()) === now, { timeoutMs: 2500, what: `the page to show ${now}` });
        }
        return !now.includes('n1') && now.split(',').length === 2 && now;
      },
      { timeoutMs: 120_000, intervalMs: 200, what: 'both replicas moved off n1' },
    );
    expect(moves).toBeGreaterThanOrEqual(1);
    await waitFor(async () => (await shown()) === last, { timeoutMs: 2500, what: `the page to show ${last}` });
    await shot('replicas-after-drain');
  });
});

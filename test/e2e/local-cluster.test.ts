/**
 * The README's first command, inside the test: the whole local cluster (Temporal dev server, control
 * plane, gateway, three sim-node agents as real processes), the catalog deployed; a chat completion
 * streams back through the gateway with the openai client; the CLI lists the nodes.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { startCluster, type Cluster } from '../../cli/cluster/run';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { freePort } from '../helpers/ports';

const run = promisify(execFile);
const LLMGW = resolve(__dirname, '../../bin/llmgw.js');

describe('the local cluster', () => {
  let cluster: Cluster;
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-e2e-'));
  const mysqlUrl = testMysqlUrl();
  const progress: string[] = [];

  beforeAll(async () => {
    // A block of ports of its own, so the test passes beside a running local cluster.
    const base = (await freePort()) % 20000 + 30000;
    cluster = await startCluster({ stateDir, basePort: base, mysqlUrl, progress: (l) => progress.push(l) });
  }, 240_000);

  afterAll(async () => {
    await cluster?.close();
    await dropDatabase(mysqlUrl);
    rmSync(stateDir, { recursive: true, force: true });
  }, 60_000);

  test('deploys the catalog and reports each step', () => {
    expect(progress.some((l) => l.includes('[5/5] deploying the catalog'))).toBe(true);
    expect(progress.some((l) => /sim-large: 1 of 1 replicas ready/.test(l))).toBe(true);
    expect(progress.some((l) => /sim-small: 2 of 2 replicas ready/.test(l))).toBe(true);
  });

  test('a chat completion streams through the gateway from the 2-node model', async () => {
    const client = new OpenAI({ baseURL: `${cluster.gatewayUrl}/v1`, apiKey: 'local' });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id).sort()).toEqual(['sim-large', 'sim-small']);
    const stream = await client.chat.completions.create({ model: 'sim-large', stream: true, max_tokens: 8, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hello there' }] });
    let text = '';
    let chunks = 0;
    let usage: { completion_tokens: number } | null | undefined;
    for await (const c of stream) {
      chunks++;
      text += c.choices[0]?.delta?.content ?? '';
      if (c.usage) usage = c.usage;
    }
    expect(chunks).toBeGreaterThanOrEqual(8);
    expect(text.split(' ').length).toBe(8);
    expect(usage?.completion_tokens).toBe(8);
    await expect(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({ status: 404 });
  });

  test('the CLI lists the nodes with their fabric, GPUs and replicas', async () => {
    const { stdout } = await run(process.execPath, [LLMGW, 'ctl', 'nodes', '--config', cluster.configFile]);
    expect(stdout).toMatch(/^NODE\s+STATE\s+GPUS\s+FABRIC/m);
    expect(stdout).toMatch(/^sim-a\s+ready\s+\d\/2\s+ib-a/m);
    expect(stdout).toMatch(/^sim-b\s+ready\s+\d\/2\s+ib-a/m);
    expect(stdout).toMatch(/^sim-c\s+ready\s+\d\/2\s+island/m);
    const { stdout: json } = await run(process.execPath, [LLMGW, 'ctl', 'replicas', '--json', '--config', cluster.configFile]);
    const replicas = JSON.parse(json) as { id: string; state: string; shards: { nodeId: string }[] }[];
    const large = replicas.find((r) => r.id === 'sim-large-0');
    expect(large?.state).toBe('ready');
    expect(large?.shards.map((s) => s.nodeId).sort()).toEqual(['sim-a', 'sim-b']);
  });
});

/**
 * The README's first command, inside the test: the whole local cluster (Temporal dev server, control
 * plane, gateway, three sim-node agents as real processes), the catalog deployed; a chat completion
 * streams back through the gateway with the openai client; the CLI lists the nodes.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Connection, WorkflowClient } from '@temporalio/client';
import OpenAI from 'openai';
import { workflowIds } from '../../lib/names';
import { pidAlive, pidCommandLine } from '../../lib/process';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';
import { clusterBasePort } from '../helpers/ports';
import { scrape, valueOf } from '../helpers/prom-text';
import { waitFor } from '../helpers/wait';

const run = promisify(execFile);
const LLMGW = resolve(__dirname, '../../bin/llmgw.js');

/** `llmgw cluster` as the README runs it: its own process group, as a terminal's foreground job. */
interface Running {
  child: ChildProcess;
  lines: string[];
}
function startClusterProcess(stateDir: string, basePort: number, mysqlUrl: string, extra: string[] = []): Running {
  const child = spawn(
    process.execPath,
    [LLMGW, 'cluster', '--state-dir', stateDir, '--base-port', String(basePort), '--mysql-url', mysqlUrl, ...extra],
    { stdio: ['ignore', 'pipe', 'pipe'], detached: true },
  );
  const lines: string[] = [];
  let buf = '';
  const feed = (b: Buffer): void => {
    buf += b.toString();
    const parts = buf.split('\n');
    buf = parts.pop() ?? '';
    lines.push(...parts);
  };
  child.stdout?.on('data', feed);
  child.stderr?.on('data', feed);
  return { child, lines };
}
/**
 * Resolves with its output once it says it is up; fails at once if it exits first (not at the timeout), with the
 * output's last lines (the reason: the role that died and its log's tail) before the rest, since a CI digest keeps
 * only the head of a long message.
 */
const up = (r: Running): Promise<string[]> =>
  waitFor(
    () => {
      if (r.child.exitCode !== null || r.child.signalCode !== null) return { exited: true as const };
      return r.lines.some((l) => l.includes('llmgw local cluster is up')) ? { exited: false as const } : undefined;
    },
    { timeoutMs: 180_000, what: 'llmgw cluster to come up' },
  ).then(
    ({ exited }) => {
      if (!exited) return r.lines;
      throw new Error(
        `llmgw cluster exited (${r.child.signalCode ?? `code ${r.child.exitCode}`}) before it was up; its last lines:\n` +
          `${r.lines.slice(-25).join('\n')}\nwhole output:\n${r.lines.join('\n')}`,
      );
    },
    (err: Error) => {
      throw new Error(`${err.message}; its last lines:\n${r.lines.slice(-25).join('\n')}`);
    },
  );
/** Its exit code, once it exited of itself (null: killed by a signal). */
const exitCode = (r: Running, what: string): Promise<number | null> =>
  waitFor(() => (r.child.exitCode !== null || r.child.signalCode !== null ? { code: r.child.exitCode } : undefined), {
    timeoutMs: 60_000,
    what,
  }).then((e) => e.code);
/** Every process below `root` (the roles, the Temporal server, the agents' engines). */
async function descendants(root: number): Promise<number[]> {
  const { stdout } = await run('ps', ['-eo', 'pid=,ppid=']);
  const kids = new Map<number, number[]>();
  for (const line of stdout.trim().split('\n')) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    if (pid !== undefined && ppid !== undefined) kids.set(ppid, [...(kids.get(ppid) ?? []), pid]);
  }
  const out: number[] = [];
  const walk = (p: number): void =>
    (kids.get(p) ?? []).forEach((k) => {
      out.push(k);
      walk(k);
    });
  walk(root);
  return out;
}
const alive = pidAlive;
/** The processes of `pids` still running, each with its command line (so a failure names what was left). */
const leftOver = (pids: number[]): string[] => pids.filter(alive).map((p) => `${p} ${pidCommandLine(p) ?? '?'}`);
/** The engine and Temporal processes are children of children; Ctrl-C goes to the whole group. */
const ctrlC = (r: Running): boolean => process.kill(-(r.child.pid as number), 'SIGINT');

describe('the local cluster', () => {
  let first: Running;
  let basePort = 0;
  let gatewayUrl = '';
  let apiKey = '';
  let configFile = '';
  const stateDir = mkdtempSync(join(tmpdir(), 'llmgw-e2e-'));
  const mysqlUrl = testMysqlUrl();
  let progress: string[] = [];
  let llama = false;

  beforeAll(async () => {
    // A block of ports of its own, so the test passes beside a running local cluster.
    basePort = await clusterBasePort();
    first = startClusterProcess(stateDir, basePort, mysqlUrl);
    progress = await up(first);
    gatewayUrl = /OpenAI base URL\s+(\S+)\/v1/.exec(progress.join('\n'))?.[1] ?? '';
    // The key this start made, from the banner (keys of earlier starts stay valid, so it serves the later ones).
    apiKey = /API key\s+(llmgw-\S+)/.exec(progress.join('\n'))?.[1] ?? '';
    expect(progress.join('\n')).toContain(`-H 'authorization: Bearer ${apiKey}'`);
    configFile = /^\s+config\s+(\S+)$/m.exec(progress.join('\n'))?.[1] ?? '';
    llama = progress.some((l) => l.includes('the catalog adds tiny-llama'));
  }, 240_000);

  afterAll(async () => {
    for (const r of [first, again, third, fourth])
      if (r && r.child.exitCode === null)
        try {
          process.kill(-(r.child.pid as number), 'SIGKILL');
        } catch {
          /* gone */
        }
    await dropDatabase(mysqlUrl);
    // KEEP_E2E=1 keeps the state dir (logs, temporal.db) for a post-mortem.
    if (!process.env.KEEP_E2E) rmSync(stateDir, { recursive: true, force: true });
  }, 60_000);
  let again: Running | undefined;
  let third: Running | undefined;
  let fourth: Running | undefined;

  test('deploys the catalog and reports each step', () => {
    expect(progress.some((l) => l.includes('[5/5] deploying the catalog'))).toBe(true);
    expect(progress.some((l) => /sim-large: 1 of 1 replicas ready/.test(l))).toBe(true);
    expect(progress.some((l) => /sim-small: 2 of 2 replicas ready/.test(l))).toBe(true);
  });

  test("the llmgw-ca worker runs over the CA directory and published a CRL; the control plane's tls.ca has no key beside it", async () => {
    const crl = await waitFor(
      () => existsSync(join(stateDir, 'ca/crl.pem')) && readFileSync(join(stateDir, 'ca/crl.pem'), 'utf8'),
      { timeoutMs: 20_000, what: 'the CA worker to write ca/crl.pem' },
    );
    expect(crl).toMatch(/^-----BEGIN X509 CRL-----/);
    expect(readFileSync(join(stateDir, 'logs/ca-worker.log'), 'utf8')).toMatch(/ca worker running/);
    expect(existsSync(join(stateDir, 'certs/ca.crt'))).toBe(true);
    expect(existsSync(join(stateDir, 'certs/ca.key'))).toBe(false);
  });

  test('a chat completion streams through the gateway from the 2-node model', async () => {
    const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id).sort()).toEqual(
      llama ? ['sim-large', 'sim-small', 'tiny-llama'] : ['sim-large', 'sim-small'],
    );
    const stream = await client.chat.completions.create({
      model: 'sim-large',
      stream: true,
      max_tokens: 8,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hello there' }],
    });
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
    await expect(
      client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    ).rejects.toMatchObject({ status: 404 });
  });

  test("the banner lists every role's metrics page; each parses, and the gateway's counts a request", async () => {
    const block = /^\s+metrics\s+([\s\S]*?)\n\n/m.exec(progress.join('\n'))?.[1] ?? '';
    const pages = new Map(
      block
        .split('\n')
        .map((l) => /^\s*(.+?) (http:\/\/\S+\/metrics)$/.exec(l))
        .filter((m) => m !== null)
        .map((m) => [m[1], m[2]]),
    );
    expect([...pages.keys()].sort()).toEqual(
      [
        'ca-worker',
        'ca-worker temporal',
        'control-plane',
        'control-plane temporal',
        'gateway',
        'sim-a',
        'sim-b',
        'sim-c',
      ].sort(),
    );
    const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey });
    await client.chat.completions.create({ model: 'sim-small', messages: [{ role: 'user', content: 'hi' }] });
    for (const [role, url] of pages) {
      const families = await scrape(url);
      expect({ role, series: families.size > 0 }).toEqual({ role, series: true });
    }
    const gw = await scrape(pages.get('gateway') as string);
    expect(valueOf(gw, 'llmgw_gateway_requests_total', { model: 'sim-small', status: '200' })).toBeGreaterThanOrEqual(
      1,
    );
    const cp = await waitFor(
      async () => {
        const m = await scrape(pages.get('control-plane') as string);
        return valueOf(m, 'llmgw_control_nodes', { state: 'ready' }) === 3 ? m : null;
      },
      { timeoutMs: 15_000, intervalMs: 1000, what: 'three ready nodes on the control plane page' },
    );
    expect(valueOf(cp, 'llmgw_control_replicas', { state: 'ready' })).toBeGreaterThanOrEqual(3);
    const sdk = await scrape(pages.get('control-plane temporal') as string);
    expect([...sdk.keys()].some((k) => k.startsWith('temporal_'))).toBe(true);
  });

  test('with llama.cpp built here the cluster offers tiny-llama on a real llama-server, and says so either way', async () => {
    // Whether this machine has built llama.cpp (set-up's background build may finish at any time): the cluster's
    // own line says what it found, exactly one of the two.
    const found = progress.filter((l) =>
      /llama\.cpp b\d+ found \(.*\): every node offers it, and the catalog adds tiny-llama/.test(l),
    );
    const missing = progress.filter((l) =>
      /llama\.cpp not built here: tiny-llama is left out \(set-up builds it in the background/.test(l),
    );
    expect(found.length + missing.length).toBe(1);
    expect(llama).toBe(found.length === 1);
    if (!llama) return;
    expect(progress.some((l) => /tiny-llama: 1 of 1 replicas ready/.test(l))).toBe(true);
    const client = new OpenAI({ baseURL: `${gatewayUrl}/v1`, apiKey, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'tiny-llama',
      stream: true,
      max_tokens: 8,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hello' }],
    });
    let text = '';
    let usage: { completion_tokens: number } | null | undefined;
    for await (const c of stream) {
      text += c.choices[0]?.delta?.content ?? '';
      if (c.usage) usage = c.usage;
    }
    expect(text).toMatch(/^[a-z ]+$/);
    expect(usage?.completion_tokens).toBe(8);
  });

  test('ctl drain of a node whose replica fits nowhere else waits, says why, and times out naming it', async () => {
    const ctl = (...args: string[]): Promise<{ stdout: string; stderr: string }> =>
      run(process.execPath, [LLMGW, 'ctl', ...args, '--config', configFile]);
    // Single-node replicas take the island first: sim-small's two sit on sim-c. Two more take the GPU sim-large left
    // free on sim-a and on sim-b, and then every GPU of the cluster is held.
    await ctl('scale', 'sim-small', '4');
    await waitFor(
      async () => {
        const { stdout } = await ctl('replicas', '--json');
        const ready = (JSON.parse(stdout) as { model: string; state: string; shards: { nodeId: string }[] }[]).filter(
          (r) => r.model === 'sim-small' && r.state === 'ready',
        );
        return ready.length === 4 && ready.filter((r) => r.shards[0]?.nodeId === 'sim-c').length === 2;
      },
      { timeoutMs: 30_000, what: '4 sim-small replicas ready, 2 of them on sim-c' },
    );
    const err = await ctl('drain', 'sim-c', '--timeout', '4').then(
      () => null,
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect(err).not.toBeNull();
    expect(err?.code).toBe(1);
    expect(err?.stdout).toMatch(/workflow drain\/sim-c/);
    // With llama.cpp built, tiny-llama (no GPU) sits on the island too, and moves (to a fabric node) before or after.
    expect(err?.stdout).toMatch(
      llama
        ? /sim-c: moving, moved [01] of 3; moving sim-small-\d → sim-small-\d waiting — no node can take sim-small\/default/
        : /sim-c: moving, moved 0 of 2; moving sim-small-\d → sim-small-\d waiting — no node can take sim-small\/default/,
    );
    expect(err?.stderr).toMatch(
      /drain of sim-c timed out after 4s moving sim-small-\d: its replacement sim-small-\d is waiting — .*0 of 1 GPUs free.*the node stays cordoned \(llmgw ctl uncordon sim-c to undo\)/,
    );
    expect((await ctl('uncordon', 'sim-c')).stdout).toBe('sim-c: ready\n');
    await ctl('scale', 'sim-small', '2');
    await waitFor(
      async () => {
        const { stdout } = await ctl('replicas', '--json');
        const live = (JSON.parse(stdout) as { id: string; model: string; state: string }[]).filter(
          (r) => r.model === 'sim-small' && r.state !== 'stopped',
        );
        return live.length === 2 && live.every((r) => r.state === 'ready');
      },
      { timeoutMs: 30_000, what: 'sim-small back to 2 ready replicas' },
    );
  }, 90_000);

  test('the CLI lists the nodes with their fabric, GPUs and replicas', async () => {
    const { stdout } = await run(process.execPath, [LLMGW, 'ctl', 'nodes', '--config', configFile]);
    expect(stdout).toMatch(/^NODE\s+STATE\s+GPUS\s+FABRIC/m);
    expect(stdout).toMatch(/^sim-a\s+ready\s+\d\/2\s+ib-a/m);
    expect(stdout).toMatch(/^sim-b\s+ready\s+\d\/2\s+ib-a/m);
    expect(stdout).toMatch(/^sim-c\s+ready\s+\d\/2\s+island/m);
    const { stdout: json } = await run(process.execPath, [LLMGW, 'ctl', 'replicas', '--json', '--config', configFile]);
    const replicas = JSON.parse(json) as { id: string; state: string; shards: { nodeId: string }[] }[];
    const large = replicas.find((r) => r.id === 'sim-large-0');
    expect(large?.state).toBe('ready');
    expect(large?.shards.map((s) => s.nodeId).sort()).toEqual(['sim-a', 'sim-b']);
  });

  test("every replica is routed through its node's door (one port per node), with the gateway certificate the cluster issued", async () => {
    const doorPort = { 'sim-a': basePort + 10, 'sim-b': basePort + 11, 'sim-c': basePort + 12 } as const;
    expect(progress.join('\n')).toContain(
      `node doors        ${Object.entries(doorPort)
        .map(([id, port]) => `${id} https://127.0.0.1:${port}`)
        .join(', ')}`,
    );
    const { stdout } = await run(process.execPath, [LLMGW, 'ctl', 'replicas', '--json', '--config', configFile]);
    const ready = (
      JSON.parse(stdout) as { id: string; state: string; endpoint: string | null; shards: { nodeId: string }[] }[]
    ).filter((r) => r.state === 'ready');
    expect(ready.length).toBeGreaterThanOrEqual(3);
    for (const r of ready) {
      const node = r.shards[0]?.nodeId as keyof typeof doorPort; // rank 0's node (shards come in rank order)
      expect({ id: r.id, endpoint: r.endpoint }).toEqual({
        id: r.id,
        endpoint: `https://127.0.0.1:${doorPort[node]}/nodes/${node}/replicas/${r.id}`,
      });
    }
    // The door takes only a gateway certificate: a client without one is refused there, not served by an engine.
    const refused = await run('curl', [
      '-sk',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      `${ready[0]?.endpoint}/health`,
    ]).then(
      (r) => r.stdout,
      (e: { stdout: string }) => e.stdout,
    );
    expect(refused).toBe('401');
  });

  test('Ctrl-C stops every process it started; running it again reuses the state; after a kill -9 the next run recovers', async () => {
    const tree = await descendants(first.child.pid as number);
    expect(tree.length).toBeGreaterThanOrEqual(7); // temporal, control plane, gateway, 3 agents, engines
    const connection = await Connection.connect({ address: `127.0.0.1:${basePort}` });
    const runId = async (): Promise<string> =>
      (await new WorkflowClient({ connection }).getHandle(workflowIds.model('sim-small')).describe()).runId;
    const before = await runId();
    await connection.close();

    const stoppedAt = Date.now();
    ctrlC(first);
    expect(await exitCode(first, 'llmgw cluster to exit after Ctrl-C')).toBe(0);
    console.log(`Ctrl-C: llmgw cluster exited ${Date.now() - stoppedAt}ms after the signal`);
    expect(leftOver(tree)).toEqual([]);

    again = startClusterProcess(stateDir, basePort, mysqlUrl);
    const restartedAt = Date.now();
    await up(again);
    console.log(`second start (state reused): up in ${Date.now() - restartedAt}ms`);
    const conn2 = await Connection.connect({ address: `127.0.0.1:${basePort}` });
    expect(
      (await new WorkflowClient({ connection: conn2 }).getHandle(workflowIds.model('sim-small')).describe()).runId,
    ).toBe(before);
    await conn2.close();
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ model: 'sim-small', max_tokens: 3, messages: [{ role: 'user', content: 'again' }] }),
    });
    expect(res.status).toBe(200);
    // Killed outright (no Ctrl-C): each role notices its parent is gone and stops itself with its engines;
    // the Temporal server outlives it, and the next start stops that one first.
    const tree2 = await descendants(again.child.pid as number);
    const temporalPid = Number(readFileSync(join(stateDir, 'temporal.pid'), 'utf8'));
    expect(tree2).toContain(temporalPid);
    process.kill(again.child.pid as number, 'SIGKILL');
    await waitFor(() => leftOver(tree2.filter((p) => p !== temporalPid)).length === 0, {
      timeoutMs: 20_000,
      what: 'the roles and engines of a killed llmgw cluster to stop themselves (all but Temporal)',
    }).catch((err: Error) => {
      throw new Error(`${err.message}; still running: ${leftOver(tree2).join('; ')}`);
    });
    // Temporal outlives it (it logs to a file, so no closed pipe takes it down).
    expect(alive(temporalPid)).toBe(true);

    third = startClusterProcess(stateDir, basePort, mysqlUrl);
    const lines = await up(third);
    expect(lines.join('\n')).toContain(`stopping the Temporal server an earlier run left behind (pid ${temporalPid})`);
    expect(alive(temporalPid)).toBe(false);
    const res2 = await fetch(`${gatewayUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({
        model: 'sim-large',
        max_tokens: 3,
        messages: [{ role: 'user', content: 'after a crash' }],
      }),
    });
    expect(res2.status).toBe(200);
    const tree3 = await descendants(third.child.pid as number);
    ctrlC(third);
    expect(await exitCode(third, 'the third llmgw cluster to exit after Ctrl-C')).toBe(0);
    expect(leftOver(tree3)).toEqual([]);

    // --reset: from empty state, its own database and state dir only, each named before it goes.
    writeFileSync(join(stateDir, 'notes.txt'), "not the cluster's");
    fourth = startClusterProcess(stateDir, basePort, mysqlUrl, ['--reset']);
    const resetLines = await up(fourth);
    const database = new URL(mysqlUrl).pathname.slice(1);
    const said =
      resetLines.find((l) =>
        l.startsWith(`      --reset: dropping database ${database} on 127.0.0.1:3306 and removing from ${stateDir}: `),
      ) ?? '';
    expect(said.split(': ').at(-1)?.split(', ')).toEqual(
      expect.arrayContaining(['temporal.db', 'server.yaml', 'ca', 'certs', 'logs', 'engines', 'weights']),
    );
    expect(said).not.toContain('notes.txt');
    expect(resetLines.some((l) => l.includes(`created the CA in ${join(stateDir, 'ca')}`))).toBe(true);
    expect(existsSync(join(stateDir, 'notes.txt'))).toBe(true);
    const conn4 = await Connection.connect({ address: `127.0.0.1:${basePort}` });
    expect(
      (await new WorkflowClient({ connection: conn4 }).getHandle(workflowIds.model('sim-small')).describe()).runId,
    ).not.toBe(before);
    await conn4.close();
    const tree4 = await descendants(fourth.child.pid as number);
    ctrlC(fourth);
    expect(await exitCode(fourth, 'the reset llmgw cluster to exit after Ctrl-C')).toBe(0);
    expect(leftOver(tree4)).toEqual([]);
  }, 420_000);
});

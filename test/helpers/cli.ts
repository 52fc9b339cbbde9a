/** Running the real `llmgw` command as a child process, as an operator would, and reading what it said. */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

/** bin/llmgw.js of this checkout. */
export const LLMGW = resolve(__dirname, '../../bin/llmgw.js');

/** How an llmgw command ended: its exit code (null: killed at the deadline) and its output. */
export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `llmgw ...args` to its end, killing it (code null) after `timeoutMs`. */
export function llmgw(args: string[], timeoutMs = 60_000): Promise<CliRun> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [LLMGW, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => void (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => void (stderr += b.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

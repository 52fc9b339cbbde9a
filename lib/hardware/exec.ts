/** Running a discovery command: never throws, reports exit code, output and spawn errors. */
import { execFile } from 'node:child_process';

export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** errno code when the command could not be run at all (ENOENT, EACCES) or 'ETIMEDOUT' */
  error?: string;
}

/** Runs a command; injected so tests can hand in fakes. */
export type Exec = (cmd: string, args: string[]) => Promise<CommandResult>;

/** Runs `cmd args` with a timeout (and `env`, and room for `maxBuffer` bytes of output: vLLM's whole help is large). */
export function runCommand(
  cmd: string,
  args: string[],
  opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv; maxBuffer?: number } = {},
): Promise<CommandResult> {
  return new Promise((resolve) => {
    execFile(
      cmd,
      args,
      { timeout: opts.timeoutMs ?? 15_000, maxBuffer: opts.maxBuffer ?? 4 * 1024 * 1024, env: opts.env ?? process.env },
      (err, stdout, stderr) => {
        if (!err) return resolve({ code: 0, stdout, stderr });
        const e = err as NodeJS.ErrnoException & { code?: string | number; killed?: boolean };
        if (typeof e.code === 'string') return resolve({ code: null, stdout, stderr, error: e.code });
        if (e.killed) return resolve({ code: null, stdout, stderr, error: 'ETIMEDOUT' });
        resolve({ code: typeof e.code === 'number' ? e.code : 1, stdout, stderr });
      },
    );
  });
}

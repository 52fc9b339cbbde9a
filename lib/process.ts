/** Stopping a child process the same way everywhere: SIGTERM, a grace period, then SIGKILL. */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Env var set on a role spawned by \`llmgw cluster\`: the role stops itself when its parent is gone. */
export const EXIT_WITH_PARENT = 'LLMGW_EXIT_WITH_PARENT';

/** True once the child has exited or been killed. */
export function hasExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Sends SIGTERM, waits up to `graceMs` for the exit, then SIGKILLs; resolves when the child is gone. */
export async function stopProcess(child: ChildProcess, graceMs: number): Promise<void> {
  if (hasExited(child)) return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await gone;
  clearTimeout(timer);
}

/**
 * True while a process with this pid runs. A zombie counts as gone: it has exited, and only its parent (or
 * init, for an orphan) can reap it. That matters where pid 1 never reaps orphans — this machine's does not,
 * so an engine shim that outlived its agent stays `<defunct>` forever, and `kill(pid, 0)` alone still finds it.
 */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return !isZombie(pid);
}

/**
 * The fields of /proc/<pid>/stat from field 3 (the state) on, or null when there is no such process. Field 2
 * (the command) is in parentheses and may hold spaces, so the count starts after the last ')': rest[0] is
 * field 3, rest[n] is field n + 3.
 */
export function procStatFields(pid: number): string[] | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** True when /proc says the process has exited and awaits reaping (state Z or X). */
export function isZombie(pid: number): boolean {
  const state = procStatFields(pid)?.[0];
  return state === 'Z' || state === 'X';
}

/** The command line of a running process (Linux /proc), or null when it is gone. */
export function pidCommandLine(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return null;
  }
}

/** SIGTERM to a pid we did not spawn, SIGKILL after `graceMs`; resolves when it is gone. */
export async function stopPid(pid: number, graceMs: number): Promise<void> {
  const send = (sig: NodeJS.Signals): void => {
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  };
  send('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (pidAlive(pid)) {
    if (Date.now() > deadline) send('SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The last `lines` lines of a log file (reads at most its last 16 KiB); '' when it cannot be read. */
export function fileTail(file: string, lines: number): string {
  try {
    const buf = readFileSync(file);
    return buf
      .subarray(Math.max(0, buf.length - 16_384))
      .toString('utf8')
      .trim()
      .split('\n')
      .slice(-lines)
      .join('\n');
  } catch {
    return '';
  }
}

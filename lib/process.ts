/** Stopping a child process the same way everywhere: SIGTERM, a grace period, then SIGKILL. */
import type { ChildProcess } from 'node:child_process';

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

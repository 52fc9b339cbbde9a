/**
 * A node as onboarding's activities see it over one ssh connection: commands run as root (directly, or with
 * `sudo -n` for another user), files written atomically, and the time spent waiting on the node counted.
 */
import { createHash } from 'node:crypto';
import { randomBytes } from 'node:crypto';
import { dirname } from 'node:path';
import type { ExecResult, SshSession } from '../../lib/ssh/client';
import { shQuote } from '../../lib/onboard/plan';

export interface Remote {
  /** Runs a shell command as root; resolves with its status and output whatever it is. */
  sh(command: string, o?: { timeoutMs?: number }): Promise<ExecResult>;
  /** The file's content, or null when there is none. */
  read(path: string): Promise<Buffer | null>;
  /** Makes `path` hold `content` with `mode` (root-owned), atomically; false when it already did. */
  ensureFile(path: string, content: string | Buffer, mode: number): Promise<boolean>;
  /** Copies a local file to `path` atomically. */
  put(local: string, path: string, mode: number, progress?: (sent: number, total: number) => void): Promise<void>;
  /** Time spent in commands on the node so far, ms (its own work: tar, update-ca-certificates, probes). */
  waitedMs(): number;
  close(): void;
}

const sha = (b: string | Buffer): string => createHash('sha256').update(b).digest('hex');

/** Wraps a session for `user`: root writes over SFTP directly; anyone else stages a file and installs it with sudo. */
export function remote(s: SshSession, user: string): Remote {
  const root = user === 'root';
  let waited = 0;
  const sh = async (command: string, o: { timeoutMs?: number } = {}): Promise<ExecResult> => {
    const r = await s.exec(root ? command : `sudo -n sh -c ${shQuote(command)}`, o);
    waited += r.ms;
    return r;
  };
  const stage = (): string => `/tmp/llmgw-stage-${randomBytes(6).toString('hex')}`;
  const install = async (staged: string, path: string, mode: number): Promise<void> => {
    const tmp = `${path}.llmgw-tmp`;
    const r = await sh(
      `install -o root -g root -m ${mode.toString(8)} ${shQuote(staged)} ${shQuote(tmp)} && mv -f ${shQuote(tmp)} ${shQuote(path)}; rc=$?; rm -f ${shQuote(staged)}; exit $rc`,
    );
    if (r.code !== 0) throw new Error(`installing ${path} failed (exit ${r.code}): ${r.stderr.trim()}`);
  };
  const mkdirs = async (path: string): Promise<void> => {
    const r = await sh(`mkdir -p ${shQuote(dirname(path))}`);
    if (r.code !== 0) throw new Error(`mkdir -p ${dirname(path)} failed: ${r.stderr.trim()}`);
  };
  const read = async (path: string): Promise<Buffer | null> => {
    if (root) return s.readFile(path);
    const r = await sh(`if [ -e ${shQuote(path)} ]; then base64 < ${shQuote(path)}; else exit 44; fi`);
    if (r.code === 44) return null;
    if (r.code !== 0) throw new Error(`reading ${path} failed: ${r.stderr.trim()}`);
    return Buffer.from(r.stdout, 'base64');
  };
  return {
    sh,
    read,
    async ensureFile(path, content, mode) {
      const now = await read(path);
      if (now && sha(now) === sha(content)) {
        const m = await sh(`stat -c %a ${shQuote(path)}`);
        if (m.stdout.trim() === mode.toString(8)) return false;
      }
      await mkdirs(path);
      if (root) {
        await s.writeFile(path, content, mode);
      } else {
        const staged = stage();
        await s.writeFile(staged, content, 0o600);
        await install(staged, path, mode);
      }
      return true;
    },
    async put(local, path, mode, progress) {
      await mkdirs(path);
      if (root) return s.putFile(local, path, mode, progress);
      const staged = stage();
      await s.putFile(local, staged, 0o600, progress);
      await install(staged, path, mode);
    },
    waitedMs: () => waited,
    close: () => s.close(),
  };
}

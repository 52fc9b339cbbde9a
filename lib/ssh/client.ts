/**
 * One ssh connection to a node (ssh2): commands with their exit status and output, and files written over
 * SFTP atomically (a temporary name, then OpenSSH's posix-rename over the target).
 */
import { Client, type ClientChannel, type SFTPWrapper } from 'ssh2';
import { hostKeyOf, type HostKey } from './host-key';

export interface SshTarget {
  host: string;
  port: number;
  username: string;
  /** the private key (OpenSSH or PEM), the CA host's */
  privateKey: string | Buffer;
}

export interface OpenOptions extends SshTarget {
  /** Judges the host key the server presented; false refuses it (the connection fails with kind `host-key`). */
  verify: (key: HostKey) => boolean;
  /** host key algorithms to offer, in order (preferredHostKeyAlgorithms) */
  hostKeyAlgorithms?: string[];
  /** handshake and authentication must end within this (default 20 s) */
  readyTimeoutMs?: number;
}

/** Why a connection failed, as waiting for ssh decides on it (ssh2's err.level, and our own verifier). */
export type SshFailureKind = 'unreachable' | 'timeout' | 'handshake' | 'auth' | 'host-key' | 'other';

/** A failed connection. */
export class SshConnectError extends Error {
  override name = 'SshConnectError';
  constructor(
    readonly kind: SshFailureKind,
    message: string,
    readonly presented: HostKey | null,
  ) {
    super(message);
  }
}

export interface ExecResult {
  /** null when the command was killed by a signal */
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface SshSession {
  /** the host key this server presented (and `verify` accepted) */
  presented: HostKey;
  /** Runs `command` through the remote user's shell; throws only when the connection drops or it times out. */
  exec(command: string, o?: { timeoutMs?: number; stdin?: string }): Promise<ExecResult>;
  /** The file's content, or null when it does not exist. */
  readFile(path: string): Promise<Buffer | null>;
  /** Writes `content` to `path` with `mode`: readers see the old file or the new one, never half of one. */
  writeFile(path: string, content: string | Buffer, mode: number): Promise<void>;
  /** Copies the local file to `path` with `mode`, atomically; `progress` gets bytes sent so far. */
  putFile(local: string, path: string, mode: number, progress?: (sent: number, total: number) => void): Promise<void>;
  close(): void;
}

function kindOf(err: Error & { level?: string; code?: string }): SshFailureKind {
  switch (err.level) {
    case 'client-socket':
    case 'client-dns':
      return 'unreachable';
    case 'client-timeout':
      return 'timeout';
    case 'client-authentication':
      return 'auth';
    case 'handshake':
    case 'protocol':
      return 'handshake';
    default:
      return 'other';
  }
}

const promisify = <T>(fn: (cb: (err: Error | null | undefined, v: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => fn((err, v) => (err ? reject(err) : resolve(v))));

/** Connects and authenticates; rejects with an SshConnectError saying which kind of failure it was. */
export function openSsh(o: OpenOptions): Promise<SshSession> {
  const conn = new Client();
  let presented: HostKey | null = null;
  let refused = false;
  return new Promise<SshSession>((resolve, reject) => {
    let settled = false;
    conn.on('error', (err: Error & { level?: string }) => {
      if (settled) return;
      settled = true;
      conn.end();
      const kind = refused ? 'host-key' : kindOf(err);
      reject(new SshConnectError(kind, `${o.username}@${o.host}:${o.port}: ${err.message}`, presented));
    });
    conn.on('close', () => {
      if (settled) return;
      settled = true;
      reject(
        new SshConnectError(
          'handshake',
          `${o.username}@${o.host}:${o.port}: connection closed before it was ready`,
          presented,
        ),
      );
    });
    conn.on('ready', () => {
      if (settled) return;
      settled = true;
      // A failure after ready (a dropped connection) surfaces in the command or transfer under way.
      conn.removeAllListeners('error');
      conn.on('error', () => undefined);
      resolve(session(conn, presented as HostKey));
    });
    conn.connect({
      host: o.host,
      port: o.port,
      username: o.username,
      privateKey: o.privateKey,
      readyTimeout: o.readyTimeoutMs ?? 20_000,
      // Runs before the server proves it holds the key: record it, decide, and store nothing until `ready`.
      hostVerifier: (blob: Buffer) => {
        presented = hostKeyOf(blob);
        refused = !o.verify(presented);
        return !refused;
      },
      ...(o.hostKeyAlgorithms ? { algorithms: { serverHostKey: o.hostKeyAlgorithms as never } } : {}),
    });
  });
}

function session(conn: Client, presented: HostKey): SshSession {
  let sftp: Promise<SFTPWrapper> | undefined;
  const theSftp = (): Promise<SFTPWrapper> => (sftp ??= promisify<SFTPWrapper>((cb) => conn.sftp(cb)));
  const tmpName = (path: string): string =>
    `${path}.llmgw-tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const replace = async (s: SFTPWrapper, tmp: string, path: string, mode: number): Promise<void> => {
    await promisify<void>((cb) => s.chmod(tmp, mode, (e) => cb(e, undefined)));
    await promisify<void>((cb) => s.ext_openssh_rename(tmp, path, (e) => cb(e, undefined)));
  };

  return {
    presented,
    exec(command, o = {}) {
      const started = Date.now();
      return new Promise<ExecResult>((resolve, reject) => {
        conn.exec(command, (err, stream: ClientChannel) => {
          if (err) return reject(err);
          let stdout = '';
          let stderr = '';
          const keep = (s: string, b: Buffer): string => (s + b.toString()).slice(-64_000);
          const timer = o.timeoutMs
            ? setTimeout(() => {
                stream.close();
                reject(new Error(`\`${command}\` did not finish within ${o.timeoutMs! / 1000}s`));
              }, o.timeoutMs)
            : undefined;
          stream.on('data', (b: Buffer) => void (stdout = keep(stdout, b)));
          stream.stderr.on('data', (b: Buffer) => void (stderr = keep(stderr, b)));
          stream.on('close', (code: number | undefined, signal: string | undefined) => {
            clearTimeout(timer);
            // No exit status at all: the connection went away under the command.
            if (code === undefined && signal === undefined)
              return reject(new Error(`the connection dropped while running \`${command}\``));
            resolve({ code: code ?? null, signal: signal ?? null, stdout, stderr, ms: Date.now() - started });
          });
          if (o.stdin !== undefined) stream.end(o.stdin);
          else stream.end();
        });
      });
    },
    async readFile(path) {
      const s = await theSftp();
      try {
        return await promisify<Buffer>((cb) => s.readFile(path, (e, b) => cb(e, b)));
      } catch (err) {
        if ((err as { code?: number }).code === 2) return null; // SSH_FX_NO_SUCH_FILE
        throw err;
      }
    },
    async writeFile(path, content, mode) {
      const s = await theSftp();
      const tmp = tmpName(path);
      await promisify<void>((cb) => s.writeFile(tmp, content, { mode }, (e) => cb(e, undefined)));
      await replace(s, tmp, path, mode);
    },
    async putFile(local, path, mode, progress) {
      const s = await theSftp();
      const tmp = tmpName(path);
      await promisify<void>((cb) =>
        s.fastPut(local, tmp, { mode, step: (sent, _chunk, total) => progress?.(sent, total) }, (e) =>
          cb(e, undefined),
        ),
      );
      await replace(s, tmp, path, mode);
    },
    close() {
      conn.end();
    },
  };
}

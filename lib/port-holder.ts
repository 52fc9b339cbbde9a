/**
 * Who holds a TCP port on this machine: a bind that is refused, and the process listening there when this user may
 * see it (Linux /proc). The local cluster checks its ports with it before anything starts; an agent checks an
 * engine's port before it starts the engine (activities/node).
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { pidCommandLine } from './process';

/** True when 127.0.0.1:`port` can be bound now. */
export async function portFree(port: number): Promise<boolean> {
  return (await tryListen(port, '127.0.0.1')) === null;
}

/** Binds `host`:`port` and lets go at once: null when it could, else the error's code (EADDRINUSE: held). */
export function tryListen(port: number, host: string): Promise<string | null> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    s.listen({ port, host, exclusive: true }, () => s.close(() => resolve(null)));
  });
}

/** The socket inodes listening on `port` (Linux /proc/net/tcp and tcp6; LISTEN is state 0A). */
function listeningInodes(port: number): Set<string> {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[1]?.endsWith(`:${hex}`) && f[3] === '0A' && f[9]) inodes.add(f[9]);
    }
  }
  return inodes;
}

/** The process listening on `port`, when this user may see it: its pid and command line. */
export function portHolder(port: number): { pid: number; command: string } | null {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return null;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1] as string)) return { pid: Number(entry), command: pidCommandLine(Number(entry)) ?? '?' };
    }
  }
  return null;
}

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

/** TCP states of /proc/net/tcp (include/net/tcp_states.h), for the sockets that are not listening. */
const TCP_STATES: Record<string, string> = {
  '01': 'ESTABLISHED',
  '02': 'SYN_SENT',
  '03': 'SYN_RECV',
  '04': 'FIN_WAIT1',
  '05': 'FIN_WAIT2',
  '06': 'TIME_WAIT',
  '07': 'CLOSE',
  '08': 'CLOSE_WAIT',
  '09': 'LAST_ACK',
  '0B': 'CLOSING',
};

/** The kernel's range for outgoing connections' local ports (net.ipv4.ip_local_port_range). */
function ephemeralRange(): [number, number] | null {
  try {
    const [lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    return lo && hi ? [lo, hi] : null;
  } catch {
    return null;
  }
}

/**
 * Who holds `port`, for an error message: the listening process when `viewer` may see it, else the state of a
 * connection whose local end is the port (an outgoing connection's port, taken from the kernel's ephemeral range),
 * else `unseen` (a listener of a process this user may not read). `holder`: when the caller looked it up already.
 */
export function describePortHolder(port: number, unseen: string, holder = portHolder(port)): string {
  if (holder) return `pid ${holder.pid} (${holder.command.slice(0, 160)})`;
  const states = sockets(port)
    .map((f) => f[3] as string)
    .filter((st) => st !== '0A');
  if (states.length > 0) {
    const range = ephemeralRange();
    const inRange = range && port >= range[0] && port <= range[1];
    return `the local end of a connection (${TCP_STATES[states[0] as string] ?? states[0]})${inRange ? `: ${range[0]}-${range[1]} is the kernel's range for outgoing connections' ports, so listeners belong below ${range[0]}` : ''}`;
  }
  return unseen;
}

/** The socket inodes listening on `port` (LISTEN is state 0A). */
function listeningInodes(port: number): Set<string> {
  return new Set(sockets(port).flatMap((f) => (f[3] === '0A' && f[9] ? [f[9]] : [])));
}

/** The /proc/net/tcp and tcp6 rows, split into fields, of the sockets whose local port is `port`. */
function sockets(port: number): string[][] {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  const rows: string[][] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[1]?.endsWith(`:${hex}`)) rows.push(f);
    }
  }
  return rows;
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

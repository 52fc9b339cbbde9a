/**
 * The sim engine's process group, shaped like torch.distributed / NCCL init: rank 0 binds the
 * dist-init port and waits for every worker rank; a rank that leaves ends the whole group.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface GroupOptions {
  rank: number;
  world: number;
  distHost: string;
  distPort: number;
  /** How long a worker keeps retrying to reach rank 0, ms */
  joinTimeoutMs?: number;
}

export interface Group {
  /** Port rank 0's dist-init listener is bound to (0 for workers and single-rank groups) */
  distPort: number;
  joined(): number;
  ready(): boolean;
  /** Resolves with the reason when the group breaks (a rank left): the process must exit non-zero. */
  broken: Promise<string>;
  close(): void;
}

/** Forms (rank 0) or joins (rank ≥ 1) the group. */
export async function formGroup(o: GroupOptions): Promise<Group> {
  let breakWith: (reason: string) => void = () => undefined;
  const broken = new Promise<string>((r) => (breakWith = r));
  if (o.world <= 1) return { distPort: 0, joined: () => 0, ready: () => true, broken, close: () => undefined };
  return o.rank === 0 ? host(o, broken, breakWith) : join(o, broken, breakWith);
}

async function host(o: GroupOptions, broken: Promise<string>, breakWith: (r: string) => void): Promise<Group> {
  const members = new Map<number, Socket>();
  let closing = false;
  const server: Server = createServer((sock) => {
    sock.setKeepAlive(true, 1000);
    sock.setNoDelay(true);
    let buf = '';
    let rank: number | null = null;
    sock.on('data', (b) => {
      buf += b.toString();
      const nl = buf.indexOf('\n');
      if (rank !== null || nl < 0) return;
      const [verb, r, w] = buf.slice(0, nl).trim().split(' ');
      const n = Number(r);
      if (verb !== 'JOIN' || !Number.isInteger(n) || n < 1 || n >= o.world || Number(w) !== o.world) {
        sock.end(`ERR expected "JOIN <rank 1..${o.world - 1}> ${o.world}"\n`);
        return;
      }
      if (members.has(n)) {
        sock.end(`ERR rank ${n} already joined\n`);
        return;
      }
      rank = n;
      members.set(n, sock);
      sock.write('OK\n');
    });
    const leave = (why: string): void => {
      if (rank === null || members.get(rank) !== sock) return;
      members.delete(rank);
      if (!closing) breakWith(`rank ${rank} left the group (${why})`);
    };
    sock.on('close', () => leave('connection closed'));
    sock.on('error', (e) => leave(e.message));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.distPort, o.distHost, () => resolve());
  });
  const addr = server.address();
  const ping = setInterval(() => members.forEach((s) => s.write('PING\n')), 1000);
  return {
    distPort: typeof addr === 'object' && addr ? addr.port : o.distPort,
    joined: () => members.size,
    ready: () => members.size === o.world - 1,
    broken,
    close: () => {
      closing = true;
      clearInterval(ping);
      members.forEach((s) => s.destroy());
      server.close();
    },
  };
}

async function join(o: GroupOptions, broken: Promise<string>, breakWith: (r: string) => void): Promise<Group> {
  const deadline = Date.now() + (o.joinTimeoutMs ?? 120_000);
  let closing = false;
  for (;;) {
    const sock = await new Promise<Socket | Error>((resolve) => {
      const s = connect(o.distPort, o.distHost);
      s.once('connect', () => resolve(s));
      s.once('error', (e) => resolve(e));
    });
    if (sock instanceof Error) {
      if (Date.now() > deadline)
        throw new Error(`rank ${o.rank} could not reach rank 0 at ${o.distHost}:${o.distPort}: ${sock.message}`);
      await new Promise((r) => setTimeout(r, 200));
      continue;
    }
    sock.setKeepAlive(true, 1000);
    sock.write(`JOIN ${o.rank} ${o.world}\n`);
    const answer = await new Promise<string>((resolve) => {
      sock.once('data', (b) => resolve(b.toString().split('\n')[0] ?? ''));
      sock.once('close', () => resolve('closed'));
    });
    if (answer !== 'OK') {
      sock.destroy();
      throw new Error(`rank 0 refused rank ${o.rank}: ${answer}`);
    }
    sock.on('close', () => !closing && breakWith('rank 0 left the group (connection closed)'));
    sock.on('error', () => undefined);
    return {
      distPort: 0,
      joined: () => 1,
      ready: () => true,
      broken,
      close: () => {
        closing = true;
        sock.destroy();
      },
    };
  }
}

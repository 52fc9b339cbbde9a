/** Raw HTTP/1.1 over a TCP socket, for what a fetch client cannot send: a body that stops, 100 KB of headers. */
import { connect, type Socket } from 'node:net';

/** What came back on a raw connection: the bytes read, and how it ended. */
export interface RawExchange {
  /** everything the server sent */
  text: string;
  /** 'closed' (the server ended or closed the connection), 'reset' (ECONNRESET), or 'open' (still open at the deadline) */
  end: 'closed' | 'reset' | 'open';
  /** ms from the first write to the end */
  ms: number;
}

/**
 * Opens a connection to 127.0.0.1:`port`, writes `data` (and keeps the connection open, writing nothing more), and
 * resolves once the server closes it, resets it, or `deadlineMs` passes.
 */
export function rawExchange(port: number, data: string | Buffer, deadlineMs: number): Promise<RawExchange> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const t0 = Date.now();
    let done = false;
    const socket: Socket = connect({ port, host: '127.0.0.1' });
    const finish = (end: RawExchange['end']): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ text: Buffer.concat(chunks).toString('utf8'), end, ms: Date.now() - t0 });
    };
    const timer = setTimeout(() => finish('open'), deadlineMs);
    socket.on('data', (b: Buffer) => chunks.push(b));
    socket.on('end', () => finish('closed'));
    socket.on('close', () => finish('closed'));
    socket.on('error', (err: NodeJS.ErrnoException) => finish(err.code === 'ECONNRESET' ? 'reset' : 'closed'));
    socket.write(data);
  });
}

/** Opens `n` connections to 127.0.0.1:`port` that send `data` (default nothing) and then stall; returns them. */
export async function stalledConnections(port: number, n: number, data = ''): Promise<Socket[]> {
  return Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect({ port, host: '127.0.0.1' }, () => {
            if (data) s.write(data);
            resolve(s);
          });
          s.on('error', () => undefined);
          s.once('error', reject);
        }),
    ),
  );
}

/**
 * A real HTTP origin for weights tests: serves one generated file on a free loopback port, honours Range (or
 * ignores it, answering 200), can cut the connection after N bytes of a response, slow itself down, or answer a
 * fixed status — and counts every request and the body bytes it sent.
 */
import { randomBytes, createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface OriginRequest {
  path: string;
  range: string | null;
  status: number;
  /** body bytes written before the response ended or was cut */
  sent: number;
}

export interface Origin {
  url: string;
  /** the file's URL (path /models/<name>) */
  fileUrl: string;
  data: Buffer;
  sha256: string;
  requests: OriginRequest[];
  /** body bytes sent so far over all requests */
  bytesSent(): number;
  /** what the next responses do (applies until changed) */
  behave: { cutAfter: number | null; ignoreRange: boolean; status: number | null; bytesPerSecond: number | null };
  close(): Promise<void>;
}

/** Starts an origin serving `size` random bytes (or `data`) as /models/<name>. */
export async function startOrigin(o: { size?: number; data?: Buffer; name?: string } = {}): Promise<Origin> {
  const data = o.data ?? randomBytes(o.size ?? 4 << 20);
  const name = o.name ?? 'tiny.gguf';
  const requests: OriginRequest[] = [];
  const behave: Origin['behave'] = { cutAfter: null, ignoreRange: false, status: null, bytesPerSecond: null };
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const rec: OriginRequest = { path: req.url ?? '', range: req.headers.range ?? null, status: 0, sent: 0 };
    requests.push(rec);
    // /moved/<name> answers 302 to the file, as a Hugging Face URL does to its CDN.
    if ((req.url ?? '').startsWith(`/moved/${name}`)) {
      rec.status = 302;
      res.writeHead(302, { location: `/models/${name}` }).end();
      return;
    }
    if ((req.url ?? '').split('?')[0] !== `/models/${name}`) {
      rec.status = 404;
      res.writeHead(404, { 'content-type': 'text/plain' }).end('no such model here');
      return;
    }
    if (behave.status !== null) {
      rec.status = behave.status;
      res.writeHead(behave.status, { 'content-type': 'text/plain' }).end(`origin says ${behave.status}`);
      return;
    }
    let start = 0;
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    if (m && !behave.ignoreRange) start = Number(m[1]);
    if (start >= data.length && m && !behave.ignoreRange) {
      rec.status = 416;
      res.writeHead(416, { 'content-range': `bytes */${data.length}` }).end();
      return;
    }
    const partial = m !== null && !behave.ignoreRange;
    rec.status = partial ? 206 : 200;
    res.writeHead(rec.status, {
      'content-length': data.length - start,
      'accept-ranges': 'bytes',
      etag: '"v1"',
      ...(partial ? { 'content-range': `bytes ${start}-${data.length - 1}/${data.length}` } : {}),
    });
    const cut = behave.cutAfter;
    const rate = behave.bytesPerSecond;
    let pos = start;
    const chunk = 64 << 10;
    const pump = (): void => {
      while (pos < data.length) {
        let end = Math.min(pos + chunk, data.length);
        if (cut !== null && rec.sent + (end - pos) >= cut) end = pos + (cut - rec.sent);
        const ok = res.write(data.subarray(pos, end));
        rec.sent += end - pos;
        pos = end;
        if (cut !== null && rec.sent >= cut) {
          // Cut mid-body: what was written arrives, then the connection ends before Content-Length bytes.
          res.socket?.end();
          return;
        }
        if (rate !== null) {
          setTimeout(pump, Math.max(1, (chunk / rate) * 1000));
          return;
        }
        if (!ok) {
          res.once('drain', pump);
          return;
        }
      }
      res.end();
    };
    pump();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    fileUrl: `${url}/models/${name}`,
    data,
    sha256: createHash('sha256').update(data).digest('hex'),
    requests,
    bytesSent: () => requests.reduce((a, r) => a + r.sent, 0),
    behave,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/**
 * A weights fetch's throughput against a plain download of the same file over loopback (npm run bench:weights).
 * One generated file (WEIGHTS_BENCH_MB, default 256 MiB) served from memory by the test origin, in a process of
 * its own (as is the peer holding it), so the client measured has its process to itself, like curl. Each way is
 * run RUNS times (default 5, round-robin) into a fresh file; the median and the best are printed:
 *   curl -o FILE                 the plain download (no hash, no fsync)
 *   node stream to a file        http.get piped to createWriteStream (no hash, no fsync)
 *   node stream + sha256         the same, hashing every chunk (what verification costs)
 *   weights fetch from origin    WeightsCache.ensure with the catalog sha256: hash, fsync, manifest, rename
 *   weights fetch from a peer    the same from another node's weights endpoint over mTLS (node certificates)
 */
import '../helpers/bench-help'; // --help: the comment above
import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';
import { createWriteStream, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { get } from 'node:http';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { initCa, issueNodeCertificate } from '../../lib/pki';
import { WeightsCache } from '../../lib/weights/cache';
import { startWeightsServer } from '../../lib/weights/serve';
import { startOrigin } from '../helpers/origin';

const MB = Number(process.env.WEIGHTS_BENCH_MB ?? 256);
const RUNS = Number(process.env.RUNS ?? 5);
const SIZE = MB * 2 ** 20;
const run = promisify(execFile);
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

interface Served {
  url: string;
  sha256: string;
  peerPort: number;
  caPem: string;
  client: { certPem: string; keyPem: string };
}

/** The child: the origin, and a node (bench-a) that fetched the file from it and serves it to peers. */
async function serve(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-weights-bench-serve-'));
  const origin = await startOrigin({ size: SIZE, name: 'bench.gguf' });
  const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
  const a = issueNodeCertificate(ca, 'bench-a');
  const b = issueNodeCertificate(ca, 'bench-b');
  const holder = new WeightsCache({ dir: join(dir, 'holder'), nodeId: 'bench-a' });
  await holder.ensure({ source: origin.fileUrl, sha256: origin.sha256 });
  const server = await startWeightsServer({
    file: (k) => holder.file(k),
    tls: { ...a, caPem: ca.certPem },
    host: '127.0.0.1',
    port: 0,
  });
  const served: Served = {
    url: origin.fileUrl,
    sha256: origin.sha256,
    peerPort: server.port,
    caPem: ca.certPem,
    client: b,
  };
  process.stdout.write(`${JSON.stringify(served)}\n`);
  process.once('SIGTERM', () => {
    void Promise.all([origin.close(), server.close()]).finally(() => {
      rmSync(dir, { recursive: true, force: true });
      process.exit(0);
    });
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-weights-bench-'));
  const child = spawn(process.execPath, [...process.execArgv, __filename, '--serve'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: process.env,
  });
  const served = await new Promise<Served>((resolve, reject) => {
    let buf = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += String(d);
      if (buf.includes('\n')) resolve(JSON.parse(buf.split('\n')[0] as string) as Served);
    });
    child.once('exit', (code) => reject(new Error(`the serving process exited (${code})`)));
  });
  // Registered first, then run round-robin (one of each per round), so a change in the machine's load falls on
  // every way alike rather than on whichever ran then.
  const ways: { what: string; once: (i: number) => Promise<void>; times: number[] }[] = [];
  const measure = async (what: string, once: (i: number) => Promise<void>): Promise<void> => {
    await once(-1); // a warm-up, and the check that it works here at all
    ways.push({ what, once, times: [] });
  };
  const fresh = (name: string, i: number): string => {
    const f = join(dir, `${name}-${i}`);
    rmSync(f, { force: true, recursive: true });
    return f;
  };
  const stream = (file: string, hash: boolean): Promise<void> =>
    new Promise((resolve, reject) => {
      get(served.url, (res) => {
        const h = createHash('sha256');
        const tap = async function* (src: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
          for await (const c of src) {
            if (hash) h.update(c);
            yield c;
          }
        };
        pipeline(res, tap, createWriteStream(file, { highWaterMark: 1 << 20 })).then(() => {
          if (hash && h.digest('hex') !== served.sha256) reject(new Error('hash mismatch'));
          else resolve();
        }, reject);
      }).on('error', reject);
    });
  try {
    try {
      // Not execFileSync: keep this process free while curl runs (it only waits).
      await run('curl', ['--version']);
      await measure('curl -o FILE (plain download)', async (i) => {
        const f = fresh('curl', i);
        await run('curl', ['-sS', '--fail', '-o', f, served.url]);
        if (statSync(f).size !== SIZE) throw new Error('curl: short file');
      });
    } catch (err) {
      console.log(`curl not measured: ${(err as Error).message}`);
    }
    await measure('node stream to a file (plain download)', (i) => stream(fresh('node', i), false));
    await measure('node stream + sha256', (i) => stream(fresh('node-sha', i), true));
    await measure('weights fetch from origin (sha256, fsync, rename)', async (i) => {
      const cache = new WeightsCache({ dir: fresh('cache', i), nodeId: 'bench-c' });
      const r = await cache.ensure({ source: served.url, sha256: served.sha256 });
      if (r.kind !== 'fetched' || r.file.from !== 'origin') throw new Error('not fetched from the origin');
    });
    await measure('weights fetch from a peer (mTLS, sha256, fsync)', async (i) => {
      const cache = new WeightsCache({
        dir: fresh('peer', i),
        nodeId: 'bench-b',
        peers: async () => [
          { nodeId: 'bench-a', endpoint: `https://127.0.0.1:${served.peerPort}`, sha256: served.sha256, size: SIZE },
        ],
        peerTls: () => ({ ...served.client, caPem: served.caPem }),
      });
      const r = await cache.ensure({ source: served.url, sha256: served.sha256 });
      if (r.kind !== 'fetched' || r.file.from !== 'peer bench-a') throw new Error('not fetched from the peer');
    });
    for (let i = 0; i < RUNS; i++) {
      for (const w of ways) {
        const t = process.hrtime.bigint();
        await w.once(i);
        w.times.push(Number(process.hrtime.bigint() - t) / 1e6);
        // Each result goes before the next run: 25 files of 256 MiB would crowd the page cache.
        for (const f of readdirSync(dir)) rmSync(join(dir, f), { recursive: true, force: true });
      }
    }
  } finally {
    child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }

  const results = ways.map((w) => ({ what: w.what, ms: median(w.times), best: Math.min(...w.times) }));
  const mibs = (ms: number): string => (SIZE / (1 << 20) / (ms / 1000)).toFixed(0);
  const curl = results.find((r) => r.what.startsWith('curl'));
  const node = results.find((r) => r.what.startsWith('node stream to'));
  const pct = (base: { ms: number } | undefined, r: { ms: number }): string =>
    base ? `${((base.ms / r.ms) * 100).toFixed(0)}%` : '-';
  console.log(
    `\n${MB} MiB over loopback, ${RUNS} rounds (node ${process.version}, ${cpus().length} CPUs, load ${loadavg()[0]?.toFixed(2)} at the end)`,
  );
  console.log(
    `${'way'.padEnd(52)} ${'median'.padStart(8)} ${'MiB/s'.padStart(6)} ${'best'.padStart(7)} ${'MiB/s'.padStart(6)}  vs curl  vs node`,
  );
  for (const r of results) {
    console.log(
      `${r.what.padEnd(52)} ${(r.ms / 1000).toFixed(2).padStart(6)} s ${mibs(r.ms).padStart(6)} ${(r.best / 1000).toFixed(2).padStart(5)} s ${mibs(r.best).padStart(6)}  ${pct(curl, r).padStart(7)} ${pct(node, r).padStart(7)}`,
    );
  }
}

(process.argv.includes('--serve') ? serve() : main()).catch((err: Error) => {
  console.error(err);
  process.exit(1);
});

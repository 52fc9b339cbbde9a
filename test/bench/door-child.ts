/**
 * The Temporal door alone in a process, for test/bench/temporal-door.ts to measure: the control plane's gate (over
 * MariaDB) and the door on a port, as in the control plane. Reads its settings from DOOR_BENCH (JSON); prints
 * `{"ready":port}`, then one JSON line of memory and door stats (after a full GC) for every "stats" line on stdin.
 */
import { createInterface } from 'node:readline';
import { CertificateGate } from '../../gateway/mtls';
import { startTemporalDoor } from '../../gateway/door/door';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';

interface Settings {
  mysqlUrl: string;
  upstream: string;
  tls: { caPem: string; certPem: string; keyPem: string };
}

async function main(): Promise<void> {
  const s = JSON.parse(process.env.DOOR_BENCH ?? '{}') as Settings;
  const store = new Store(await openDatabase(s.mysqlUrl));
  const gate = new CertificateGate({
    caPem: s.tls.caPem,
    lookup: {
      bySerial: async (serial) => {
        const c = await store.certificateBySerial(serial);
        return c ? { cn: c.cn, role: c.role, revokedAt: c.revokedAt } : null;
      },
      revokedSerials: async () => (await store.revokedSerials()).map((r) => r.serial),
    },
    log: () => undefined,
  });
  await gate.start();
  const door = await startTemporalDoor({
    host: '127.0.0.1',
    port: 0,
    upstream: { address: s.upstream, tls: null, apiKey: null },
    namespace: 'default',
    tls: s.tls,
    gate,
    log: (msg, f) => process.stderr.write(`${JSON.stringify({ msg, ...f })}\n`),
  });
  process.stdout.write(`${JSON.stringify({ ready: door.port })}\n`);
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim() !== 'stats') continue;
    for (let i = 0; i < 3; i++) (globalThis as { gc?: () => void }).gc?.();
    const m = process.memoryUsage();
    process.stdout.write(
      `${JSON.stringify({ rss: m.rss, heapUsed: m.heapUsed, external: m.external, arrayBuffers: m.arrayBuffers, door: door.stats(), tokens: door.tokens.stats() })}\n`,
    );
  }
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});

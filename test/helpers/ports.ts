/** A free TCP port on 127.0.0.1 (bind 0, read, close). */
import { createServer } from 'node:net';
import { portFree } from '../../cli/cluster/ports';

/** Asks the kernel for a free port. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/**
 * A `--base-port` for a test cluster: below the kernel's ephemeral range (32768+), where no outbound connection of a
 * busy machine can take a role's port between the cluster's port check and the role's listen (a faults run in CI lost
 * its gateway that way), and with its listeners free now. Random, so tests beside a running cluster do not meet.
 */
export async function clusterBasePort(): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const base = 10_000 + Math.floor(Math.random() * 2_000) * 10;
    // Its checked listeners: Temporal, UI, control plane, gateway, Temporal's door; the node doors at +10 to +12.
    const ports = [0, 1, 2, 3, 4, 10, 11, 12].map((i) => base + i);
    if ((await Promise.all(ports.map(portFree))).every(Boolean)) return base;
  }
  throw new Error('no free base port in 10000-32000 after 50 tries');
}

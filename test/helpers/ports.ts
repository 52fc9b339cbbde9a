/** A free TCP port on 127.0.0.1 (bind 0, read, close). */
import { createServer } from 'node:net';

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

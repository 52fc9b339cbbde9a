/** InfiniBand adapters from a sysfs tree (`<root>/class/infiniband/<dev>/ports/<n>/…`). */
import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { IbAdapter } from '../types';

/** Natural order: mlx5_2 before mlx5_10. */
export function naturalCompare(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}

const read = async (p: string): Promise<string> => (await readFile(p, 'utf8').catch(() => '')).trim();

/** Every port of every adapter under `root` (a sysfs root such as /sys); none when the class is absent. */
export async function readIbAdapters(root: string): Promise<IbAdapter[]> {
  const base = join(root, 'class/infiniband');
  const devices = await readdir(base).catch(() => [] as string[]);
  const out: IbAdapter[] = [];
  for (const device of devices.sort(naturalCompare)) {
    const ports = await readdir(join(base, device, 'ports')).catch(() => [] as string[]);
    for (const port of ports.sort(naturalCompare)) {
      const dir = join(base, device, 'ports', port);
      const physState = await read(join(dir, 'phys_state'));
      out.push({
        device,
        port: Number(port),
        state: await read(join(dir, 'state')),
        rate: await read(join(dir, 'rate')),
        linkLayer: await read(join(dir, 'link_layer')),
        ...(physState ? { physState } : {}),
      });
    }
  }
  return out;
}

/** The subnet-manager LID a port reports in sysfs (`0x1`), or null when unreadable. The same on every port of a subnet. */
export async function readSmLid(root: string, device: string, port: number): Promise<string | null> {
  return (await read(join(root, 'class/infiniband', device, 'ports', String(port), 'sm_lid'))) || null;
}

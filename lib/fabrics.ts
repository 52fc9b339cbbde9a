/** Declared InfiniBand fabrics (`--fabric NAME[:dev,dev]`), checked against the adapters the node has. */
import { LlmgwError } from './errors';
import { naturalCompare } from './hardware/infiniband';
import type { IbAdapter } from './types';

export interface FabricFlag {
  name: string;
  devices: string[] | null;
}

const NAME_RE = /^[a-z][a-z0-9-]{0,31}$/;
const bad = (msg: string): LlmgwError => new LlmgwError('LLMGW_BAD_REQUEST', msg);

/** Parses one `--fabric` value. */
export function parseFabricFlag(raw: string): FabricFlag {
  const [name = '', devs] = raw.split(':', 2);
  if (!NAME_RE.test(name)) throw bad(`--fabric ${raw}: fabric name "${name}" must be 1-32 characters of a-z, 0-9 and '-', starting with a letter`);
  if (devs === undefined) return { name, devices: null };
  const devices = devs.split(',').map((d) => d.trim()).filter(Boolean);
  if (devices.length === 0) throw bad(`--fabric ${raw}: no adapters after ':'; write --fabric ${name}:mlx5_0,mlx5_1 or just --fabric ${name}`);
  return { name, devices };
}

const active = (a: IbAdapter): boolean => /ACTIVE/.test(a.state);
const isIb = (a: IbAdapter): boolean => a.linkLayer === 'InfiniBand';

/**
 * Resolves flags to fabric → adapters. NAME alone takes the node's first two active InfiniBand
 * ports in natural device order (mlx5_2 before mlx5_10), whatever order `adapters` came in: the usual
 * two-rail HCA layout. Down ports and Ethernet (RoCE) ports are never picked implicitly.
 */
export function resolveFabrics(flags: FabricFlag[], adapters: IbAdapter[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  const owner = new Map<string, string>();
  const present = [...new Set(adapters.map((a) => a.device))].sort(naturalCompare);
  for (const f of flags) {
    let devices: string[];
    if (f.devices === null) {
      devices = [...adapters].sort((a, b) => naturalCompare(a.device, b.device) || a.port - b.port).filter((a) => active(a) && isIb(a)).map((a) => a.device).filter((d, i, all) => all.indexOf(d) === i).slice(0, 2);
      if (devices.length === 0) throw bad(`--fabric ${f.name}: this node has no active InfiniBand port (adapters: ${present.join(', ') || 'none'}); name the adapters with --fabric ${f.name}:dev,dev or check the links`);
    } else {
      devices = f.devices;
      for (const d of devices) {
        const ports = adapters.filter((a) => a.device === d);
        if (ports.length === 0) throw bad(`--fabric ${f.name}: adapter ${d} does not exist on this node (present: ${present.join(', ') || 'none'})`);
        if (!ports.some(isIb)) throw bad(`--fabric ${f.name}: adapter ${d} is an Ethernet (RoCE) port, not InfiniBand; leave it out of InfiniBand fabrics`);
        if (!ports.some(active)) throw bad(`--fabric ${f.name}: adapter ${d} port is ${ports[0]?.state || 'not active'}; bring the link up or leave it out`);
      }
    }
    for (const d of devices) {
      const prev = owner.get(d);
      if (prev && prev !== f.name) throw bad(`adapter ${d} is declared under two fabrics, ${prev} and ${f.name}: an adapter is cabled to one fabric; fix the --fabric flags`);
      owner.set(d, f.name);
    }
    out[f.name] = [...new Set([...(out[f.name] ?? []), ...devices])];
  }
  return out;
}

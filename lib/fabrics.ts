/** Declared InfiniBand fabrics (`--fabric NAME[:dev,dev]`), checked against the adapters the node has. */
import { hasCode, LlmgwError } from './errors';
import type { Exec } from './hardware/exec';
import { naturalCompare, readSmLid } from './hardware/infiniband';
import { querySm, type SmQuery } from './hardware/sminfo';
import type { FabricIdentity, IbAdapter } from './types';

export interface FabricFlag {
  name: string;
  devices: string[] | null;
}

const NAME_RE = /^[a-z][a-z0-9-]{0,31}$/;
const bad = (msg: string): LlmgwError => new LlmgwError('LLMGW_BAD_REQUEST', msg);

/** Parses one `--fabric` value. */
export function parseFabricFlag(raw: string): FabricFlag {
  const colon = raw.indexOf(':');
  const name = colon < 0 ? raw : raw.slice(0, colon);
  if (!NAME_RE.test(name))
    throw bad(
      `--fabric ${raw}: fabric name "${name}" must be 1-32 characters of a-z, 0-9 and '-', starting with a letter`,
    );
  if (colon < 0) return { name, devices: null };
  const devs = raw.slice(colon + 1);
  // split(':', 2) would silently drop everything after a second ':' (ib-a:mlx5_0:1,mlx5_1:1 → mlx5_0 alone).
  if (devs.includes(':'))
    throw bad(
      `--fabric ${raw}: name adapters without a port (--fabric ${name}:${devs.replace(/:\d+/g, '')}); llmgw uses each adapter's active InfiniBand port`,
    );
  const devices = devs
    .split(',')
    .map((d) => d.trim())
    .filter(Boolean);
  if (devices.length === 0)
    throw bad(`--fabric ${raw}: no adapters after ':'; write --fabric ${name}:mlx5_0,mlx5_1 or just --fabric ${name}`);
  return { name, devices };
}

/** What a port's physical state says about why it is not active. */
function linkHint(a: IbAdapter): string {
  const phys = a.physState ?? '';
  if (/Polling/.test(phys)) return ` (physical state ${phys}: no cable, or the far end is down)`;
  if (/Disabled/.test(phys)) return ` (physical state ${phys}: administratively disabled)`;
  if (/LinkUp/.test(phys) && /INIT/.test(a.state))
    return ` (physical state ${phys}: cabled, but no subnet manager has configured it; start opensm or the switch's SM)`;
  return phys ? ` (physical state ${phys})` : '';
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
      devices = [...adapters]
        .sort((a, b) => naturalCompare(a.device, b.device) || a.port - b.port)
        .filter((a) => active(a) && isIb(a))
        .map((a) => a.device)
        .filter((d, i, all) => all.indexOf(d) === i)
        .slice(0, 2);
      if (devices.length === 0)
        throw bad(
          `--fabric ${f.name}: this node has no active InfiniBand port (adapters: ${present.join(', ') || 'none'}); name the adapters with --fabric ${f.name}:dev,dev or check the links`,
        );
    } else {
      devices = f.devices;
      for (const d of devices) {
        const ports = adapters.filter((a) => a.device === d);
        if (ports.length === 0)
          throw bad(
            `--fabric ${f.name}: adapter ${d} does not exist on this node (present: ${present.join(', ') || 'none'})`,
          );
        if (!ports.some(isIb))
          throw bad(
            `--fabric ${f.name}: adapter ${d} is an Ethernet (RoCE) port, not InfiniBand; leave it out of InfiniBand fabrics`,
          );
        const first = ports[0];
        if (!ports.some(active) && first)
          throw bad(
            `--fabric ${f.name}: adapter ${d} port ${first.port} is ${first.state || 'not active'}${linkHint(first)}; bring the link up or leave ${d} out`,
          );
      }
    }
    for (const d of devices) {
      const prev = owner.get(d);
      if (prev && prev !== f.name)
        throw bad(
          `adapter ${d} is declared under two fabrics, ${prev} and ${f.name}: an adapter is cabled to one fabric; fix the --fabric flags`,
        );
      owner.set(d, f.name);
    }
    out[f.name] = [...new Set([...(out[f.name] ?? []), ...devices])];
  }
  return out;
}

/** One declared port and the subnet manager it was seen to have. */
export interface PortProbe {
  fabric: string;
  device: string;
  port: number;
  sm: SmQuery;
  /** sysfs sm_lid, e.g. `0x1` */
  smLid: string | null;
}

export interface FabricDiscoveryInput {
  /** `--fabric` values as given */
  flags: string[];
  /** every port, from readIbAdapters(ibRoot) */
  adapters: IbAdapter[];
  /** sysfs root holding class/infiniband (the agent's --ib-root) */
  ibRoot: string;
  /** sminfo to run, e.g. `sminfo` or /usr/sbin/sminfo */
  sminfo: string;
  run: Exec;
}

export type FabricDiscovery =
  | {
      kind: 'ok';
      fabrics: Record<string, string[]>;
      fabricIdentity: Record<string, FabricIdentity>;
      probes: PortProbe[];
      warnings: string[];
    }
  | { kind: 'refused'; error: LlmgwError };

const portName = (p: PortProbe): string => `${p.device} port ${p.port}`;

/** Refuses a fabric whose ports on this node see different subnet managers (by GUID, or by sm_lid when GUIDs are unread). */
function splitError(fabric: string, probes: PortProbe[]): LlmgwError | null {
  const seen = (p: PortProbe): string | null => (p.sm.kind === 'ok' ? p.sm.info.smGuid : null);
  const guids = new Set(probes.map(seen).filter((g): g is string => g !== null));
  const byGuid = guids.size > 1;
  const lids = new Set(probes.map((p) => p.smLid).filter((l): l is string => l !== null));
  if (!byGuid && lids.size <= 1) return null;
  const what = byGuid
    ? probes.filter((p) => seen(p)).map((p) => `${portName(p)} sees SM ${seen(p)}`)
    : probes.map((p) => `${portName(p)} sees sm_lid ${p.smLid ?? 'unknown'}`);
  const devs = [...new Set(probes.map((p) => p.device))];
  return new LlmgwError(
    'LLMGW_FABRIC_SPLIT',
    `fabric ${fabric}: its ports see different subnet managers (${what.join('; ')}), so they are on two fabrics and a replica using both would hang on its first all-reduce; declare each fabric under its own name (e.g. --fabric ${fabric}:${devs[0]} --fabric ${fabric}-2:${devs.slice(1).join(',')}) or fix the cabling`,
    { fabric, ports: what },
  );
}

/** The identity of one fabric from its probes: SM GUID when every port's was read, else the declared name, marked weaker. */
function identity(probes: PortProbe[]): { id: FabricIdentity; warning: string | null } {
  const ok = probes.flatMap((p) => (p.sm.kind === 'ok' ? [p.sm.info] : []));
  const failed = probes.filter((p) => p.sm.kind === 'failed');
  const smLid = probes.find((p) => p.smLid)?.smLid ?? null;
  const notMaster = ok
    .filter((i) => i.state !== 3)
    .map((i) => `SM ${i.smGuid} reports state ${i.state}, not 3 (MASTER)`);
  if (failed.length === 0) {
    const note = notMaster.length ? notMaster.join('; ') : undefined;
    return {
      id: { smGuid: ok[0]?.smGuid ?? null, strength: 'sm-guid', smLid, ...(note ? { note } : {}) },
      warning: note ?? null,
    };
  }
  const first = failed[0]?.sm;
  const why = [...new Set(failed.map((p) => (p.sm.kind === 'failed' ? p.sm.reason : '')))].join('; ');
  const note = `subnet manager GUID not read (${why}); trusting the declared name${smLid ? ` (sm_lid ${smLid} agrees on every port, but many fabrics share a LID)` : ''}${first?.kind === 'failed' ? `; fix: ${first.fix}` : ''}`;
  return { id: { smGuid: ok[0]?.smGuid ?? null, strength: 'declared-only', smLid, note }, warning: note };
}

/**
 * The agent-start fabric check: resolves `--fabric` flags against the adapters, reads the subnet manager each
 * declared port sees (`sminfo -C dev -P port`, plus sysfs sm_lid), and returns the inventory additions, or a coded
 * error the agent refuses to start with: LLMGW_BAD_REQUEST for a flag naming a missing, down or RoCE adapter or one
 * adapter under two fabrics; LLMGW_FABRIC_SPLIT when ports declared on one fabric see different subnet managers.
 * An unreadable SM (no root, no infiniband-diags, no SM answering) is not an error: the fabric is marked 'declared-only'.
 */
export async function discoverFabricIdentity(input: FabricDiscoveryInput): Promise<FabricDiscovery> {
  let fabrics: Record<string, string[]>;
  try {
    fabrics = resolveFabrics(input.flags.map(parseFabricFlag), input.adapters);
  } catch (err) {
    if (hasCode(err, 'LLMGW_BAD_REQUEST')) return { kind: 'refused', error: err as LlmgwError };
    throw err;
  }
  const fabricIdentity: Record<string, FabricIdentity> = {};
  const probes: PortProbe[] = [];
  const warnings: string[] = [];
  for (const [fabric, devices] of Object.entries(fabrics)) {
    const mine: PortProbe[] = [];
    for (const device of devices) {
      for (const a of input.adapters.filter((x) => x.device === device && active(x) && isIb(x))) {
        mine.push({
          fabric,
          device,
          port: a.port,
          sm: await querySm(input.sminfo, device, a.port, input.run),
          smLid: await readSmLid(input.ibRoot, device, a.port),
        });
      }
    }
    const split = splitError(fabric, mine);
    if (split) return { kind: 'refused', error: split };
    const { id, warning } = identity(mine);
    fabricIdentity[fabric] = id;
    if (warning) warnings.push(`fabric ${fabric}: ${warning}`);
    probes.push(...mine);
  }
  return { kind: 'ok', fabrics, fabricIdentity, probes, warnings };
}

/** The active InfiniBand ports of `devices`, as NCCL names them. */
export function fabricPorts(devices: string[], adapters: IbAdapter[]): { device: string; port: number }[] {
  return devices.flatMap((device) => {
    const ports = adapters.filter((a) => a.device === device && active(a) && isIb(a)).map((a) => a.port);
    return (ports.length ? ports : [1]).map((port) => ({ device, port }));
  });
}

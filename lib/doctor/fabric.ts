/** Fabric checks: the declared fabrics against the adapters, and the subnet manager behind each. */
import { hasCode } from '../errors';
import type { FabricDiscovery } from '../fabrics';
import type { DoctorResult, IbAdapter } from '../types';
import { fail, pass, warn } from './read';

/** Declared fabrics against the adapters (what the agent refuses to start with, it fails here). */
export function checkFabrics(flags: string[], adapters: IbAdapter[], d: FabricDiscovery): DoctorResult {
  const id = 'fabrics';
  if (d.kind === 'refused') {
    const fix = hasCode(d.error, 'LLMGW_FABRIC_SPLIT')
      ? 'declare each fabric under its own name, or fix the cabling'
      : 'correct the --fabric flags (see docs/fabrics.md)';
    return fail(id, d.error.message, fix);
  }
  if (flags.length === 0) {
    const ib = [
      ...new Set(adapters.filter((a) => /ACTIVE/.test(a.state) && a.linkLayer === 'InfiniBand').map((a) => a.device)),
    ];
    if (ib.length === 0)
      return pass(id, 'no --fabric and no active InfiniBand port: an island (single-node replicas only)');
    return warn(
      id,
      `no --fabric, though ${ib.join(', ')} ${ib.length === 1 ? 'is an active InfiniBand port' : 'are active InfiniBand ports'}: an island (single-node replicas only)`,
      'declare the fabric: --fabric NAME (first two active InfiniBand ports) or --fabric NAME:dev,dev',
    );
  }
  return pass(
    id,
    Object.entries(d.fabrics)
      .map(([f, devs]) => `${f}: ${devs.join(', ')}`)
      .join('; '),
  );
}

/** One result per declared fabric: its subnet manager reachable and identified by GUID (`sminfo`). */
export function checkSubnetManagers(flags: string[], d: FabricDiscovery): DoctorResult[] {
  if (flags.length === 0) return [pass('subnet-manager', 'n/a: no fabric declared')];
  if (d.kind === 'refused')
    return [
      warn(
        'subnet-manager',
        'not checked: the fabric declarations are refused (see fabrics)',
        'fix the fabrics check first',
      ),
    ];
  return Object.keys(d.fabrics).map((fabric) => {
    const id = `subnet-manager/${fabric}`;
    const probes = d.probes.filter((p) => p.fabric === fabric);
    const ports = probes.map((p) => `${p.device} port ${p.port}`).join(', ');
    const noSm = probes.flatMap((p) => (p.sm.kind === 'failed' && p.sm.cause === 'no-sm' ? [p.sm] : []));
    if (noSm[0]) return fail(id, `${fabric}: ${noSm.map((s) => s.reason).join('; ')}`, noSm[0].fix);
    const other = probes.flatMap((p) => (p.sm.kind === 'failed' ? [p.sm] : []));
    if (other[0]) {
      return warn(
        id,
        `${fabric}: subnet manager not identified (${[...new Set(other.map((s) => s.reason))].join('; ')}); the fabric is declared-only, so two fabrics under this name could not be told apart`,
        other[0].fix,
      );
    }
    const idn = d.fabricIdentity[fabric];
    if (idn?.note)
      return warn(id, `${fabric}: ${idn.note}`, 'check the subnet manager (saquery SMIR lists master and standby SMs)');
    return pass(id, `${fabric}: master SM ${idn?.smGuid ?? 'unknown'} seen by ${ports}`);
  });
}

/**
 * The catalog as the desired state: what applying server.yaml's catalog to the cluster changes, model by model.
 * Pure (the deployment workflow hashes specs with it): the control plane carries a plan out (workers/control).
 */
import type { ModelSpec } from './types';

/** A model as the cluster has it: the spec last applied (its `replicas` the catalog's count then), the live desired count. */
export interface LiveModel {
  applied: ModelSpec;
  desired: number;
  /** its deployment workflow runs */
  deployed: boolean;
  /** the spec hash its deployment runs its replicas with (a running deployment knows it) */
  runningHash?: string;
  /** replicas not stopped */
  replicas: number;
}

/** One change to one model. */
export type CatalogAction =
  | { kind: 'add'; model: string; replicas: number }
  | { kind: 'scale'; model: string; from: number; to: number }
  | { kind: 'roll'; model: string; replicas: number; changed: string[] }
  | { kind: 'deploy'; model: string; replicas: number }
  | { kind: 'remove'; model: string; replicas: number }
  | { kind: 'keep-scaled'; model: string; desired: number; catalog: number }
  | { kind: 'keep-removed'; model: string; replicas: number }
  | { kind: 'unchanged'; model: string; replicas: number };

/** What a spec change rolls: what its replicas are started with. Drain grace and first-byte timeout are read live. */
const ROLLED = ['source', 'sha256', 'profiles', 'startTimeoutS'] as const;

/** The part of a spec its replicas are started with, as a stable string. */
function rolled(spec: ModelSpec): string {
  return JSON.stringify(ROLLED.map((k) => [k, spec[k] ?? null]));
}

/** A short hash (FNV-1a, 32 bits, hex) of what a spec's replicas are started with: equal specs run the same replicas. */
export function specHash(spec: ModelSpec): string {
  let h = 0x811c9dc5;
  for (const ch of rolled(spec)) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}

/** Which rolled parts differ between two specs (`profiles`, `source`, …). */
function changedParts(a: ModelSpec, b: ModelSpec): string[] {
  return ROLLED.filter((k) => JSON.stringify(a[k] ?? null) !== JSON.stringify(b[k] ?? null));
}

/**
 * What applying `catalog` changes. Counts merge three ways, as kubectl apply does: the catalog's count is applied
 * when it changed since the last apply; while it did not, a `ctl scale` stands. A model gone from the catalog is
 * removed (drained and stopped) only with `prune`.
 */
export function planCatalog(
  catalog: readonly ModelSpec[],
  live: ReadonlyMap<string, LiveModel>,
  o: { prune: boolean },
): CatalogAction[] {
  const out: CatalogAction[] = [];
  for (const spec of catalog) {
    const m = live.get(spec.name);
    if (!m) {
      out.push({ kind: 'add', model: spec.name, replicas: spec.replicas });
      continue;
    }
    const before = out.length;
    const runs = m.runningHash ?? specHash(m.applied);
    // A deployment may run an older spec than the one recorded (a control plane that only recorded the catalog).
    const changed = changedParts(m.applied, spec);
    if (runs !== specHash(spec))
      out.push({
        kind: 'roll',
        model: spec.name,
        replicas: m.replicas,
        changed: changed.length ? changed : ['the spec its replicas run'],
      });
    if (spec.replicas !== m.applied.replicas && spec.replicas !== m.desired)
      out.push({ kind: 'scale', model: spec.name, from: m.desired, to: spec.replicas });
    else if (spec.replicas !== m.desired)
      out.push({ kind: 'keep-scaled', model: spec.name, desired: m.desired, catalog: spec.replicas });
    const desired = spec.replicas !== m.applied.replicas ? spec.replicas : m.desired;
    if (!m.deployed) out.push({ kind: 'deploy', model: spec.name, replicas: desired });
    if (out.length === before) out.push({ kind: 'unchanged', model: spec.name, replicas: m.desired });
  }
  const names = new Set(catalog.map((s) => s.name));
  for (const [name, m] of [...live.entries()].sort(([a], [b]) => a.localeCompare(b))) {
    if (names.has(name)) continue;
    out.push(
      o.prune
        ? { kind: 'remove', model: name, replicas: m.replicas }
        : { kind: 'keep-removed', model: name, replicas: m.replicas },
    );
  }
  return out;
}

/** True for an action that changes the cluster (the others are notes). */
export function changes(a: CatalogAction): boolean {
  return a.kind !== 'unchanged' && a.kind !== 'keep-scaled' && a.kind !== 'keep-removed';
}

const plural = (n: number, what: string): string => `${n} ${what}${n === 1 ? '' : 's'}`;

/** One line per action, as `ctl apply` prints it (`+` adds, `~` changes, `-` removes, `!` a note, `=` nothing). */
export function actionLine(a: CatalogAction): string {
  const line = (mark: string, text: string): string => `  ${mark} ${a.model.padEnd(16)} ${text}`;
  switch (a.kind) {
    case 'add':
      return line('+', `deploy ${plural(a.replicas, 'replica')} (new in the catalog)`);
    case 'scale':
      return line('~', `scale ${a.from} → ${a.to} replicas (the catalog's count changed)`);
    case 'roll':
      return line(
        '~',
        `roll ${plural(a.replicas, 'replica')} make-before-break, one at a time (${a.changed.join(', ')} changed)`,
      );
    case 'deploy':
      return line('~', `start its deployment (model/${a.model} is not running) for ${plural(a.replicas, 'replica')}`);
    case 'remove':
      return line(
        '-',
        `drain and stop ${plural(a.replicas, 'replica')}, then forget the model (not in the catalog; --prune)`,
      );
    case 'keep-scaled':
      return line(
        '!',
        `kept at ${a.desired} replicas by llmgw ctl scale (the catalog says ${a.catalog}, unchanged since the last apply)`,
      );
    case 'keep-removed':
      return line(
        '!',
        `not in the catalog: kept with ${plural(a.replicas, 'replica')} (llmgw ctl apply --prune drains and stops it)`,
      );
    case 'unchanged':
      return line('=', `unchanged (${plural(a.replicas, 'replica')})`);
    default: {
      const never: never = a;
      return String(never);
    }
  }
}

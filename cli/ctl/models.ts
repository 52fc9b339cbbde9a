/** `llmgw ctl models`: each model, its count in server.yaml's catalog against the desired count and what runs. */
import type { ModelListEntry } from '../../gateway/control/contract';
import type { ModelSpec } from '../../lib/types';
import { table } from '../table';
import { getJson, type CtlVerb } from './verb';

/** A model as GET /v1/models lists it (older control planes send no `actual`). */
export type ModelRow = Omit<ModelListEntry, 'actual'> & { actual?: ModelListEntry['actual'] };

const summary = (counts: Record<string, number>, order: readonly string[] = []): string =>
  Object.entries(counts)
    .sort(([a], [b]) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b))
    .map(([k, n]) => `${n} ${k}`)
    .join(', ');

/**
 * The models table: CATALOG is the count in the server.yaml given (`-`: not in it), DESIRED what the cluster keeps,
 * READY and RUNNING what serves and what else runs (by state), PROFILES each profile and how many replicas run it.
 */
export function formatModels(models: ModelRow[], catalog: readonly ModelSpec[]): string {
  const names = [...new Set([...models.map((m) => m.name), ...catalog.map((m) => m.name)])].sort();
  const rows = names.map((name) => {
    const m = models.find((x) => x.name === name);
    const c = catalog.find((x) => x.name === name);
    const states = { ...(m?.actual?.states ?? {}) };
    const ready = states.ready ?? 0;
    delete states.ready;
    const profiles = (m ?? c)?.profiles
      .map(
        (p) =>
          `${p.name} (${p.engine}, ${p.nodes}×${p.gpusPerNode} GPU)${m?.actual?.profiles[p.name] ? `×${m.actual.profiles[p.name]}` : ''}`,
      )
      .join(' ');
    return [
      name,
      c ? String(c.replicas) : '-',
      m ? String(m.replicas) : 'not applied',
      m?.actual ? String(ready) : '?',
      summary(states, ['starting', 'waiting', 'rebuilding', 'stopping']) || '-',
      profiles ?? '',
    ];
  });
  const differs = names.filter((n) => {
    const m = models.find((x) => x.name === n);
    const c = catalog.find((x) => x.name === n);
    return !m || !c || JSON.stringify(m.profiles) !== JSON.stringify(c.profiles);
  });
  const note = differs.length
    ? `server.yaml and the cluster differ on ${differs.join(', ')}: llmgw ctl apply --dry-run says what applying would do\n`
    : '';
  return `${table(['MODEL', 'CATALOG', 'DESIRED', 'READY', 'OTHERS', 'PROFILES (engine, nodes×GPUs)×replicas'], rows)}${note}`;
}

/** `ctl models` */
export const models: CtlVerb = {
  help: `  models                      each model: its count in server.yaml's catalog, the desired count, replicas ready and
                              otherwise, and the replicas running each profile`,
  async run({ api, values, out, config }) {
    const { models: list } = await getJson<{ models: ModelRow[] }>(api, `${api.server}/v1/models`);
    out(values.json ? `${JSON.stringify(list, null, 2)}\n` : formatModels(list, config.catalog));
  },
};

/** `llmgw ctl models`: the catalog's models, their desired replicas and profiles. */
import { table } from '../table';
import { getJson, type CtlVerb } from './verb';

/** A model as GET /v1/models lists it. */
export interface ModelRow {
  name: string;
  replicas: number;
  profiles: { name: string; engine: string; nodes: number }[];
}

/** `ctl models` */
export const models: CtlVerb = {
  help: '  models                      catalog models and their desired replicas',
  async run({ api, values, out }) {
    const { models: list } = await getJson<{ models: ModelRow[] }>(api, `${api.server}/v1/models`);
    out(
      values.json
        ? `${JSON.stringify(list, null, 2)}\n`
        : table(
            ['MODEL', 'DESIRED', 'PROFILE'],
            list.map((m) => [
              m.name,
              String(m.replicas),
              m.profiles.map((p) => `${p.name} (${p.engine}, ${p.nodes} node${p.nodes > 1 ? 's' : ''})`).join(' '),
            ]),
          ),
    );
  },
};

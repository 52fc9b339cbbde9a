/** The catalog as desired state: what applying it changes, and how ctl apply says so. */
import { actionLine, planCatalog, specHash, type LiveModel } from '../../lib/catalog';
import type { ModelSpec } from '../../lib/types';

const spec = (name: string, replicas: number, args: string[] = []): ModelSpec => ({
  name,
  source: `sim://${name}`,
  replicas,
  profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args }],
});
const live = (applied: ModelSpec, o: Partial<LiveModel> = {}): [string, LiveModel] => [
  applied.name,
  { applied, desired: applied.replicas, deployed: true, replicas: applied.replicas, ...o },
];

describe('planCatalog', () => {
  it('deploys a new model, keeps an unchanged one', () => {
    expect(planCatalog([spec('a', 2), spec('b', 1)], new Map([live(spec('b', 1))]), { prune: false })).toEqual([
      { kind: 'add', model: 'a', replicas: 2 },
      { kind: 'unchanged', model: 'b', replicas: 1 },
    ]);
  });
  it("applies a count the catalog changed; a ctl scale stands while the catalog's count does not change", () => {
    expect(planCatalog([spec('a', 3)], new Map([live(spec('a', 1))]), { prune: false })).toEqual([
      { kind: 'scale', model: 'a', from: 1, to: 3 },
    ]);
    expect(
      planCatalog([spec('a', 1)], new Map([live(spec('a', 1), { desired: 4, replicas: 4 })]), { prune: false }),
    ).toEqual([{ kind: 'keep-scaled', model: 'a', desired: 4, catalog: 1 }]);
    // The catalog moved to what ctl scale already set: nothing to do.
    expect(planCatalog([spec('a', 4)], new Map([live(spec('a', 1), { desired: 4 })]), { prune: false })).toEqual([
      { kind: 'unchanged', model: 'a', replicas: 4 },
    ]);
  });
  it('rolls a changed profile, naming what changed, and only by what replicas start with', () => {
    expect(planCatalog([spec('a', 2, ['--fast'])], new Map([live(spec('a', 2))]), { prune: false })).toEqual([
      { kind: 'roll', model: 'a', replicas: 2, changed: ['profiles'] },
    ]);
    // drainGraceS and firstByteMs are read live: no roll.
    expect(
      planCatalog([{ ...spec('a', 2), drainGraceS: 60, firstByteMs: 5000 }], new Map([live(spec('a', 2))]), {
        prune: false,
      })[0]?.kind,
    ).toBe('unchanged');
    // A deployment still running an older spec than the recorded one rolls too.
    expect(
      planCatalog([spec('a', 2)], new Map([live(spec('a', 2), { runningHash: specHash(spec('a', 2, ['--old'])) })]), {
        prune: false,
      }),
    ).toEqual([{ kind: 'roll', model: 'a', replicas: 2, changed: ['the spec its replicas run'] }]);
  });
  it('starts a deployment that is not running, with the count it will keep', () => {
    expect(
      planCatalog([spec('a', 2)], new Map([live(spec('a', 2), { deployed: false, desired: 3 })]), { prune: false }),
    ).toEqual([
      { kind: 'keep-scaled', model: 'a', desired: 3, catalog: 2 },
      { kind: 'deploy', model: 'a', replicas: 3 },
    ]);
  });
  it('removes a model the catalog dropped only with prune', () => {
    const m = new Map([live(spec('gone', 2))]);
    expect(planCatalog([], m, { prune: false })).toEqual([{ kind: 'keep-removed', model: 'gone', replicas: 2 }]);
    expect(planCatalog([], m, { prune: true })).toEqual([{ kind: 'remove', model: 'gone', replicas: 2 }]);
  });
  it('hashes what replicas start with, stably', () => {
    expect(specHash(spec('a', 1))).toBe(specHash(spec('a', 5)));
    expect(specHash(spec('a', 1))).not.toBe(specHash(spec('a', 1, ['-x'])));
    expect(specHash(spec('a', 1))).toMatch(/^[0-9a-f]{8}$/);
  });
});

describe('actionLine', () => {
  it('says each change as ctl apply prints it', () => {
    expect(actionLine({ kind: 'add', model: 'sim-tiny', replicas: 1 })).toBe(
      '  + sim-tiny         deploy 1 replica (new in the catalog)',
    );
    expect(actionLine({ kind: 'roll', model: 'm', replicas: 2, changed: ['profiles'] })).toMatch(
      /^ {2}~ m +roll 2 replicas make-before-break, one at a time \(profiles changed\)$/,
    );
    expect(actionLine({ kind: 'keep-removed', model: 'old', replicas: 1 })).toMatch(
      /! old +not in the catalog: kept with 1 replica \(llmgw ctl apply --prune drains and stops it\)/,
    );
  });
});

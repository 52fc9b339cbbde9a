/**
 * The compiled build (npm run build): plain JavaScript that runs the same commands as the TypeScript, and that
 * bin/llmgw.js runs only while it is current. Built into a temp dir (bin/llmgw.js runs dist/build/ only, so the
 * tests running beside this one are not moved onto it). Prints the start times of both ways.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from '../../scripts/build';

const ROOT = resolve(__dirname, '../..');
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { sourceStamp } = require('../../bin/build-stamp.js') as {
  sourceStamp(root: string): { newestMtimeMs: number; files: number };
};

const run = (argv: string[]): { out: string; ms: number } => {
  const t = Date.now();
  const r = spawnSync(process.execPath, argv, { encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) throw new Error(`${argv.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { out: r.stdout, ms: Date.now() - t };
};
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

describe('the compiled build', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-build-'));
  const out = join(dir, 'dist', 'build');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('runs the same commands as the TypeScript, and starts sooner', () => {
    // As in a checkout: the build's modules find node_modules/ above dist/.
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    build(out);
    const main = join(out, 'cli/main.js');
    expect(run([main, 'version']).out).toMatch(/\(checkout, compiled build; Temporal SDK/);
    for (const argv of [
      ['ctl', 'nodes', '--help'],
      ['ctl', '--help'],
      ['cluster', '--help'],
      ['sim-engine', '--help'],
    ])
      expect(run([main, ...argv]).out).toBe(run([join(ROOT, 'bin/llmgw.js'), ...argv]).out);
    // The sim engine as a node's agent runs it from the build: its own compiled entry, no tsx.
    const sim = execFileSync(
      process.execPath,
      ['-e', `console.log(JSON.stringify(require(${JSON.stringify(join(out, 'lib/sim/argv.js'))}).simEngineArgv()))`],
      { encoding: 'utf8' },
    );
    expect(JSON.parse(sim)).toEqual([process.execPath, join(out, 'cli/sim-engine.js')]);

    const times = (argv: string[], env: NodeJS.ProcessEnv = {}): number =>
      median(
        [1, 2, 3].map(() => {
          const t = Date.now();
          const r = spawnSync(process.execPath, argv, { env: { ...process.env, ...env }, timeout: 30_000 });
          expect(r.status).toBe(0);
          return Date.now() - t;
        }),
      );
    console.log(
      [
        'start, median of 3 (this machine, now):',
        `  llmgw version            tsx ${times([join(ROOT, 'bin/llmgw.js'), 'version'], { LLMGW_NO_BUILD: '1' })} ms, build ${times([main, 'version'])} ms`,
        `  llmgw ctl nodes --help   tsx ${times([join(ROOT, 'bin/llmgw.js'), 'ctl', 'nodes', '--help'], { LLMGW_NO_BUILD: '1' })} ms, build ${times([main, 'ctl', 'nodes', '--help'])} ms`,
      ].join('\n'),
    );
  }, 120_000);

  test('is current only until a source file changes or one is added', () => {
    const tree = join(dir, 'tree');
    for (const d of ['workflows', 'activities', 'workers', 'gateway', 'cli', 'config', 'lib/x'])
      mkdirSync(join(tree, d), { recursive: true });
    writeFileSync(join(tree, 'package.json'), '{}');
    writeFileSync(join(tree, 'lib/x/a.ts'), 'export {};');
    const old = new Date(Date.now() - 60_000);
    utimesSync(join(tree, 'lib/x/a.ts'), old, old);
    utimesSync(join(tree, 'package.json'), old, old);
    const before = sourceStamp(tree);
    expect(sourceStamp(tree)).toEqual(before);
    writeFileSync(join(tree, 'lib/x/a.ts'), 'export const a = 1;');
    const edited = sourceStamp(tree);
    expect(edited.newestMtimeMs).toBeGreaterThan(before.newestMtimeMs);
    writeFileSync(join(tree, 'cli/b.ts'), 'export {};');
    utimesSync(join(tree, 'cli/b.ts'), old, old);
    expect(sourceStamp(tree).files).toBe(edited.files + 1);
  });
});

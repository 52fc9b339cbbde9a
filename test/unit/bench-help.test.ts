/** Every `npm run bench:*` answers `-- --help` with what it measures, without running. */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { leadingDoc } from '../helpers/bench-help';

const ROOT = resolve(__dirname, '../..');
const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
  .scripts;
const benches = Object.entries(scripts).filter(([name]) => /^bench(:|$)/.test(name));

test('leadingDoc takes the leading doc comment without its stars, and nothing else', () => {
  expect(
    leadingDoc('/**\n * `npm run bench:x`: times x.\n *\n *   npm run bench:x\n */\nconst a = 1; /** not this */'),
  ).toBe('`npm run bench:x`: times x.\n\n  npm run bench:x');
  expect(leadingDoc('const a = 1;\n/** late */')).toBeUndefined();
});

test.each(benches)('%s has --help: its own option or the shared one first, and a leading comment', (_name, cmd) => {
  const file = /test\/bench\/[\w-]+\.ts/.exec(cmd)?.[0];
  expect(file).toBeDefined();
  const source = readFileSync(join(ROOT, file!), 'utf8');
  expect(leadingDoc(source)).toMatch(/npm run bench/);
  const firstImport = /^import .*$/m.exec(source)?.[0] ?? '';
  const ownHelp = /help: \{ type: 'boolean'|usage: USAGE/.test(source);
  expect(ownHelp || firstImport.includes("'../helpers/bench-help'")).toBe(true);
});

test('npm run bench:placement -- --help prints its comment and exits 0 without running', () => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'test/bench/placement.ts', '--help'], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(r.status).toBe(0);
  expect(r.stdout).toMatch(/^`npm run bench:placement`: how long one placement takes/);
  expect(r.stdout).toContain('npm run bench:placement [-- --nodes 1000,10000]');
  // Exactly the comment: nothing of a run printed after it.
  expect(r.stdout).toBe(`${leadingDoc(readFileSync(join(ROOT, 'test/bench/placement.ts'), 'utf8'))}\n`);
});

/**
 * `npm run build`: llmgw as plain JavaScript, so `llmgw` starts without compiling TypeScript at every run. Each source
 * file is transformed on its own (esbuild, no bundle: a command still loads only the modules it needs — one bundle of
 * everything took 0.8 s to parse at every start, more than tsx) into dist/build/, mirroring the tree, with
 * package.json and the sources' other files beside them. The dependencies in BUNDLED_DEPS are the exception: each is
 * bundled into one file under the build's own node_modules/, which Node resolves before the checkout's. bin/llmgw.js runs the build while it is current — while no
 * source file changed since (sources.json: the newest mtime and the count of the files it was built from) — and the
 * TypeScript through tsx otherwise, so a stale build is never run. Release artefacts are built by scripts/release.ts.
 *
 *   npm run build            (about 1 s; again after a change you want the fast start for)
 *   node --import tsx scripts/build.ts --out DIR   (elsewhere: bin/llmgw.js runs dist/build/ only)
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { buildSync } from 'esbuild';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const stamp = require('../bin/build-stamp.js') as {
  SOURCE_DIRS: string[];
  sourceStamp(root: string): { newestMtimeMs: number; files: number };
};

const ROOT = resolve(__dirname, '..');

/**
 * Dependencies that `llmgw ctl` loads at every run, each bundled into one file (dist/build/node_modules/NAME/): yaml
 * is 72 modules in node_modules/, which cost about 50 ms of CPU to resolve, read and compile, and about 15 ms as
 * one file (bench:cli, docs/development.md). The code is the installed version's, unchanged.
 */
const BUNDLED_DEPS = ['yaml'];

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)],
  );
}

/** Builds into `out` (default dist/build: the one bin/llmgw.js runs; tests build elsewhere). */
export function build(out: string = join(ROOT, 'dist', 'build')): void {
  const started = Date.now();
  const stage = `${out}.stage-${process.pid}`;
  rmSync(stage, { recursive: true, force: true });
  // Stamped before building: a file edited while the build runs leaves the build stale, never wrongly current.
  const recorded = stamp.sourceStamp(ROOT);
  const files = stamp.SOURCE_DIRS.flatMap((d) => filesUnder(join(ROOT, d)));
  const ts = files.filter((f) => f.endsWith('.ts'));
  buildSync({
    entryPoints: ts,
    outdir: stage,
    outbase: ROOT,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    bundle: false,
    logLevel: 'error',
  });
  for (const dep of BUNDLED_DEPS) {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'node_modules', dep, 'package.json'), 'utf8')) as {
      version: string;
    };
    const to = join(stage, 'node_modules', dep);
    buildSync({
      entryPoints: [require.resolve(dep, { paths: [ROOT] })],
      outfile: join(to, 'index.js'),
      format: 'cjs',
      platform: 'node',
      target: 'node20',
      bundle: true,
      logLevel: 'error',
    });
    writeFileSync(
      join(to, 'package.json'),
      `${JSON.stringify({ name: dep, version: pkg.version, main: 'index.js', bundledBy: 'scripts/build.ts' }, null, 2)}\n`,
    );
  }
  for (const f of [...files.filter((x) => !x.endsWith('.ts')), join(ROOT, 'package.json')]) {
    const to = join(stage, relative(ROOT, f));
    mkdirSync(dirname(to), { recursive: true });
    copyFileSync(f, to);
  }
  writeFileSync(join(stage, 'sources.json'), `${JSON.stringify({ ...recorded, dirs: stamp.SOURCE_DIRS }, null, 2)}\n`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(dirname(out), { recursive: true });
  renameSync(stage, out);
  process.stderr.write(
    `[build] ${relative(process.cwd(), out) || out}: ${ts.length} files in ${Date.now() - started} ms; bin/llmgw.js runs it until a source file changes (LLMGW_NO_BUILD=1: never)\n`,
  );
}

if (require.main === module) {
  const at = process.argv.indexOf('--out');
  build(at > 0 ? resolve(process.argv[at + 1] ?? '') : undefined);
}

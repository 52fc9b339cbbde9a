/**
 * `npm run release`: builds self-contained release artefacts, one tarball per platform (linux-x64, linux-arm64):
 * the whole CLI bundled into one JS file, the Temporal core bridge's prebuilt native addon for that platform,
 * the Node runtime for that platform (npm's node-linux-<arch> package), a launcher, and every role's systemd unit
 * with the users they run as (share/systemd, share/sysusers.d; lib/deploy/units.ts). Nothing is built on the
 * node, and nothing of the working tree is needed to run it: onboarding installs one of these with --binary.
 *
 *   node --import tsx scripts/release.ts [--platform linux-x64[,linux-arm64]] [--out dist]
 *
 * Downloads are cached under .tools/cache, so a second build needs no network.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  createReadStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { Plugin } from 'esbuild';
import { ASSET_FILES } from '../gateway/control/page/assets';
import { roleUnits, SERVICE_ROLES, sysusersConf, unitName } from '../lib/deploy/units';

const ROOT = resolve(__dirname, '..');
/** The Node runtime shipped in the artefacts (the one llmgw is developed and tested on). */
export const RELEASE_NODE_VERSION = '20.20.2';
export const PLATFORMS = ['linux-x64', 'linux-arm64'] as const;
export type Platform = (typeof PLATFORMS)[number];

/** The core bridge's name for each platform's prebuilt addon (node_modules/@temporalio/core-bridge/releases/). */
const BRIDGE_TARGET: Record<Platform, string> = {
  'linux-x64': 'x86_64-unknown-linux-gnu',
  'linux-arm64': 'aarch64-unknown-linux-gnu',
};

const LAUNCHER = `#!/bin/sh
# llmgw release launcher: the bundled program run by the Node runtime shipped beside it.
here=$(dirname "$(readlink -f "$0")")
exec "$here/../node/bin/node" "$here/../lib/llmgw.js" "$@"
`;
/** The operator commands that also have a dash-named launcher (llmgw-onboard-node = llmgw onboard-node, …). */
const DASH_COMMANDS = ['onboard-node', 'provision-node', 'add-node'] as const;
const dashLauncher = (command: string): string => `#!/bin/sh
# llmgw-${command}: the same as llmgw ${command}.
here=$(dirname "$(readlink -f "$0")")
exec "$here/llmgw" ${command} "$@"
`;

/**
 * The Temporal worker's workflow bundler (webpack, swc) has no place in the artefact: a worker there runs
 * activities, or workflows from the workflow bundle built here (lib/workflows.js).
 */
const noWorkflowBundler: Plugin = {
  name: 'llmgw-no-workflow-bundler',
  setup(build) {
    build.onResolve({ filter: /^\.\/workflow\/bundler$/ }, (args) =>
      args.importer.includes('@temporalio/worker') ? { path: 'bundler', namespace: 'llmgw-stub' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'llmgw-stub' }, () => ({
      loader: 'js',
      contents: `const no = () => { throw new Error('llmgw release artefact: workflows come from its lib/workflows.js, they are not bundled at run time'); };
        exports.defaultWorkflowInterceptorModules = [];
        exports.bundleWorkflowCode = no;
        exports.WorkflowCodeBundler = class { constructor() { no(); } };`,
    }));
  },
};

export interface ReleaseInfoFile {
  name: string;
  version: string;
  commit: string;
  platform: Platform;
  node: string;
  builtAt: string;
}

export interface BuiltArtefact {
  platform: Platform;
  /** the tarball */
  file: string;
  sha256: string;
  info: ReleaseInfoFile;
}

/** The commit being built, with -dirty when the working tree has changes (an honest name for a local build). */
function commitName(): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty =
      execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { cwd: ROOT, encoding: 'utf8' }).trim() !==
      '';
    return dirty ? `${commit}-dirty` : commit;
  } catch {
    return 'unknown';
  }
}

/** The node binary of npm's node-linux-<arch> package, downloaded once into the cache. */
function nodeBinary(platform: Platform, cacheDir: string, log: (s: string) => void): string {
  const pkg = `node-${platform}`;
  const dir = join(cacheDir, `${pkg}-${RELEASE_NODE_VERSION}`);
  const bin = join(dir, 'package', 'bin', 'node');
  if (existsSync(bin)) return bin;
  mkdirSync(cacheDir, { recursive: true });
  log(`downloading ${pkg}@${RELEASE_NODE_VERSION} (npm registry) into ${cacheDir}`);
  const tgz =
    execFileSync('npm', ['pack', `${pkg}@${RELEASE_NODE_VERSION}`, '--pack-destination', cacheDir, '--silent'], {
      cwd: cacheDir,
      encoding: 'utf8',
    })
      .trim()
      .split('\n')
      .pop() ?? '';
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  execFileSync('tar', ['-xzf', join(cacheDir, tgz), '-C', tmp, 'package/bin/node']);
  rmSync(join(cacheDir, tgz), { force: true });
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return bin;
}

function sha256File(file: string): Promise<string> {
  return new Promise((res, rej) => {
    const h = createHash('sha256');
    createReadStream(file)
      .on('data', (b) => h.update(b))
      .on('end', () => res(h.digest('hex')))
      .on('error', rej);
  });
}

/** Bundles the CLI, the workflow worker thread and the workflows (platform-independent JS) into `dir`. */
async function bundleProgram(dir: string, define: Omit<ReleaseInfoFile, 'name' | 'platform'>): Promise<void> {
  const esbuild = await import('esbuild');
  const common = {
    bundle: true,
    platform: 'node' as const,
    target: 'node20',
    format: 'cjs' as const,
    logLevel: 'error' as const,
    // optional native parts of ssh2 (it falls back to JavaScript without them)
    external: ['cpu-features', '*.node'],
    plugins: [noWorkflowBundler],
    legalComments: 'none' as const,
  };
  await esbuild.build({
    ...common,
    entryPoints: [join(ROOT, 'cli/release-main.ts')],
    outfile: join(dir, 'llmgw.js'),
    // Modules' `if (require.main === module)` entry guards would all fire inside one bundle (its ESM-shaped
    // modules share the bundle's `module`): only cli/release-main.ts is an entry there.
    define: { LLMGW_RELEASE: JSON.stringify(define), 'require.main': 'undefined' },
  });
  // Temporal runs workflows in worker threads started from this file, which it finds beside its own code.
  await esbuild.build({
    ...common,
    entryPoints: [require.resolve('@temporalio/worker/lib/workflow/workflow-worker-thread')],
    outfile: join(dir, 'workflow-worker-thread.js'),
  });
  const { bundleWorkflowCode } = await import('@temporalio/worker');
  const quiet = {
    info: () => undefined,
    warn: () => undefined,
    error: console.error,
    debug: () => undefined,
    trace: () => undefined,
    log: () => undefined,
  };
  const { code } = await bundleWorkflowCode({ workflowsPath: join(ROOT, 'workflows'), logger: quiet });
  writeFileSync(join(dir, 'workflows.js'), code);
  // source-map (workflow stack traces in the worker) reads its wasm from beside its code, which is now the bundle.
  copyFileSync(require.resolve('source-map/lib/mappings.wasm'), join(dir, 'mappings.wasm'));
}

/** Builds one tarball per platform into `outDir`; returns each with its sha256. */
export async function buildRelease(o: {
  platforms: readonly Platform[];
  outDir: string;
  cacheDir?: string;
  log?: (s: string) => void;
}): Promise<BuiltArtefact[]> {
  const log = o.log ?? ((s: string): void => void process.stderr.write(`[release] ${s}\n`));
  const cacheDir = o.cacheDir ?? join(ROOT, '.tools', 'cache');
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  const base = {
    version: pkg.version,
    commit: commitName(),
    node: `v${RELEASE_NODE_VERSION}`,
    builtAt: new Date().toISOString(),
  };
  mkdirSync(o.outDir, { recursive: true });
  const work = join(o.outDir, `.stage-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  const js = join(work, 'js');
  mkdirSync(js, { recursive: true });
  let t = Date.now();
  await bundleProgram(js, base);
  log(`bundled the program in ${Date.now() - t} ms`);
  const built: BuiltArtefact[] = [];
  try {
    for (const platform of o.platforms) {
      t = Date.now();
      const info: ReleaseInfoFile = { ...base, platform, name: `llmgw-${pkg.version}-${platform}` };
      const stage = join(work, info.name);
      for (const d of ['bin', 'lib', 'node/bin']) mkdirSync(join(stage, d), { recursive: true });
      for (const f of readdirSync(js)) copyFileSync(join(js, f), join(stage, 'lib', f));
      // The cluster page's files: the control plane reads them from page/ beside the program (gateway/control/page/assets.ts).
      mkdirSync(join(stage, 'lib/page'));
      for (const f of Object.keys(ASSET_FILES))
        copyFileSync(join(ROOT, 'gateway/control/page/assets', f), join(stage, 'lib/page', f));
      const addon = join(ROOT, 'node_modules/@temporalio/core-bridge/releases', BRIDGE_TARGET[platform], 'index.node');
      mkdirSync(join(stage, 'lib/releases', BRIDGE_TARGET[platform]), { recursive: true });
      copyFileSync(addon, join(stage, 'lib/releases', BRIDGE_TARGET[platform], 'index.node'));
      copyFileSync(nodeBinary(platform, cacheDir, log), join(stage, 'node/bin/node'));
      chmodSync(join(stage, 'node/bin/node'), 0o755);
      // server.yaml's commented example: llmgw init writes each role's file from it (lib/deploy/server-yaml.ts).
      copyFileSync(join(ROOT, 'config/server.example.yaml'), join(stage, 'lib/server.example.yaml'));
      // Every role's hardened unit and the users they run as (docs/deploying.md).
      mkdirSync(join(stage, 'share/systemd'), { recursive: true });
      mkdirSync(join(stage, 'share/sysusers.d'), { recursive: true });
      const units = roleUnits();
      for (const role of SERVICE_ROLES) writeFileSync(join(stage, 'share/systemd', unitName(role)), units[role]);
      writeFileSync(join(stage, 'share/sysusers.d/llmgw.conf'), sysusersConf());
      writeFileSync(join(stage, 'bin/llmgw'), LAUNCHER, { mode: 0o755 });
      for (const c of DASH_COMMANDS) writeFileSync(join(stage, `bin/llmgw-${c}`), dashLauncher(c), { mode: 0o755 });
      writeFileSync(join(stage, 'release.json'), `${JSON.stringify(info, null, 2)}\n`);
      const file = join(o.outDir, `${info.name}.tar.gz`);
      // gzip -1: a third faster than the default level for a few percent more bytes (mostly the node binary).
      execFileSync('tar', ['-c', '-I', 'gzip -1', '-f', `${file}.tmp`, '-C', work, info.name]);
      renameSync(`${file}.tmp`, file);
      const sha256 = await sha256File(file);
      writeFileSync(`${file}.sha256`, `${sha256}  ${info.name}.tar.gz\n`);
      log(`${file} (${platform}) in ${Date.now() - t} ms, sha256 ${sha256}`);
      built.push({ platform, file, sha256, info });
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return built;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { platform: { type: 'string' }, out: { type: 'string' } } });
  const platforms = (values.platform ?? PLATFORMS.join(',')).split(',').filter(Boolean);
  for (const p of platforms)
    if (!(PLATFORMS as readonly string[]).includes(p))
      throw new Error(`--platform ${p}: one of ${PLATFORMS.join(', ')}`);
  const outDir = resolve(values.out ?? join(ROOT, 'dist'));
  const started = Date.now();
  const built = await buildRelease({ platforms: platforms as Platform[], outDir });
  for (const b of built) process.stdout.write(`${b.file}\n`);
  process.stderr.write(
    `[release] ${built.length} artefact${built.length === 1 ? '' : 's'} in ${((Date.now() - started) / 1000).toFixed(1)} s into ${dirname(built[0]?.file ?? outDir)}\n`,
  );
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`release: ${err.message}\n`);
    process.exit(1);
  });
}

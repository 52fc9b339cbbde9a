/**
 * The release artefact for this machine's platform, built by scripts/release.ts once per content of the
 * sources it bundles and reused by every test that needs one (a build takes ~10 s; the Node download is cached
 * under .tools/cache).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { platformName } from '../../lib/release';
import { buildRelease, type BuiltArtefact, type Platform } from '../../scripts/release';

const ROOT = resolve(__dirname, '../..');
const SOURCES = ['activities', 'cli', 'config', 'gateway', 'lib', 'workers', 'workflows', 'scripts'];

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : /\.(ts|json|yaml)$/.test(f) ? [p] : [];
  });
}

let built: Promise<BuiltArtefact> | undefined;

/** This platform's artefact for the current sources (built now, or the one built for them before). */
export function testArtefact(): Promise<BuiltArtefact> {
  return (built ??= (async () => {
    const platform = platformName() as Platform | null;
    if (!platform) throw new Error(`no release artefact for ${process.platform}-${process.arch}`);
    const h = createHash('sha256');
    for (const f of [...SOURCES.flatMap((d) => files(join(ROOT, d))), join(ROOT, 'package-lock.json')].sort())
      h.update(f).update(readFileSync(f));
    const dir = join(ROOT, '.tools', 'cache', 'test-release', h.digest('hex').slice(0, 16));
    const meta = join(dir, 'artefact.json');
    if (existsSync(meta)) return JSON.parse(readFileSync(meta, 'utf8')) as BuiltArtefact;
    // One build per content at a time: another test file building it is waited for (a dead builder's lock is taken over).
    const lock = `${dir}.lock`;
    mkdirSync(join(dir, '..'), { recursive: true });
    for (let waited = 0; ; waited += 250) {
      try {
        mkdirSync(lock);
        writeFileSync(join(lock, 'pid'), String(process.pid));
        break;
      } catch {
        if (!lockHolderAlive(lock) && waited > 1000) rmSync(lock, { recursive: true, force: true });
        if (existsSync(meta)) return JSON.parse(readFileSync(meta, 'utf8')) as BuiltArtefact;
        if (waited > 180_000) throw new Error(`waited 3 min for another process's release build (${lock})`);
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    try {
      if (existsSync(meta)) return JSON.parse(readFileSync(meta, 'utf8')) as BuiltArtefact;
      return await build(platform, dir, meta);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  })());
}

/** True while the process named in the lock's pid file runs (or the file is not written yet). */
function lockHolderAlive(lock: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(join(lock, 'pid'), 'utf8'));
  } catch {
    return false;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Builds into a directory beside `dir`, then moves it in whole. */
async function build(platform: Platform, dir: string, meta: string): Promise<BuiltArtefact> {
  {
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    const [a] = await buildRelease({ platforms: [platform], outDir: tmp, log: () => undefined });
    if (!a) throw new Error('the release build made no artefact');
    const art = { ...a, file: join(dir, a.file.slice(tmp.length + 1)) };
    writeFileSync(join(tmp, 'artefact.json'), JSON.stringify(art));
    mkdirSync(join(dir, '..'), { recursive: true });
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process won the race: its build is as good
    }
    // Older builds of other sources: keep the cache to the last few.
    const all = readdirSync(join(dir, '..'))
      .filter((d) => !/\.(tmp-|lock$)/.test(d))
      .map((d) => join(dir, '..', d))
      .sort((x, y) => statSync(y).mtimeMs - statSync(x).mtimeMs);
    for (const old of all.slice(3)) rmSync(old, { recursive: true, force: true });
    return JSON.parse(readFileSync(meta, 'utf8')) as BuiltArtefact;
  }
}

/**
 * The release artefact stands alone: unpacked anywhere, it runs with its own Node and its own native addon
 * from a directory with no repository, no node_modules and no node on PATH — `llmgw version` says which release
 * it is, and it can run an engine the way the agent does (the sim engine from its own bundle).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { RELEASE_NODE_VERSION } from '../../scripts/release';
import { testArtefact } from '../helpers/release';

const ROOT = resolve(__dirname, '../..');

describe('the release artefact', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-release-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('runs llmgw version and the sim engine from a directory with no repository', async () => {
    const a = await testArtefact();
    const listing = execFileSync('tar', ['-tzf', a.file], { encoding: 'utf8', maxBuffer: 1 << 24 }).split('\n');
    const top = a.info.name;
    expect(listing).toEqual(expect.arrayContaining([`${top}/bin/llmgw`, `${top}/bin/llmgw-onboard-node`, `${top}/node/bin/node`, `${top}/lib/llmgw.js`,
      `${top}/lib/workflows.js`, `${top}/lib/workflow-worker-thread.js`, `${top}/lib/releases/x86_64-unknown-linux-gnu/index.node`, `${top}/release.json`]));
    expect(listing.filter((f) => f.includes('node_modules'))).toEqual([]);
    expect(execFileSync('sha256sum', [a.file], { encoding: 'utf8' }).split(' ')[0]).toBe(a.sha256);

    execFileSync('tar', ['-xzf', a.file, '-C', dir]);
    const bin = join(dir, top, 'bin/llmgw');
    // Nothing of the checkout in the bundle: not its path, not its modules.
    expect(readFileSync(join(dir, top, 'lib/llmgw.js'), 'utf8').includes(ROOT)).toBe(false);
    const empty = mkdtempSync(join(tmpdir(), 'llmgw-norepo-'));
    // No node on PATH: only what the launcher uses (coreutils' readlink and dirname).
    const path = join(empty, 'bin');
    execFileSync('mkdir', ['-p', path]);
    for (const tool of ['readlink', 'dirname']) execFileSync('ln', ['-s', execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(), join(path, tool)]);
    const env = { PATH: path, HOME: empty };
    const version = spawnSync(bin, ['version'], { cwd: empty, env, encoding: 'utf8' });
    expect({ status: version.status, stderr: version.stderr }).toEqual({ status: 0, stderr: '' });
    expect(version.stdout).toMatch(new RegExp(`^llmgw ${a.info.version} \\(release linux-x64, commit [0-9a-f]{12}(-dirty)?, built .*; Temporal SDK [\\d.]+, Node v${RELEASE_NODE_VERSION.replace(/\./g, '\\.')}\\)\n$`));
    expect(JSON.parse(readFileSync(join(dir, top, 'release.json'), 'utf8'))).toMatchObject({ name: top, platform: 'linux-x64', node: `v${RELEASE_NODE_VERSION}` });
    const probe = spawnSync(bin, ['engine-probe', 'sim'], { cwd: empty, env, encoding: 'utf8', timeout: 60_000 });
    expect({ status: probe.status, stderr: probe.stderr }).toEqual({ status: 0, stderr: '' });
    expect(probe.stdout).toMatch(/^sim: serving after \d+ ms\n$/);
    const help = spawnSync(join(dir, top, 'bin/llmgw-onboard-node'), ['--help'], { cwd: empty, env, encoding: 'utf8' });
    expect(help.stdout).toMatch(/--binary ARTEFACT/);
    expect(existsSync(join(empty, '.llmgw'))).toBe(false);
    rmSync(empty, { recursive: true, force: true });
  }, 180_000);
});

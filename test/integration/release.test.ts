/**
 * The release artefact stands alone: unpacked anywhere, it runs with its own Node and its own native addon
 * from a directory with no repository, no node_modules and no node on PATH — `llmgw version` says which release
 * it is, and it can run an engine the way the agent does (the sim engine from its own bundle). Its control-plane
 * role runs workflows from the workflow bundle built into it.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { RELEASE_NODE_VERSION } from '../../scripts/release';
import { QUEUES } from '../../lib/names';
import { dropDatabase, startTestTemporal, testMysqlUrl } from '../helpers/cluster-parts';
import { freePort } from '../helpers/ports';
import { testArtefact } from '../helpers/release';
import { testTls } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');

describe('the release artefact', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-release-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('runs llmgw version and the sim engine from a directory with no repository', async () => {
    const a = await testArtefact();
    const listing = execFileSync('tar', ['-tzf', a.file], { encoding: 'utf8', maxBuffer: 1 << 24 }).split('\n');
    const top = a.info.name;
    expect(listing).toEqual(
      expect.arrayContaining([
        `${top}/bin/llmgw`,
        `${top}/bin/llmgw-onboard-node`,
        `${top}/bin/llmgw-provision-node`,
        `${top}/bin/llmgw-add-node`,
        `${top}/node/bin/node`,
        `${top}/lib/llmgw.js`,
        `${top}/lib/workflows.js`,
        `${top}/lib/workflow-worker-thread.js`,
        `${top}/lib/releases/x86_64-unknown-linux-gnu/index.node`,
        `${top}/release.json`,
      ]),
    );
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
    for (const tool of ['readlink', 'dirname'])
      execFileSync('ln', [
        '-s',
        execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(),
        join(path, tool),
      ]);
    const env = { PATH: path, HOME: empty };
    const version = spawnSync(bin, ['version'], { cwd: empty, env, encoding: 'utf8' });
    expect({ status: version.status, stderr: version.stderr }).toEqual({ status: 0, stderr: '' });
    expect(version.stdout).toMatch(
      new RegExp(
        `^llmgw ${a.info.version} \\(release linux-x64, commit [0-9a-f]{12}(-dirty)?, built .*; Temporal SDK [\\d.]+, Node v${RELEASE_NODE_VERSION.replace(/\./g, '\\.')}\\)\n$`,
      ),
    );
    expect(JSON.parse(readFileSync(join(dir, top, 'release.json'), 'utf8'))).toMatchObject({
      name: top,
      platform: 'linux-x64',
      node: `v${RELEASE_NODE_VERSION}`,
    });
    const probe = spawnSync(bin, ['engine-probe', 'sim'], { cwd: empty, env, encoding: 'utf8', timeout: 60_000 });
    expect({ status: probe.status, stderr: probe.stderr }).toEqual({ status: 0, stderr: '' });
    expect(probe.stdout).toMatch(/^sim: serving after \d+ ms\n$/);
    const help = spawnSync(join(dir, top, 'bin/llmgw-onboard-node'), ['--help'], { cwd: empty, env, encoding: 'utf8' });
    expect(help.stdout).toMatch(/--binary ARTEFACT/);
    const addHelp = spawnSync(join(dir, top, 'bin/llmgw-add-node'), ['--help'], { cwd: empty, env, encoding: 'utf8' });
    expect(addHelp.stdout).toMatch(/--provision-only/);
    const provisionHelp = spawnSync(join(dir, top, 'bin/llmgw-provision-node'), ['--help'], {
      cwd: empty,
      env,
      encoding: 'utf8',
    });
    expect(provisionHelp.stdout).toMatch(/--vmid N/);
    expect(existsSync(join(empty, '.llmgw'))).toBe(false);
    rmSync(empty, { recursive: true, force: true });
  }, 180_000);

  test('runs the control plane, whose worker runs workflows from the bundle built into the artefact', async () => {
    const a = await testArtefact();
    const bin = join(dir, a.info.name, 'bin/llmgw');
    if (!existsSync(bin)) execFileSync('tar', ['-xzf', a.file, '-C', dir]);
    const temporal = await startTestTemporal();
    const mysql = testMysqlUrl();
    const tls = testTls();
    const cfg = join(dir, 'server.yaml');
    const listener = async (): Promise<string> => `{ host: 127.0.0.1, port: ${await freePort()} }`;
    writeFileSync(
      cfg,
      [
        'temporal:',
        `  address: "${temporal.address}"`,
        'mysql:',
        `  url: "${mysql}"`,
        'tls:',
        ...Object.entries(tls).map(([k, v]) => `  ${k}: "${v}"`),
        'listeners:',
        `  controlPlane: ${await listener()}`,
        `  gateway: ${await listener()}`,
        `  temporalDoor: ${await listener()}`,
        'catalog: []',
        '',
      ].join('\n'),
    );
    const cp = spawn(bin, ['control-plane', '--config', cfg], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    cp.stdout.on('data', (b: Buffer) => void (out += b.toString()));
    cp.stderr.on('data', (b: Buffer) => void (out += b.toString()));
    try {
      await waitFor(
        () => {
          if (cp.exitCode !== null) throw new Error(`the artefact's control plane exited ${cp.exitCode}: ${out}`);
          return out.includes('control plane listening');
        },
        { timeoutMs: 60_000, what: `the artefact's control plane to listen (${out.slice(-2000)})` },
      );
      // publishCrl runs on llmgw-control and schedules its one activity on llmgw-ca: seeing that activity
      // pending means the workflow code ran, from lib/workflows.js.
      const { Client, Connection } = await import('@temporalio/client');
      const connection = await Connection.connect({ address: temporal.address });
      const handle = await new Client({ connection }).workflow.start('publishCrl', {
        taskQueue: QUEUES.control,
        workflowId: 'release-smoke',
        args: [{ why: 'release test' }],
      });
      await waitFor(
        async () => (await handle.describe()).raw.pendingActivities?.some((p) => p.activityType?.name === 'currentCrl'),
        { timeoutMs: 30_000, what: 'publishCrl to schedule currentCrl' },
      );
      await handle.terminate();
      await connection.close();
    } finally {
      cp.kill('SIGTERM');
      await temporal.stop();
      await dropDatabase(mysql);
    }
  }, 180_000);
});

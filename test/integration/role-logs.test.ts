/**
 * A role's log is JSON lines and nothing else: real role processes, their whole stderr read. What Temporal's Rust
 * core logs (here: a worker whose Temporal went away) arrives through the role's logger as JSON with a level, not
 * as ANSI-coloured text of its own; a role that cannot start says why in one `error` line and exits 1.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { notJsonLog, processExited, spawnLlmgw, untilLogged, type LlmgwProc } from '../helpers/llmgw-process';
import { waitFor } from '../helpers/wait';

describe('role processes log JSON lines only', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-role-logs-'));
  let temporal: DevServer;
  let config: ServerConfig;
  const procs: LlmgwProc[] = [];
  const configFile = (name: string, c: ServerConfig): string => {
    const file = join(dir, name);
    writeFileSync(file, stringify(c));
    return file;
  };

  beforeAll(async () => {
    temporal = await startTestTemporal();
    config = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGKILL');
    await temporal.stop();
    await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  });

  test("ca-worker: its Temporal killed, the core's connection warnings come as JSON lines of the role's log", async () => {
    const p = spawnLlmgw([
      'ca-worker',
      '--config',
      configFile('server.yaml', config),
      '--ca-dir',
      join(config.tls.ca, '..'),
    ]);
    procs.push(p);
    await untilLogged(p, 'ca worker running', 60_000, 'the ca-worker to run');
    temporal.process.kill('SIGKILL');
    const parsed = (): Record<string, unknown>[] =>
      p.stderr.flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, unknown>];
        } catch {
          return [];
        }
      });
    const core = await waitFor(() => parsed().find((l) => l.sdkComponent === 'core' && l.level === 'warn'), {
      timeoutMs: 60_000,
      what: "a warning of Temporal's core about the lost server",
    });
    console.log(`a forwarded core line: ${JSON.stringify(core).slice(0, 300)}`);
    expect(core).toMatchObject({ c: 'ca-worker', msg: expect.any(String), t: expect.any(String) });
    p.child.kill('SIGKILL');
    await processExited(p.child);
    expect(notJsonLog(p.stderr)).toEqual([]);
    expect(p.lines.length).toBe(p.stderr.length); // nothing on stdout either
  }, 120_000);

  test('control-plane that cannot start: one error line naming the code and the fix, exit code 1', async () => {
    const broken = configFile('broken.yaml', {
      ...config,
      tls: { ...config.tls, serverCert: join(dir, 'missing.crt') },
    });
    const p = spawnLlmgw(['control-plane', '--config', broken]);
    procs.push(p);
    await processExited(p.child);
    expect(p.child.exitCode).toBe(1);
    expect(notJsonLog(p.stderr)).toEqual([]);
    const last = JSON.parse(p.stderr.at(-1) as string) as Record<string, unknown>;
    expect(last).toMatchObject({
      level: 'error',
      c: 'control-plane',
      msg: 'control-plane could not start',
      code: 'LLMGW_CONFIG_INVALID',
      error: expect.stringContaining('tls.serverCert'),
    });
  });
});

/**
 * Every role's systemd unit, as the release artefact ships it: each passes `systemd-analyze verify` without a single
 * warning (run against the unpacked artefact, whose bin/llmgw its ExecStart names), keeps the hardening it promises,
 * and the users it runs as are made by the shipped sysusers.d file. The artefact's own llmgw writes a role's
 * server.yaml (llmgw init reads the example shipped beside the program). Exposure scores are printed.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseServerConfig } from '../../config/load';
import {
  HOST_PATHS,
  ROLE_USERS,
  roleUnits,
  SERVICE_ROLES,
  sysusersConf,
  unitName,
  type UnitPaths,
} from '../../lib/deploy/units';
import { testArtefact } from '../helpers/release';

const SYSTEMD_ANALYZE = '/usr/bin/systemd-analyze';

describe('the units of every role', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-units-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  let top = '';

  beforeAll(async () => {
    const a = await testArtefact();
    execFileSync('tar', ['-xzf', a.file, '-C', dir]);
    top = join(dir, a.info.name);
  }, 180_000);

  test('the artefact ships each unit and the sysusers file as lib/deploy/units.ts writes them for a host', () => {
    const units = roleUnits(HOST_PATHS);
    for (const role of SERVICE_ROLES)
      expect(readFileSync(join(top, 'share/systemd', unitName(role)), 'utf8')).toBe(units[role]);
    expect(readFileSync(join(top, 'share/sysusers.d/llmgw.conf'), 'utf8')).toBe(sysusersConf());
  });

  test('systemd-analyze verify passes every unit without a warning, pointed at the unpacked artefact', () => {
    // The host's paths, moved under the test's directory: bin/llmgw is the artefact's own launcher.
    const root = join(dir, 'host');
    const paths: UnitPaths = {
      current: top,
      etc: join(root, 'etc/llmgw'),
      caState: join(root, 'var/lib/llmgw-ca'),
      agentState: join(root, 'var/lib/llmgw'),
    };
    mkdirSync(paths.etc, { recursive: true });
    // The agent's ExecStart is the script onboarding writes.
    writeFileSync(join(paths.etc, 'agent.sh'), `#!/bin/sh\nexec ${top}/bin/llmgw agent "$@"\n`);
    chmodSync(join(paths.etc, 'agent.sh'), 0o755);
    const unitsDir = join(root, 'units');
    mkdirSync(unitsDir, { recursive: true });
    const units = roleUnits(paths);
    const exposure: Record<string, string> = {};
    for (const role of SERVICE_ROLES) {
      const file = join(unitsDir, unitName(role));
      writeFileSync(file, units[role]);
      const r = spawnSync(SYSTEMD_ANALYZE, ['verify', file], { encoding: 'utf8' });
      // verify exits 0 on unknown keys and misplaced settings: any line it prints about our unit is a failure.
      const ours = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.includes(unitName(role)) || l.includes(file));
      expect({ role, status: r.status, warnings: ours }).toEqual({ role, status: 0, warnings: [] });
      const s = spawnSync(SYSTEMD_ANALYZE, ['security', '--offline=true', file], { encoding: 'utf8' });
      exposure[role] = /Overall exposure level for \S+: ([\d.]+ \w+)/.exec(s.stdout)?.[1] ?? `? (${s.stderr.trim()})`;
    }
    process.stdout.write(
      `systemd-analyze security (0 = fully sandboxed, 10 = not at all): ${Object.entries(exposure)
        .map(([r, e]) => `${r} ${e}`)
        .join(', ')}\n`,
    );
  });

  test('a unit that names a missing program fails verify (the check can fail)', () => {
    const file = join(dir, unitName('gateway'));
    writeFileSync(file, roleUnits({ ...HOST_PATHS, current: join(dir, 'nowhere') }).gateway);
    const r = spawnSync(SYSTEMD_ANALYZE, ['verify', file], { encoding: 'utf8' });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/is not executable/);
  });

  test.each(SERVICE_ROLES.map((r) => [r]))('%s: hardened as promised', (role) => {
    const u = roleUnits()[role];
    for (const line of [
      'NoNewPrivileges=yes',
      'ProtectSystem=strict',
      role === 'agent' ? 'Restart=always' : 'Restart=on-failure',
      'WantedBy=multi-user.target',
      'After=network-online.target',
    ])
      expect(u).toContain(line);
    expect(u).toMatch(/^ProtectHome=(yes|read-only)$/m);
    expect(u).toMatch(/^CapabilityBoundingSet=/m);
    if (role === 'agent') {
      // Root with three capabilities (CAP_NET_ADMIN: the rank fence), and engines that outlive it: no private /tmp,
      // cgroup not killed.
      expect(u).not.toMatch(/^User=/m);
      expect(u).toMatch(/^CapabilityBoundingSet=CAP_IPC_LOCK CAP_SYS_NICE CAP_NET_ADMIN$/m);
      expect(u).toContain('KillMode=process');
      expect(u).toMatch(/^ReadWritePaths=\/var\/lib\/llmgw \/etc\/llmgw /m);
    } else {
      expect(u).toContain(`User=${ROLE_USERS[role]}`);
      expect(u).toContain('PrivateTmp=yes');
      expect(u).toMatch(/^CapabilityBoundingSet=$/m);
      expect(u).toContain(`ExecStart=/opt/llmgw/current/bin/llmgw ${role} --config /etc/llmgw/${role}.yaml`);
      if (role === 'ca-worker') expect(u).toMatch(/^ReadWritePaths=\/var\/lib\/llmgw-ca$/m);
      else expect(u).not.toMatch(/^ReadWritePaths=/m);
    }
  });

  test('systemd-sysusers makes the users the units name', () => {
    const root = join(dir, 'sysroot');
    mkdirSync(join(root, 'etc'), { recursive: true });
    const r = spawnSync('systemd-sysusers', [`--root=${root}`, join(top, 'share/sysusers.d/llmgw.conf')], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(0);
    expect(r.stderr).not.toMatch(/warn|fail|invalid|ignor/i);
    const users = readFileSync(join(root, 'etc/passwd'), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(':'));
    expect(users.map((u) => u[0]).sort()).toEqual(Object.values(ROLE_USERS).sort());
    expect(users.find((u) => u[0] === 'llmgw-ca')?.[5]).toBe('/var/lib/llmgw-ca');
  });

  test("the artefact's llmgw init writes a role's server.yaml from the example it ships", () => {
    const out = join(dir, 'gateway.yaml');
    const r = spawnSync(
      join(top, 'bin/llmgw'),
      ['init', 'gateway', '--out', out, '--mysql', 'mysql://llmgw_gateway:s3cret@127.0.0.1:1/llmgw'],
      { encoding: 'utf8', cwd: dir, env: { PATH: '/usr/bin:/bin', HOME: dir } },
    );
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    expect(r.stdout).toMatch(/mysql\.url +127\.0\.0\.1:1\/llmgw +unreachable \(ECONNREFUSED\)/);
    const config = parseServerConfig(readFileSync(out, 'utf8'), out);
    expect(config.listeners.gateway.host).toBe('0.0.0.0');
  });
});

/**
 * `llmgw init ROLE` for every role, run as an operator runs it: the file it writes is refused by the real config
 * loader until its REQUIRED values are filled, then loads; it holds only the role's sections, with comments taken
 * from config/server.example.yaml; an existing file is never overwritten without --force; and the reachability
 * check reports a closed port as unreachable and the real MariaDB as ok.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { loadServerConfig } from '../../config/load';
import { INIT_ROLES, ROLE_READS, roleFlags, type InitRole } from '../../lib/deploy/server-yaml';
import { llmgw } from '../helpers/cli';
import { freePort } from '../helpers/ports';

const EXAMPLE = readFileSync(resolve(__dirname, '../../config/server.example.yaml'), 'utf8');
/** Lines init writes of its own: its header, and the optional connection settings the example does not carry yet. */
const OWN = /^# (server\.yaml of|  llmgw |Only the|are config|deployment, and|refuses to|Check what)/;

/** The top-level keys of a YAML text. */
const topKeys = (text: string): string[] => [...text.matchAll(/^([A-Za-z]\w*):/gm)].map((m) => m[1]!);

/** A MySQL URL on the local MariaDB (root, no password), in a database that exists. */
const REAL_MYSQL = 'mysql://root@127.0.0.1:3306/mysql';

describe('llmgw init ROLE', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-init-'));
  let closed = 0;
  let open: Server;
  let openPort = 0;
  beforeAll(async () => {
    closed = await freePort();
    // A listening socket stands in for a reachable Temporal frontend or Proxmox API: the check is a TCP connect.
    open = createServer((s) => s.destroy());
    await new Promise<void>((r) => open.listen(0, '127.0.0.1', r));
    openPort = (open.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((r) => open.close(r));
    rmSync(dir, { recursive: true, force: true });
  });

  test.each(INIT_ROLES.map((r) => [r]))(
    '%s: writes only its sections, commented from the example; loads once filled; refuses to overwrite',
    async (role: InitRole) => {
      const file = join(dir, `${role}.yaml`);
      const first = await llmgw(['init', role, '--out', file]);
      expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: '' });
      expect(first.stdout).toContain(`wrote ${file}`);
      const text = readFileSync(file, 'utf8');

      // Only what the role reads, in the example's order.
      const exampleOrder = topKeys(EXAMPLE);
      expect(topKeys(text)).toEqual(exampleOrder.filter((k) => ROLE_READS[role][k] !== undefined));
      // Every comment is the example's (or init's own header); none written twice.
      // (the example's commented-out proxmox block is the section itself there, one '# ' less)
      const exampleLines = new Set(EXAMPLE.split('\n').flatMap((l) => [l, l.replace(/^# /, '')]));
      const foreign = text.split('\n').filter((l) => /^\s*#/.test(l) && !OWN.test(l) && !exampleLines.has(l));
      expect(foreign).toEqual([]);
      // The optional connection settings (TLS, the API key file), from the example, off until set.
      if (ROLE_READS[role].temporal)
        expect(text).toMatch(
          /^temporal:[\s\S]*?^ {2}tls: null\n {2}# tls:\n[\s\S]*?^ {2}# {3}clientCert: [\s\S]*?^ {2}apiKeyFile: null\n {2}# apiKeyFile: /m,
        );
      if (ROLE_READS[role].mysql)
        expect(text).toMatch(
          /^mysql:[\s\S]*?^ {2}tls: null\n {2}# tls:\n {2}# {3}ca: .*\n {2}# {3}cert: .*\n {2}# {3}key: .*\n {2}# {3}serverName: /m,
        );

      // Unfilled, the loader refuses it, naming each REQUIRED key; the check is not run.
      expect(() => loadServerConfig(file)).toThrow(/expected a string, got nothing/);
      const required = [...text.matchAll(/^ {2}(\w+): null # REQUIRED/gm)].map((m) => m[1]);
      expect(required.length).toBe(roleFlags(role).length);
      expect(first.stdout).toMatch(/not checked yet: .* does not load/);

      // A second run without --force leaves the file alone and says what to do.
      writeFileSync(file, `${text}# the operator's edit\n`);
      const again = await llmgw(['init', role, '--out', file]);
      expect(again.code).toBe(2);
      expect(again.stderr).toMatch(/exists: llmgw init does not overwrite it\. Pass --force/);
      expect(readFileSync(file, 'utf8')).toContain("# the operator's edit");

      // Filled in by flags (--force): Temporal and Proxmox on a closed port, MySQL the real one.
      const fills: Record<string, string> = {
        temporal: `127.0.0.1:${closed}`,
        mysql: REAL_MYSQL,
        proxmox: `https://127.0.0.1:${closed}`,
      };
      const filled = await llmgw([
        'init',
        role,
        '--out',
        file,
        '--force',
        ...roleFlags(role).flatMap((f) => [`--${f}`, fills[f]!]),
      ]);
      expect({ code: filled.code, stderr: filled.stderr }).toEqual({ code: 0, stderr: '' });
      const config = loadServerConfig(file);
      if (ROLE_READS[role].mysql) expect(config.mysql).toEqual({ url: REAL_MYSQL, autoMigrate: false, tls: null });
      if (ROLE_READS[role].temporal) {
        expect(config.temporal.address).toBe(`127.0.0.1:${closed}`);
        expect(filled.stdout).toMatch(
          new RegExp(`^temporal\\.address +127\\.0\\.0\\.1:${closed} +unreachable \\(ECONNREFUSED\\) +check that`, 'm'),
        );
      }
      if (ROLE_READS[role].mysql)
        expect(filled.stdout).toMatch(/^mysql\.url +127\.0\.0\.1:3306\/mysql +ok \(logged in as root\)/m);
      if (role === 'proxmox-worker') {
        expect(config.proxmox?.url).toBe(`https://127.0.0.1:${closed}`);
        expect(filled.stdout).toMatch(new RegExp(`^proxmox\\.url +127\\.0\\.0\\.1:${closed} +unreachable`, 'm'));
      }
      if (role === 'control-plane') {
        expect(config.listeners.controlPlane.host).toBe('0.0.0.0');
        expect(config.tls.serverKey).toBe('/etc/llmgw/control-plane/server.key');
        expect(config.catalog.length).toBeGreaterThan(0);
      }
      if (role === 'gateway' || role === 'control-plane') {
        // What it presents at the nodes' doors (onboarding serves one on every node): where init points it, and
        // the check says it is missing and where it comes from.
        expect(config.tls.gatewayCert).toBe(`/etc/llmgw/${role}/gateway.crt`);
        expect(config.tls.gatewayKey).toBe(`/etc/llmgw/${role}/gateway.key`);
        expect(filled.stdout).toMatch(
          new RegExp(
            `^tls\\.gatewayCert +/etc/llmgw/${role}/gateway\\.crt +cannot be read \\(ENOENT\\) +llmgw ca issue --gateway NAME`,
            'm',
          ),
        );
      }
      expect(filled.stdout).toMatch(/\d+ of \d+ not ok|all \d+ ok/);
    },
    60_000,
  );

  test('--check runs on a file as it is: exit 0 when all is reachable, 1 when not', async () => {
    const file = join(dir, 'ca-worker-check.yaml');
    const w = await llmgw([
      'init',
      'ca-worker',
      '--out',
      file,
      '--temporal',
      `127.0.0.1:${openPort}`,
      '--mysql',
      REAL_MYSQL,
    ]);
    expect(w.code).toBe(0);
    const ok = await llmgw(['init', 'ca-worker', '--check', file]);
    expect(ok.stdout).toMatch(/^temporal\.address +127\.0\.0\.1:\d+ +ok \(port open\)/m);
    expect(ok.stdout).toMatch(/all 2 ok/);
    expect(ok.code).toBe(0);
    writeFileSync(file, readFileSync(file, 'utf8').replace(`127.0.0.1:${openPort}`, `127.0.0.1:${closed}`));
    const bad = await llmgw(['init', 'ca-worker', '--check', file]);
    expect(bad.stdout).toMatch(/unreachable \(ECONNREFUSED\)[\s\S]*1 of 2 not ok/);
    expect(bad.code).toBe(1);
  }, 60_000);

  test.each([
    [['init'], /init needs a ROLE: one of control-plane, gateway, ca-worker, proxmox-worker/],
    [['init', 'router'], /unknown role "router"/],
    [['init', 'agent'], /the agent reads no server\.yaml: llmgw onboard-node writes its flags/],
    [['init', 'gateway', '--temporal', 'x:1'], /--temporal: the gateway role does not read it \(it takes --mysql\)/],
  ])('llmgw %j refuses (exit 2) and says why', async (args, message) => {
    const r = await llmgw(args);
    expect(r.stderr).toMatch(message);
    expect(r.code).toBe(2);
  });
});

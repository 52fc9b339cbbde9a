/**
 * The llmgw-ca worker with the CA key on its own host (real Temporal, real MariaDB, real TLS on loopback): a
 * control plane WITHOUT the key signs an agent's renewal through a workflow whose activity runs on llmgw-ca (a
 * new serial, CN from the connection; `ctl nodes` shows a renewal overdue), a `ctl revoke` gets llmgw-ca to republish a CRL that `openssl verify
 * -crl_check` refuses the revoked certificate with, and the worker re-issues the CRL on its own before next-update.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { createCaOperations } from '../../activities/ca';
import { ctlCommand } from '../../cli/ctl/index';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig } from '../../config/types';
import { certificateInfo, issueNodeCertificate, loadCa, makeNodeCsr } from '../../lib/pki';
import { TlsClient } from '../../lib/tls-client';
import { parseNodeId } from '../../lib/types';
import { startAgent } from '../../workers/agent/index';
import type { Agent as NodeAgent } from '../../workers/agent/options';
import { startCaWorker, type CaWorker } from '../../workers/ca';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { simInventory } from '../helpers/node-workers';
import { closeCertClients, writeOperatorCert } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const ROOT = resolve(__dirname, '../..');
/** A CRL valid 6 s, so the worker re-issues it every 3 s (in production: 7 days, every 3.5). */
const CRL_DAYS = 6 / 86_400;

describe('llmgw-ca worker: the CA key on its own host (real Temporal, MariaDB, TLS)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ca-worker-'));
  let temporal: DevServer;
  let caConfig: ServerConfig;
  let cpConfig: ServerConfig;
  let caDir = '';
  let caWorker: CaWorker;
  let cp: ControlPlane;
  let configFile = '';
  let agent: NodeAgent | undefined;
  const clients: TlsClient[] = [];
  const logs: { msg: string; fields: Record<string, unknown> }[] = [];
  const caLogs: { msg: string; fields: Record<string, unknown> }[] = [];

  beforeAll(async () => {
    temporal = await startTestTemporal();
    caConfig = await testConfig({ temporalAddress: temporal.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    caDir = dirname(caConfig.tls.ca);
    // The control plane's host has the CA certificate only: tls.ca is a copy, with no ca.key beside it.
    const trust = join(dir, 'control-host');
    mkdirSync(trust);
    copyFileSync(caConfig.tls.ca, join(trust, 'ca.crt'));
    cpConfig = { ...caConfig, tls: { ...caConfig.tls, ca: join(trust, 'ca.crt') } };
    caWorker = await startCaWorker({
      config: caConfig,
      caDir,
      crlDays: CRL_DAYS,
      log: (msg, fields) => void caLogs.push({ msg, fields }),
    });
    cp = await startControlPlane({
      config: cpConfig,
      workflowBundle: { codePath: await workflowBundlePath() },
      log: (msg, fields) => void logs.push({ msg, fields }),
    });
    await writeOperatorCert(caConfig, cp.store);
    configFile = join(dir, 'server.yaml');
    writeFileSync(configFile, stringify(cpConfig));
  }, 120_000);

  afterAll(async () => {
    await agent?.close();
    for (const c of clients) await c.close();
    await cp?.close();
    await caWorker?.close();
    await closeCertClients();
    await temporal?.stop();
    await dropDatabase(caConfig.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const nodeClient = async (id: string): Promise<{ client: TlsClient; serial: string; certPem: string }> => {
    const c = await createCaOperations({ caDir, store: cp.store }).issueNodeCertificate({ nodeId: id });
    const client = new TlsClient(c);
    clients.push(client);
    const r = await client.fetch(`${cp.url}/v1/agent/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId: id, inventory: simInventory() }),
    });
    expect(r.status).toBe(200);
    return { client, serial: c.serial, certPem: c.certPem };
  };
  const renew = async (
    client: TlsClient,
    body: unknown,
  ): Promise<{ status: number; body: Record<string, unknown> }> => {
    const r = await client.fetch(`${cp.url}/v1/agent/renew`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };

  test('the control plane has no CA key on its host; the CA worker published a CRL at start', () => {
    expect(existsSync(join(dirname(cpConfig.tls.ca), 'ca.key'))).toBe(false);
    expect(existsSync(join(caDir, 'ca.key'))).toBe(true);
    expect(readFileSync(join(caDir, 'crl.pem'), 'utf8')).toMatch(/^-----BEGIN X509 CRL-----/);
  });

  test('an agent renews through llmgw-ca: a new serial, the CN of its connection', async () => {
    // A 1-day certificate issued so that two thirds of its life (from its 5-minute backdated start) is 3 s away.
    const DAY = 86_400_000;
    const issuedAt = new Date(Date.now() + 3000 + 300_000 - (2 / 3) * (DAY + 300_000));
    const old = issueNodeCertificate(loadCa(caDir), 'r1', { days: 1, now: issuedAt });
    await cp.store.recordCertificate({
      serial: old.serial,
      cn: 'r1',
      role: 'node',
      notBefore: old.notBefore,
      notAfter: old.notAfter,
      pem: old.certPem,
    });
    const files = { cert: join(dir, 'r1.crt'), key: join(dir, 'r1.key') };
    writeFileSync(files.cert, old.certPem);
    writeFileSync(files.key, old.keyPem);
    const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
    agent = await startAgent({
      nodeId: parseNodeId('r1'),
      server: cp.url,
      tls: { certPem: old.certPem, keyPem: old.keyPem, caPem: readFileSync(cpConfig.tls.ca, 'utf8') },
      certFiles: files,
      nvidiaSmi: 'nvidia-smi',
      noGpu: true,
      ibRoot: join(ROOT, 'test/fixtures/sysfs/none'),
      cpuinfo: '/proc/cpuinfo',
      fabrics: [],
      advertiseHost: '127.0.0.1',
      engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
      stateDir: join(dir, 'r1'),
      stopEnginesOnExit: true,
      log: (msg, fields) => void lines.push({ msg, fields }),
    });
    const renewed = await waitFor(() => lines.find((l) => l.msg === 'certificate renewed'), {
      timeoutMs: 30_000,
      what: 'the agent to renew its certificate',
    });
    const serial = String(renewed.fields?.serial);
    expect(serial).toMatch(/^[0-9a-f]{32}$/);
    expect(serial).not.toBe(old.serial);
    const onDisk = certificateInfo(readFileSync(files.cert, 'utf8'));
    expect({ serial: onDisk.serial, cn: onDisk.cn }).toEqual({ serial, cn: 'r1' });
    expect(caLogs.filter((l) => l.msg === 'certificate issued').map((l) => l.fields)).toContainEqual(
      expect.objectContaining({ cn: 'r1', serial }),
    );
    expect((await cp.store.listCertificates({ cn: 'r1' })).map((c) => c.serial).sort()).toEqual(
      [old.serial, serial].sort(),
    );
  });

  test('ctl nodes: CERT says ok for the renewed node, RENEW OVERDUE for one past two thirds of its certificate', async () => {
    const DAY = 86_400_000;
    const late = issueNodeCertificate(loadCa(caDir), 'o1', { days: 1, now: new Date(Date.now() - 0.8 * DAY) });
    await cp.store.recordCertificate({
      serial: late.serial,
      cn: 'o1',
      role: 'node',
      notBefore: late.notBefore,
      notAfter: late.notAfter,
      pem: late.certPem,
    });
    const client = new TlsClient({ ...late, caPem: readFileSync(cpConfig.tls.ca, 'utf8') });
    clients.push(client);
    const r = await client.fetch(`${cp.url}/v1/agent/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ nodeId: 'o1', inventory: simInventory() }),
    });
    expect(r.status).toBe(200);
    let out = '';
    await ctlCommand(['nodes', '--config', configFile], (s) => void (out += s));
    expect(out).toMatch(/^NODE .* CERT +LAST SEEN$/m);
    expect(out).toMatch(/^o1 +ready .* RENEW OVERDUE \(expires \d{4}-\d\d-\d\d\) +\d+s ago$/m);
    expect(out).toMatch(/^r1 +ready .* ok until \d{4}-\d\d-\d\d +\d+s ago$/m);
  });

  test("a CSR naming another node gets the connection's CN; a malformed CSR is refused with its code through the workflow", async () => {
    const { client } = await nodeClient('s1');
    const r = await renew(client, { nodeId: 's1', csr: makeNodeCsr('someone-else').csrPem });
    expect(r.status).toBe(200);
    expect(certificateInfo(String(r.body.certPem)).cn).toBe('s1');
    const bad = await renew(client, { nodeId: 's1', csr: 'not a csr' });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { code: expect.stringMatching(/^LLMGW_BAD_(PEM|CSR)$/) } });
  });

  test('ctl revoke: llmgw-ca republishes a CRL that openssl verify -crl_check refuses the revoked certificate with', async () => {
    const v1 = await nodeClient('v1');
    const v2 = await nodeClient('v2');
    const pem = (name: string, content: string): string => {
      writeFileSync(join(dir, name), content);
      return join(dir, name);
    };
    const before = logs.length;
    let out = '';
    await ctlCommand(['revoke', 'v1', '--config', configFile], (s) => void (out += s));
    expect(out).toMatch(/^v1: 1 certificate revoked/);
    expect(logs.slice(before).find((l) => l.msg === 'crl republished by llmgw-ca')?.fields).toMatchObject({
      nodeId: 'v1',
      revoked: expect.any(Number),
    });
    const crlFile = join(caDir, 'crl.pem');
    const verify = (cert: string): ReturnType<typeof spawnSync> =>
      spawnSync('openssl', ['verify', '-crl_check', '-CAfile', cpConfig.tls.ca, '-CRLfile', crlFile, cert], {
        encoding: 'utf8',
      });
    const refused = verify(pem('v1.crt', v1.certPem));
    expect(refused.status).not.toBe(0);
    expect(`${refused.stdout}${refused.stderr}`).toMatch(/certificate revoked/);
    const fine = verify(pem('v2.crt', v2.certPem));
    expect(`${fine.stdout}${fine.stderr}`).toMatch(/: OK/);
    expect(fine.status).toBe(0);
  });

  test('the CA worker re-issues the CRL before its next-update, on its own', async () => {
    const crlFile = join(caDir, 'crl.pem');
    const number = (): string =>
      execFileSync('openssl', ['crl', '-in', crlFile, '-noout', '-crlnumber'], { encoding: 'utf8' }).trim();
    const first = number();
    const published = caLogs.filter((l) => l.msg === 'crl published').length;
    // Two refreshes (at half of a 6 s validity each), so it keeps going, not just once.
    await waitFor(() => caLogs.filter((l) => l.msg === 'crl published').length >= published + 2, {
      timeoutMs: 10_000,
      what: 'two CRL refreshes by the CA worker',
    });
    expect(number()).not.toBe(first);
    const nextUpdate = new Date(
      execFileSync('openssl', ['crl', '-in', crlFile, '-noout', '-nextupdate'], { encoding: 'utf8' })
        .trim()
        .replace(/^nextUpdate=/, ''),
    );
    expect(nextUpdate.getTime()).toBeGreaterThan(Date.now());
    expect(new Date(caWorker.crl().refreshAt).getTime()).toBeLessThan(nextUpdate.getTime());
  });
});

/**
 * The llmgw-ca activities against a real MariaDB database of their own: every certificate issued is
 * recorded, revocation marks all of a node's certificates, and the CRL lists them so OpenSSL refuses them.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Pool } from 'mysql2/promise';
import forge from 'node-forge';
import { createCaActivities, type CaOperations } from '../../activities/ca';
import { caCommand } from '../../cli/ca';
import { certificateInfo, generateRsaKey, initCa } from '../../lib/pki';
import { openDatabase } from '../../lib/store/db';
import { Store } from '../../lib/store/store';
import { dropDatabase, testMysqlUrl } from '../helpers/cluster-parts';

const DAY = 86_400_000;
const url = testMysqlUrl();
const tmp = mkdtempSync(join(tmpdir(), 'llmgw-ca-store-'));
const caDir = join(tmp, 'ca');
let pool: Pool;
let store: Store;
let ca: CaOperations;
const logged: { msg: string; fields?: Record<string, unknown> }[] = [];

const csrFor = (cn: string): string => {
  const { key, publicKey } = generateRsaKey(2048);
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = publicKey;
  csr.setSubject([{ shortName: 'CN', value: cn }]);
  csr.sign(key, forge.md.sha256.create());
  return forge.pki.certificationRequestToPem(csr);
};
/** `openssl verify -crl_check` of a certificate against the CA and the CRL the activities wrote. */
const verifyWithCrl = (certPem: string): { status: number | null; out: string } => {
  const crt = join(tmp, 'check.crt');
  writeFileSync(crt, certPem);
  const r = spawnSync(
    'openssl',
    ['verify', '-crl_check', '-CRLfile', join(caDir, 'crl.pem'), '-CAfile', join(caDir, 'ca.crt'), crt],
    { encoding: 'utf8' },
  );
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};

beforeAll(async () => {
  initCa(caDir, { keyBits: 2048 }); // the key size is the unit test's concern; this file is about the records
  pool = await openDatabase(url);
  store = new Store(pool);
  ca = createCaActivities({ caDir, store, validityDays: 30, log: (msg, fields) => logged.push({ msg, fields }) });
});
afterAll(async () => {
  await pool?.end();
  await dropDatabase(url);
  rmSync(tmp, { recursive: true, force: true });
});

test('migration 2 made the certificates table, empty', async () => {
  expect(await store.listCertificates()).toEqual([]);
  expect(await store.revokedSerials()).toEqual([]);
});

test('an issued node certificate is recorded with its serial, CN, role, dates and PEM', async () => {
  const c = await ca.issueNodeCertificate({ nodeId: 'node-a' });
  expect(c.keyPem).toMatch(/BEGIN PRIVATE KEY/);
  expect(c.caPem).toBe(readFileSync(join(caDir, 'ca.crt'), 'utf8'));
  expect(new Date(c.notAfter).getTime() - Date.now()).toBeGreaterThan(29.9 * DAY); // validityDays: 30
  expect(new Date(c.notAfter).getTime() - Date.now()).toBeLessThan(30 * DAY);
  const rec = await store.certificateBySerial(c.serial);
  expect(rec).toMatchObject({
    serial: c.serial,
    cn: 'node-a',
    role: 'node',
    pem: c.certPem,
    revokedAt: null,
    revokedReason: null,
  });
  expect(rec?.notAfter.toISOString()).toBe(c.notAfter);
  expect(rec?.notBefore.toISOString()).toBe(c.notBefore);
  expect(await store.certificateBySerial(c.serial.toUpperCase())).not.toBeNull();
  expect(logged.find((l) => l.msg === 'certificate issued' && l.fields?.serial === c.serial)?.fields).toMatchObject({
    cn: 'node-a',
    role: 'node',
  });
});

test('a CSR asking for "other-node" over node-a\'s connection gets, and records, a certificate for node-a', async () => {
  const c = await ca.signNodeCsr({ csrPem: csrFor('other-node'), identity: 'node-a' });
  expect(c.cn).toBe('node-a');
  expect(forge.pki.certificateFromPem(c.certPem).subject.getField('CN').value).toBe('node-a');
  expect((await store.listCertificates({ cn: 'node-a' })).map((r) => r.serial)).toContain(c.serial);
  expect(await store.listCertificates({ cn: 'other-node' })).toEqual([]);
});

test('a renewal must present an unrevoked certificate of the same CN', async () => {
  const current = await ca.issueNodeCertificate({ nodeId: 'node-b' });
  const renewed = await ca.signNodeCsr({
    csrPem: csrFor('node-b'),
    identity: 'node-b',
    presentedSerial: current.serial.toUpperCase(),
    days: 10,
  });
  expect(new Date(renewed.notAfter).getTime() - new Date(renewed.notBefore).getTime()).toBeGreaterThan(
    10 * DAY - 10 * 60_000,
  );
  const a = (await store.listCertificates({ cn: 'node-a' }))[0]!;
  await expect(
    ca.signNodeCsr({ csrPem: csrFor('node-b'), identity: 'node-b', presentedSerial: a.serial }),
  ).rejects.toMatchObject({
    type: 'LLMGW_CERT_REFUSED',
    nonRetryable: true,
    message: expect.stringMatching(/belongs to node-a/),
  });
  await expect(
    ca.signNodeCsr({ csrPem: csrFor('node-b'), identity: 'node-b', presentedSerial: '7'.repeat(32) }),
  ).rejects.toMatchObject({ type: 'LLMGW_CERT_REFUSED', message: expect.stringMatching(/never issued/) });
});

test('bad input fails the activity at once with its catalogue code', async () => {
  await expect(ca.signNodeCsr({ csrPem: 'not a csr', identity: 'node-a' })).rejects.toMatchObject({
    type: 'LLMGW_BAD_PEM',
    nonRetryable: true,
  });
  const der = Buffer.from(forge.pem.decode(csrFor('node-a'))[0]!.body, 'binary');
  der[der.length - 1]! ^= 0x01;
  await expect(
    ca.signNodeCsr({
      csrPem: forge.pem.encode({ type: 'CERTIFICATE REQUEST', body: der.toString('binary') }),
      identity: 'node-a',
    }),
  ).rejects.toMatchObject({ type: 'LLMGW_BAD_CSR', nonRetryable: true });
  await expect(ca.issueNodeCertificate({ nodeId: 'Node_A' })).rejects.toMatchObject({
    type: 'LLMGW_BAD_NODE_ID',
    nonRetryable: true,
  });
  const nowhere = createCaActivities({ caDir: join(tmp, 'nowhere'), store });
  await expect(nowhere.issueNodeCertificate({ nodeId: 'node-a' })).rejects.toMatchObject({
    type: 'LLMGW_CA_MISSING',
    nonRetryable: true,
  });
  expect(await store.listCertificates({ cn: 'Node_A' })).toEqual([]);
});

test('llmgw ca issue --operator writes and records an operator certificate (clientAuth, role operator)', async () => {
  const out = join(tmp, 'ops-alice');
  let printed = '';
  await caCommand(
    ['issue', '--operator', 'ops-alice', '--dir', caDir, '--mysql-url', url, '--out', out],
    (s) => void (printed += s),
  );
  expect(printed).toMatch(/^issued operator ops-alice serial [0-9a-f]{32}, valid until /);
  const info = certificateInfo(readFileSync(join(out, 'operator.crt'), 'utf8'));
  expect(await store.certificateBySerial(info.serial)).toMatchObject({ cn: 'ops-alice', role: 'operator' });
  expect(new (await import('node:crypto')).X509Certificate(readFileSync(join(out, 'operator.crt'))).keyUsage).toEqual([
    '1.3.6.1.5.5.7.3.2',
  ]);
  await expect(
    caCommand(['issue', '--operator', 'Bad_Name', '--dir', caDir, '--mysql-url', url, '--out', join(tmp, 'bad')]),
  ).rejects.toMatchObject({
    name: 'UsageError',
    message: expect.stringMatching(/^invalid operator name "Bad_Name": use 2-32 characters/),
  });
});

test('a server certificate is recorded as role server', async () => {
  const s = await ca.issueServerCertificate({ name: 'control-plane', hosts: ['127.0.0.1', 'localhost'] });
  expect(await store.certificateBySerial(s.serial)).toMatchObject({ cn: 'control-plane', role: 'server' });
});

test('revokeNode revokes every certificate of the node, only those, once; the CRL lists them and OpenSSL refuses them', async () => {
  const aCerts = await store.listCertificates({ cn: 'node-a' });
  expect(aCerts).toHaveLength(2);
  const b = await ca.issueNodeCertificate({ nodeId: 'node-c' });

  expect(await ca.revokeNode({ nodeId: 'node-a', reason: 'removed from the cluster' })).toBe(2);
  expect(await ca.revokeNode({ nodeId: 'node-a', reason: 'again' })).toBe(0);
  for (const c of await store.listCertificates({ cn: 'node-a' })) {
    expect(c.revokedAt).toBeInstanceOf(Date);
    expect(c.revokedReason).toBe('removed from the cluster'); // the second call changed nothing
  }
  expect((await store.certificateBySerial(b.serial))?.revokedAt).toBeNull();
  expect((await store.revokedSerials()).map((r) => r.serial).sort()).toEqual(aCerts.map((c) => c.serial).sort());

  // revokeNode republished crl.pem: OpenSSL now refuses node-a's certificates and still accepts node-c's.
  expect(existsSync(join(caDir, 'crl.pem'))).toBe(true);
  for (const c of aCerts)
    expect(verifyWithCrl(c.pem)).toMatchObject({ status: 2, out: expect.stringMatching(/certificate revoked/) });
  expect(verifyWithCrl(b.certPem).status).toBe(0);

  const crl = await ca.currentCrl();
  expect(crl.revoked).toBe(2);
  expect(crl.pem).toBe(readFileSync(join(caDir, 'crl.pem'), 'utf8'));
  expect(new Date(crl.refreshAt).getTime()).toBeLessThan(new Date(crl.nextUpdate).getTime());
  const text = spawnSync(
    'openssl',
    ['crl', '-in', join(caDir, 'crl.pem'), '-CAfile', join(caDir, 'ca.crt'), '-noout', '-text'],
    { encoding: 'utf8' },
  );
  expect(`${text.stdout}${text.stderr}`).toMatch(/verify OK/);
  for (const c of aCerts) expect(text.stdout).toContain(`Serial Number: ${c.serial.toUpperCase()}`);
});

test('a renewal over a revoked certificate is refused', async () => {
  const revoked = (await store.listCertificates({ cn: 'node-a' }))[0]!;
  await expect(
    ca.signNodeCsr({ csrPem: csrFor('node-a'), identity: 'node-a', presentedSerial: revoked.serial }),
  ).rejects.toMatchObject({
    type: 'LLMGW_CERT_REFUSED',
    message: expect.stringMatching(/was revoked at .*removed from the cluster/),
  });
});

test('a revoked certificate that has expired drops out of the CRL', async () => {
  const past = createCaActivities({ caDir, store, now: () => new Date(Date.now() - 10 * DAY) });
  const old = await past.issueNodeCertificate({ nodeId: 'node-old', days: 1 });
  expect(await past.revokeNode({ nodeId: 'node-old', reason: 'test' })).toBe(1);
  const crl = await ca.currentCrl();
  expect(crl.revoked).toBe(2); // node-a's two, not node-old's
  const text = spawnSync('openssl', ['crl', '-in', join(caDir, 'crl.pem'), '-noout', '-text'], {
    encoding: 'utf8',
  }).stdout;
  expect(text).not.toContain(old.serial.toUpperCase());
});

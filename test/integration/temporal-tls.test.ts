/**
 * Temporal reached as in production: the dev server behind a TLS terminator that requires a client certificate of
 * Temporal's own CA (and, on a second one, an API key in `authorization`). The control plane, the llmgw-ca worker
 * and `llmgw ctl` connect through it with server.yaml's temporal.tls and temporal.apiKeyFile, the door's upstream
 * included; a missing, expired or foreign certificate and a missing or wrong API key stop them at start with
 * llmgw's error naming the key and the fix.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Connection } from '@temporalio/client';
import { stringify } from 'yaml';
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { ServerConfig, TemporalTls } from '../../config/types';
import { initCa, issueOperatorCertificate, issueServerCertificate } from '../../lib/pki';
import { startCaWorker } from '../../workers/ca';
import { startControlPlane, type ControlPlane } from '../../workers/control/index';
import { workflowBundlePath } from '../helpers/bundle';
import { llmgw } from '../helpers/cli';
import { dropDatabase, startTestTemporal, testConfig, testMysqlUrl } from '../helpers/cluster-parts';
import { startTemporalTerminator, type Terminator } from '../helpers/temporal-terminator';
import { certClient, closeCertClients } from '../helpers/tls';

const API_KEY = 'tk-llmgw-test-0123456789';
const DAY = 86_400_000;

describe('Temporal over mutual TLS and an API key (a terminator in front of the dev server)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-temporal-tls-'));
  const file = (name: string, content: string): string => {
    writeFileSync(join(dir, name), content, { mode: 0o600 });
    return join(dir, name);
  };
  let temporal: DevServer;
  let mtlsOnly: Terminator;
  let withKey: Terminator;
  let config: ServerConfig;
  let cp: ControlPlane | undefined;
  /** temporal.tls with the right client certificate */
  let good: TemporalTls;
  let expired: TemporalTls;
  let foreign: TemporalTls;
  let noClientCert: TemporalTls;

  /** The test config pointed at `address` with these credentials. */
  const via = (
    address: string,
    tls: TemporalTls | null,
    apiKeyFile: string | null = null,
  ): Pick<ServerConfig, 'temporal' | 'mysql'> => ({
    ...config,
    temporal: { ...config.temporal, address, tls, apiKeyFile },
  });
  const startCa = (c: Pick<ServerConfig, 'temporal' | 'mysql'>): ReturnType<typeof startCaWorker> =>
    startCaWorker({ config: c, caDir: dirname(config.tls.ca) });

  beforeAll(async () => {
    // Temporal's PKI is not the cluster's: a CA of its own issues the terminator's certificate and llmgw's client one.
    const tca = initCa(join(dir, 'temporal-ca'), { keyBits: 2048 });
    const other = initCa(join(dir, 'other-ca'), { keyBits: 2048 });
    const server = issueServerCertificate(tca, 'temporal', ['127.0.0.1', 'localhost']);
    const client = issueOperatorCertificate(tca, 'llmgw-control');
    const old = issueOperatorCertificate(tca, 'llmgw-old', { days: 1, now: new Date(Date.now() - 3 * DAY) });
    const stranger = issueOperatorCertificate(other, 'llmgw-control');
    const ca = join(dir, 'temporal-ca', 'ca.crt');
    const pair = (name: string, c: { certPem: string; keyPem: string }): TemporalTls => ({
      ca,
      clientCert: file(`${name}.crt`, c.certPem),
      clientKey: file(`${name}.key`, c.keyPem),
      serverName: null,
    });
    good = pair('good', client);
    expired = pair('expired', old);
    foreign = pair('foreign', stranger);
    noClientCert = { ca, clientCert: null, clientKey: null, serverName: null };

    temporal = await startTestTemporal();
    const terminator = { upstream: temporal.address, ...server, clientCaPem: tca.certPem };
    mtlsOnly = await startTemporalTerminator(terminator);
    withKey = await startTemporalTerminator({ ...terminator, apiKey: API_KEY });
    config = await testConfig({ temporalAddress: withKey.address, mysqlUrl: testMysqlUrl(), catalog: [] });
    config = { ...config, ...via(withKey.address, good, file('api-key', `${API_KEY}\n`)) };
  }, 120_000);

  afterAll(async () => {
    await cp?.close();
    await closeCertClients();
    await mtlsOnly?.close();
    await withKey?.close();
    await temporal?.stop();
    if (config) await dropDatabase(config.mysql.url);
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  test('the control plane starts through TLS, a client certificate and an API key; the door relays with them', async () => {
    const seen = withKey.authorizations.length;
    cp = await startControlPlane({ config, workflowBundle: { codePath: await workflowBundlePath() } });
    expect(withKey.refused).toEqual({ handshakes: 0, calls: 0 });
    expect(withKey.authorizations.length).toBeGreaterThan(seen);

    // An operator through the door, forging an authorization of its own: the door calls Temporal with its key.
    const op = (await certClient(config, cp.store, 'tls-operator', { role: 'operator' })).cert;
    const viaDoor = await Connection.connect({
      address: cp.door.address,
      tls: {
        serverNameOverride: 'localhost',
        serverRootCACertificate: Buffer.from(op.caPem),
        clientCertPair: { crt: Buffer.from(op.certPem), key: Buffer.from(op.keyPem) },
      },
      metadata: { authorization: 'Bearer forged-by-a-node' },
    });
    try {
      const before = withKey.authorizations.length;
      const info = await viaDoor.workflowService.describeNamespace({ namespace: 'default' });
      expect(info.namespaceInfo?.name).toBe('default');
      expect(cp.door.stats().passed).toBeGreaterThan(0);
      const relayed = withKey.authorizations.slice(before);
      expect(relayed.length).toBeGreaterThan(0);
      expect(new Set(relayed)).toEqual(new Set([`Bearer ${API_KEY}`]));
    } finally {
      await viaDoor.close();
    }
    expect(withKey.refused.calls).toBe(0);
  }, 120_000);

  test('llmgw ctl reaches Temporal through the terminator with the right certificate and key', async () => {
    if (!cp) throw new Error('the control plane did not start (see the test above)');
    const workflowId = `tls-probe-${Date.now()}`;
    const handle = await cp.client.workflow.start('noSuchWorkflow', { taskQueue: 'tls-nobody', workflowId });
    await handle.terminate('the TLS test only needs it to exist');
    // Dialled by IP, Temporal's certificate is checked against its IP SAN; serverName checks a DNS name instead
    // (and spares the JS client Node's DEP0123 warning about an IP address as the TLS server name).
    const byName = { ...config.temporal, tls: { ...good, serverName: 'localhost' } };
    const yaml = file('server.yaml', stringify({ ...config, temporal: byName }));
    const run = await llmgw(['ctl', 'follow', workflowId, '--config', yaml]);
    expect(run.stderr).toBe('');
    expect(run.stdout).toContain(`${workflowId}: terminated`);
    expect(run.code).toBe(0);

    // The same command with a certificate of another CA: the JS client only times out; llmgw says why.
    const bad = file('server-foreign.yaml', stringify({ ...config, temporal: { ...config.temporal, tls: foreign } }));
    const refused = await llmgw(['ctl', 'follow', workflowId, '--config', bad]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/LLMGW_TEMPORAL_TLS_FAILED/);
    expect(refused.stderr).toContain(`client certificate temporal.tls.clientCert (${foreign.clientCert})`);
    expect(refused.stderr).toMatch(/issued by the CA Temporal trusts for clients/);
  }, 120_000);

  test('the llmgw-ca worker starts with the right certificate (mutual TLS, no API key)', async () => {
    const worker = await startCa(via(mtlsOnly.address, good));
    await worker.close();
    expect(mtlsOnly.refused.calls).toBe(0);
  }, 60_000);

  test('no client certificate: refused at start, saying mutual TLS wants one', async () => {
    const handshakes = mtlsOnly.refused.handshakes;
    await expect(startCa(via(mtlsOnly.address, noClientCert))).rejects.toMatchObject({
      code: 'LLMGW_TEMPORAL_TLS_FAILED',
      message: expect.stringMatching(
        /asks for a client certificate \(mutual TLS\): set temporal\.tls\.clientCert and clientKey/,
      ),
    });
    expect(mtlsOnly.refused.handshakes).toBeGreaterThan(handshakes);
  }, 60_000);

  test('an expired client certificate: refused before connecting, naming the file and its expiry', async () => {
    const handshakes = mtlsOnly.refused.handshakes;
    const err = (await startCa(via(mtlsOnly.address, expired)).catch((e: Error) => e)) as Error & { code?: string };
    expect(err.code).toBe('LLMGW_TEMPORAL_CREDENTIALS_INVALID');
    expect(err.message).toMatch(
      new RegExp(
        `^temporal\\.tls\\.clientCert: ${expired.clientCert}: the client certificate \\(CN=llmgw-old(, OU=\\w+)?\\) expired at \\d{4}-`,
      ),
    );
    expect(err.message).toMatch(/issue a new one/);
    // Nothing reached the terminator.
    expect(mtlsOnly.refused.handshakes).toBe(handshakes);
  }, 60_000);

  test('a client certificate of another CA: refused at start, naming the key', async () => {
    await expect(startCa(via(mtlsOnly.address, foreign))).rejects.toMatchObject({
      code: 'LLMGW_TEMPORAL_TLS_FAILED',
      message: expect.stringContaining(
        `Temporal closed the connection once it saw the client certificate temporal.tls.clientCert (${foreign.clientCert})`,
      ),
    });
  }, 60_000);

  test('an API key file that is missing: refused before connecting, naming the key and the path', async () => {
    const missing = join(dir, 'no-such-api-key');
    await expect(startCa(via(withKey.address, good, missing))).rejects.toMatchObject({
      code: 'LLMGW_TEMPORAL_CREDENTIALS_INVALID',
      message: `temporal.apiKeyFile: ${missing}: cannot be read (ENOENT); write the Temporal API key into that file`,
    });
  });

  test('a wrong API key: Temporal refuses it at start and llmgw names the file to fix', async () => {
    const calls = withKey.refused.calls;
    const wrong = file('wrong-key', 'tk-revoked-long-ago\n');
    await expect(startCa(via(withKey.address, good, wrong))).rejects.toMatchObject({
      code: 'LLMGW_TEMPORAL_AUTH_FAILED',
      message: expect.stringContaining(`check the API key in temporal.apiKeyFile (${wrong})`),
    });
    expect(withKey.refused.calls).toBeGreaterThan(calls);
    expect(withKey.authorizations).toContain('Bearer tk-revoked-long-ago');
  }, 60_000);
});

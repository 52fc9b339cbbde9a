/**
 * server.yaml's temporal.tls and temporal.apiKeyFile: what the config check refuses, what the credentials check
 * refuses before any connection (real files, certificates of a real CA), and the options every client gets.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfigError } from '../../config/load';
import { parseServerConfig } from '../../config/load';
import { DEFAULT_CONFIG } from '../../config/defaults';
import type { ServerConfig, TemporalTls } from '../../config/types';
import { initCa, issueOperatorCertificate } from '../../lib/pki';
import { temporalConnectOptions, temporalCredentials, temporalTlsConnectOptions } from '../../lib/temporal-connect';
import { thrownWithCode } from '../helpers/errors';

const DAY = 86_400_000;

describe('server.yaml temporal.tls and temporal.apiKeyFile', () => {
  const configError = (text: string): ConfigError =>
    thrownWithCode<ConfigError>(() => parseServerConfig(text, 'server.yaml'), 'LLMGW_CONFIG_INVALID');

  test('absent: plaintext and no key (the local cluster)', () => {
    const c = parseServerConfig('temporal:\n  address: 10.0.0.5:7233\n', 'server.yaml');
    expect(c.temporal).toMatchObject({ tls: null, apiKeyFile: null });
  });
  test('tls: {} is TLS with the system CAs; every key read as written', () => {
    expect(parseServerConfig('temporal:\n  tls: {}\n', 'server.yaml').temporal.tls).toEqual({
      ca: null,
      clientCert: null,
      clientKey: null,
      serverName: null,
    });
    const c = parseServerConfig(
      [
        'temporal:',
        '  address: temporal.example.net:7233',
        '  tls:',
        '    ca: /etc/llmgw/temporal/ca.crt',
        '    clientCert: /etc/llmgw/temporal/client.crt',
        '    clientKey: /etc/llmgw/temporal/client.key',
        '    serverName: temporal.internal',
        '  apiKeyFile: /etc/llmgw/temporal/api-key',
      ].join('\n'),
      'server.yaml',
    );
    expect(c.temporal).toEqual({
      ...DEFAULT_CONFIG.temporal,
      address: 'temporal.example.net:7233',
      tls: {
        ca: '/etc/llmgw/temporal/ca.crt',
        clientCert: '/etc/llmgw/temporal/client.crt',
        clientKey: '/etc/llmgw/temporal/client.key',
        serverName: 'temporal.internal',
      },
      apiKeyFile: '/etc/llmgw/temporal/api-key',
    });
  });
  test('a client certificate without its key is refused, naming the missing key', () => {
    const e = configError('temporal:\n  tls:\n    clientCert: /etc/c.crt\n');
    expect(e.keyPath).toBe('temporal.tls.clientKey');
    expect(e.problem).toBe('is missing while temporal.tls.clientCert is set');
    expect(e.fix).toMatch(/both the client certificate and its key/);
  });
  test('an API key without TLS is refused: it would travel in clear', () => {
    const e = configError('temporal:\n  apiKeyFile: /etc/llmgw/temporal/api-key\n');
    expect(e.keyPath).toBe('temporal.apiKeyFile');
    expect(e.problem).toMatch(/travel in clear/);
    expect(e.fix).toMatch(/tls: \{\}/);
  });
  test("a misspelt key under tls is named, with Temporal's spelling", () => {
    const e = configError('temporal:\n  tls:\n    clientcert: /etc/c.crt\n');
    expect(e.keyPath).toBe('temporal.tls.clientcert');
    expect(e.fix).toContain('did you mean "clientCert"?');
  });
});

describe('temporalCredentials: checked before connecting', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-temporal-creds-'));
  const file = (name: string, content: string): string => {
    writeFileSync(join(dir, name), content);
    return join(dir, name);
  };
  const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
  const caFile = join(dir, 'ca', 'ca.crt');
  const cert = issueOperatorCertificate(ca, 'llmgw-control');
  const other = issueOperatorCertificate(ca, 'someone-else');
  const good: TemporalTls = {
    ca: caFile,
    clientCert: file('c.crt', cert.certPem),
    clientKey: file('c.key', cert.keyPem),
    serverName: null,
  };
  const temporal = (tls: TemporalTls | null, apiKeyFile: string | null = null): ServerConfig['temporal'] => ({
    ...DEFAULT_CONFIG.temporal,
    address: '10.0.0.5:7233',
    tls,
    apiKeyFile,
  });
  const refused = (t: ServerConfig['temporal'], now?: Date): Error =>
    thrownWithCode(() => temporalCredentials(t, now), 'LLMGW_TEMPORAL_CREDENTIALS_INVALID');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('good files become the options Connection.connect and NativeConnection.connect take', () => {
    const creds = temporalCredentials(temporal({ ...good, serverName: 'temporal.internal' }, file('k', ' tk-1\n')));
    const o = temporalConnectOptions(creds);
    expect(o.address).toBe('10.0.0.5:7233');
    expect(o.apiKey).toBe('tk-1');
    expect(Buffer.from(o.tls?.serverRootCACertificate ?? []).toString()).toBe(ca.certPem);
    expect(Buffer.from(o.tls?.clientCertPair?.crt ?? []).toString()).toBe(cert.certPem);
    expect(Buffer.from(o.tls?.clientCertPair?.key ?? []).toString()).toBe(cert.keyPem);
    expect(o.tls?.serverNameOverride).toBe('temporal.internal');
    // The door's upstream: the same files as Node TLS options; SNI only for a DNS name.
    expect(temporalTlsConnectOptions(creds)).toMatchObject({
      host: '10.0.0.5',
      port: 7233,
      servername: 'temporal.internal',
    });
    expect(temporalTlsConnectOptions(temporalCredentials(temporal(good)))).not.toHaveProperty('servername');
  });
  test('no tls: no TLS options at all (plaintext), and no key', () => {
    expect(temporalConnectOptions(temporalCredentials(temporal(null)))).toEqual({ address: '10.0.0.5:7233' });
  });
  test('tls without a CA trusts the system CAs (Temporal Cloud)', () => {
    const o = temporalConnectOptions(temporalCredentials(temporal({ ...good, ca: null })));
    expect(o.tls).toBeDefined();
    expect(o.tls?.serverRootCACertificate).toBeUndefined();
  });
  test('a missing file names the key and the path', () => {
    const e = refused(temporal({ ...good, clientKey: join(dir, 'nope.key') }));
    expect(e.message).toBe(
      `temporal.tls.clientKey: ${join(dir, 'nope.key')}: cannot be read (ENOENT); give the private key of temporal.tls.clientCert`,
    );
  });
  test('a CA file that is not a certificate', () => {
    expect(refused(temporal({ ...good, ca: file('junk.crt', 'hello') })).message).toMatch(
      /^temporal\.tls\.ca: .*junk\.crt: is not a PEM certificate/,
    );
  });
  test("a key that is not the certificate's", () => {
    const e = refused(temporal({ ...good, clientKey: file('other.key', other.keyPem) }));
    expect(e.message).toMatch(
      /^temporal\.tls\.clientKey: .*other\.key: is not the key of the client certificate .*c\.crt \(CN=llmgw-control(, OU=\w+)?\)/,
    );
  });
  test('an expired certificate, and one not valid yet (a clock behind)', () => {
    expect(refused(temporal(good), new Date(Date.now() + 100 * DAY)).message).toMatch(
      /^temporal\.tls\.clientCert: .*c\.crt: the client certificate \(CN=llmgw-control(, OU=\w+)?\) expired at .*issue a new one/,
    );
    expect(refused(temporal(good), new Date(Date.now() - DAY)).message).toMatch(/is not valid before .*clock/);
  });
  test('an empty API key file', () => {
    expect(refused(temporal(good, file('empty', '\n'))).message).toMatch(/^temporal\.apiKeyFile: .*empty: is empty; /);
  });
});

/**
 * Connecting to Temporal with server.yaml's temporal section: address, TLS (CA, client certificate and key, server
 * name) and an API key from a file, as Temporal's clients name them. Every role, the CLI and the door's upstream
 * build their connection from `temporalCredentials`; a wrong credential fails at start, naming the key and the fix.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import type { TLSConfig } from '@temporalio/common/lib/internal-non-workflow';
import type { ServerConfig } from '../config/types';
import { LlmgwError } from './errors';
import { explainConnectFailure } from './temporal-failure';

type TemporalSection = ServerConfig['temporal'];

/** What a process presents to Temporal, read from the files server.yaml names and checked. */
export interface TemporalCredentials {
  address: string;
  /** null: plaintext */
  tls: {
    /** null: the system's trusted CAs */
    caPem: string | null;
    clientCertPair: { certPem: string; keyPem: string } | null;
    serverName: string | null;
    /** the client certificate's CN and expiry, for messages */
    client: { subject: string; notAfter: Date } | null;
  } | null;
  apiKey: string | null;
}

/** The options Connection.connect and NativeConnection.connect share. */
export interface TemporalConnectOptions {
  address: string;
  tls?: TLSConfig;
  apiKey?: string;
}

function credentialError(key: string, file: string, problem: string, fix: string): LlmgwError {
  return new LlmgwError('LLMGW_TEMPORAL_CREDENTIALS_INVALID', `temporal.${key}: ${file}: ${problem}; ${fix}`, {
    key: `temporal.${key}`,
    file,
  });
}

function readCredential(key: string, file: string, fix: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw credentialError(key, file, `cannot be read (${code})`, fix);
  }
}

function parseCertificate(key: string, file: string, pem: string, what: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch (err) {
    throw credentialError(
      key,
      file,
      `is not a PEM certificate (${(err as Error).message})`,
      `point it at ${what} (-----BEGIN CERTIFICATE-----)`,
    );
  }
}

/**
 * Reads and checks the files temporal.tls and temporal.apiKeyFile name: each readable, certificates that parse, a
 * client certificate valid now whose key is the one beside it, a non-empty API key. LLMGW_TEMPORAL_CREDENTIALS_INVALID
 * names the key, the file and the fix.
 */
export function temporalCredentials(temporal: TemporalSection, now: Date = new Date()): TemporalCredentials {
  let tls: TemporalCredentials['tls'] = null;
  if (temporal.tls) {
    const t = temporal.tls;
    const caPem = t.ca
      ? readCredential('tls.ca', t.ca, "give the CA certificate that issued Temporal's server certificate")
      : null;
    if (caPem !== null && t.ca) parseCertificate('tls.ca', t.ca, caPem, "the CA that issued Temporal's certificate");
    let clientCertPair: { certPem: string; keyPem: string } | null = null;
    let client: { subject: string; notAfter: Date } | null = null;
    if (t.clientCert && t.clientKey) {
      const certPem = readCredential(
        'tls.clientCert',
        t.clientCert,
        "give this role's client certificate for Temporal",
      );
      const keyPem = readCredential('tls.clientKey', t.clientKey, 'give the private key of temporal.tls.clientCert');
      const cert = parseCertificate('tls.clientCert', t.clientCert, certPem, "this role's client certificate");
      const notBefore = new Date(cert.validFrom);
      const notAfter = new Date(cert.validTo);
      const subject = cert.subject.replace(/\n/g, ', ');
      if (notAfter <= now)
        throw credentialError(
          'tls.clientCert',
          t.clientCert,
          `the client certificate (${subject}) expired at ${notAfter.toISOString()}`,
          'Temporal refuses it: issue a new one from the CA Temporal trusts for clients and point temporal.tls.clientCert and clientKey at it',
        );
      if (notBefore > now)
        throw credentialError(
          'tls.clientCert',
          t.clientCert,
          `the client certificate (${subject}) is not valid before ${notBefore.toISOString()}`,
          "check this host's clock (NTP), or wait until then",
        );
      let matches: boolean;
      try {
        matches = cert.checkPrivateKey(createPrivateKey(keyPem));
      } catch (err) {
        throw credentialError(
          'tls.clientKey',
          t.clientKey,
          `is not a PEM private key (${(err as Error).message})`,
          'point it at the unencrypted key of temporal.tls.clientCert (-----BEGIN PRIVATE KEY-----)',
        );
      }
      if (!matches)
        throw credentialError(
          'tls.clientKey',
          t.clientKey,
          `is not the key of the client certificate ${t.clientCert} (${subject})`,
          'give the key that was made with that certificate, or the certificate issued for this key',
        );
      clientCertPair = { certPem, keyPem };
      client = { subject, notAfter };
    }
    tls = { caPem, clientCertPair, serverName: t.serverName, client };
  }
  let apiKey: string | null = null;
  if (temporal.apiKeyFile) {
    apiKey = readCredential('apiKeyFile', temporal.apiKeyFile, 'write the Temporal API key into that file').trim();
    if (apiKey === '' || /\s/.test(apiKey))
      throw credentialError(
        'apiKeyFile',
        temporal.apiKeyFile,
        apiKey === '' ? 'is empty' : 'holds more than one word',
        'write the Temporal API key alone into that file (Temporal Cloud: Settings > API keys)',
      );
  }
  return { address: temporal.address, tls, apiKey };
}

/** The one place credentials become the SDK's options (Connection.connect and NativeConnection.connect take them alike). */
export function temporalConnectOptions(creds: TemporalCredentials): TemporalConnectOptions {
  const t = creds.tls;
  return {
    address: creds.address,
    ...(t
      ? {
          tls: {
            ...(t.caPem !== null ? { serverRootCACertificate: Buffer.from(t.caPem) } : {}),
            ...(t.clientCertPair
              ? {
                  clientCertPair: {
                    crt: Buffer.from(t.clientCertPair.certPem),
                    key: Buffer.from(t.clientCertPair.keyPem),
                  },
                }
              : {}),
            ...(t.serverName !== null ? { serverNameOverride: t.serverName } : {}),
          },
        }
      : {}),
    ...(creds.apiKey !== null ? { apiKey: creds.apiKey } : {}),
  };
}

/**
 * The same credentials as options of Node's tls.connect, for llmgw's own HTTP/2 towards Temporal (the door's
 * upstream, the handshake probe); null when temporal.tls is not set (plaintext).
 */
export function temporalTlsConnectOptions(creds: TemporalCredentials): ConnectionOptions | null {
  const t = creds.tls;
  if (!t) return null;
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(creds.address);
  const host = m?.[1] ?? creds.address;
  // SNI is a DNS name only; an address dialled by IP is checked against the certificate's IP SANs.
  const servername = t.serverName ?? (isIP(host) ? null : host);
  return {
    host,
    port: Number(m?.[2] ?? 7233),
    ...(t.caPem !== null ? { ca: t.caPem } : {}),
    ...(t.clientCertPair ? { cert: t.clientCertPair.certPem, key: t.clientCertPair.keyPem } : {}),
    ...(servername ? { servername } : {}),
    ALPNProtocols: ['h2'],
  };
}

/**
 * Reads the credentials, runs `connect(options)` (Connection.connect, NativeConnection.connect) and turns its
 * failure into an error that says what was wrong and the fix: LLMGW_TEMPORAL_TLS_FAILED (the TLS handshake),
 * LLMGW_TEMPORAL_AUTH_FAILED (Temporal refused the API key or the certificate's identity), else
 * LLMGW_TEMPORAL_UNREACHABLE naming temporal.address.
 */
export async function connectTemporal<C>(
  temporal: TemporalSection,
  connect: (options: TemporalConnectOptions) => Promise<C>,
): Promise<C> {
  const creds = temporalCredentials(temporal);
  try {
    return await connect(temporalConnectOptions(creds));
  } catch (err) {
    throw await explainConnectFailure(temporal, creds, err as Error);
  }
}

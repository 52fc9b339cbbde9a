/**
 * Why a connection to Temporal failed, in server.yaml's words. The Rust client (NativeConnection) says what went
 * wrong; the JS client (Connection) says only "Failed to connect before the deadline". So, once a connect has
 * failed, one HTTP/2 handshake of our own with the same credentials asks the server, and the two answers together
 * say which key to fix.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { ServerConfig } from '../config/types';
import { LlmgwError } from './errors';
import { temporalTlsConnectOptions, type TemporalCredentials } from './temporal-connect';

type TemporalSection = ServerConfig['temporal'];

/** The SDK's connect failure as LLMGW_TEMPORAL_AUTH_FAILED, LLMGW_TEMPORAL_TLS_FAILED or LLMGW_TEMPORAL_UNREACHABLE. */
export async function explainConnectFailure(
  temporal: TemporalSection,
  creds: TemporalCredentials,
  err: Error,
): Promise<LlmgwError> {
  const address = temporal.address;
  const said = err.message;
  const sdkText = errorText(err);
  if (refusedCredentials(err, sdkText)) {
    const fix = temporal.apiKeyFile
      ? `check the API key in temporal.apiKeyFile (${temporal.apiKeyFile}): that it is the current one, not revoked or expired, and allowed on namespace ${temporal.namespace}`
      : temporal.tls?.clientCert
        ? `check that Temporal allows the client certificate temporal.tls.clientCert (${temporal.tls.clientCert}) on namespace ${temporal.namespace}`
        : 'Temporal wants credentials: set temporal.apiKeyFile, or temporal.tls.clientCert and clientKey';
    return new LlmgwError(
      'LLMGW_TEMPORAL_AUTH_FAILED',
      `Temporal at ${address} refused this process's credentials (${said}): ${fix}`,
      { address, namespace: temporal.namespace },
    );
  }
  // The SDK's own words first; where they say too little, the server's answer to a handshake of our own.
  let why = classifyTls(sdkText, temporal);
  let probe: string | null = null;
  if (!why) {
    probe = await probeHandshake(creds);
    why = probe ? classifyTls(probe, temporal) : null;
  }
  if (why)
    return new LlmgwError(
      'LLMGW_TEMPORAL_TLS_FAILED',
      `cannot connect to Temporal at ${address}: ${why} (${probe ?? said})`,
      { address },
    );
  return new LlmgwError(
    'LLMGW_TEMPORAL_UNREACHABLE',
    `cannot reach Temporal at ${address} (${said}${probe ? `; ${probe}` : ''}): temporal.address in server.yaml must name a running Temporal frontend; start it, or fix the address (--config FILE)`,
    { address },
  );
}

/** A message and its causes' messages and details, for matching. */
function errorText(err: Error): string {
  const parts: string[] = [];
  for (let e: unknown = err; e instanceof Error && parts.length < 10; e = (e as { cause?: unknown }).cause)
    parts.push(e.message, String((e as { details?: unknown }).details ?? ''));
  return parts.join(' | ');
}

/** gRPC UNAUTHENTICATED (16) or PERMISSION_DENIED (7), from the JS client's code or the Rust client's words. */
function refusedCredentials(err: Error, text: string): boolean {
  for (let e: unknown = err, n = 0; e && n < 5; e = (e as { cause?: unknown }).cause, n++) {
    const code = (e as { code?: unknown }).code;
    if (code === 16 || code === 7) return true;
  }
  return /does not have valid authentication credentials|does not have permission to execute|\b(UNAUTHENTICATED|PERMISSION_DENIED)\b/.test(
    text,
  );
}

/** What a TLS failure's words mean for server.yaml, or null when they are not about TLS. */
function classifyTls(text: string, temporal: TemporalSection): string | null {
  const t = temporal.tls;
  const key = (k: 'ca' | 'clientCert'): string => `temporal.tls.${k} (${t?.[k] ?? 'not set'})`;
  if (
    /UnknownIssuer|BadSignature|unable to (get|verify)[\w ]*issuer|unable to verify the first certificate|self[- ]signed certificate/i.test(
      text,
    )
  )
    return `Temporal's server certificate is not trusted: ${key('ca')} must be the CA that issued it${t?.ca ? '' : ' (unset: the system CAs)'}`;
  if (/NotValidFor|ERR_TLS_CERT_ALTNAME|does not match certificate/i.test(text))
    return `Temporal's server certificate does not hold the name dialled (${t?.serverName ?? temporal.address.replace(/:\d+$/, '')}): set temporal.tls.serverName to a name it holds, or dial one`;
  if (/certificate ?required/i.test(text) || (/handshake ?failure/i.test(text) && !t?.clientCert))
    return t?.clientCert
      ? `Temporal did not accept the client certificate ${key('clientCert')}`
      : 'Temporal asks for a client certificate (mutual TLS): set temporal.tls.clientCert and clientKey';
  if (
    /unknown ?ca|bad ?certificate|certificate ?expired|certificate ?revoked|certificate ?unknown|unsupported ?certificate|decrypt ?error|access ?denied|handshake ?failure/i.test(
      text,
    )
  )
    return `Temporal refused the client certificate ${key('clientCert')}: it must be issued by the CA Temporal trusts for clients, unexpired and unrevoked`;
  if (/right after the TLS handshake/.test(text) && t?.clientCert)
    return `Temporal closed the connection once it saw the client certificate ${key('clientCert')}: it must be issued by the CA Temporal trusts for clients, unexpired and unrevoked`;
  if (/wrong version number|InvalidContentType|packet length too long|unexpected eof/i.test(text) && t)
    return 'nothing there speaks TLS: point temporal.address at its TLS port, or remove temporal.tls if it is plaintext';
  if (/closed before HTTP\/2 settings/.test(text) && !t)
    return 'it does not answer plaintext gRPC: if it speaks TLS, add temporal.tls (ca; clientCert and clientKey for mutual TLS)';
  return null;
}

/**
 * One TLS (or plain TCP) connection with the credentials that sends HTTP/2's preface: null once the server answers
 * (TLS and client certificate accepted), else what went wrong in Node's (OpenSSL's) words. A raw socket, not
 * http2.connect: under TLS 1.3 a refused client certificate arrives as an alert after the handshake, which the
 * socket reports and an HTTP/2 session does not.
 */
export function probeHandshake(creds: TemporalCredentials, timeoutMs = 3000): Promise<string | null> {
  const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(creds.address);
  if (!m) return Promise.resolve(null);
  const tlsOptions = temporalTlsConnectOptions(creds);
  return new Promise((resolve) => {
    let settled = false;
    const done = (result: string | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    let handshook = false;
    const preface = (): void => {
      handshook = tlsOptions !== null;
      socket.write(H2_PREFACE);
    };
    const socket: Socket = tlsOptions
      ? tlsConnect(tlsOptions, preface)
      : netConnect({ host: m[1] as string, port: Number(m[2]) }, preface);
    const timer = setTimeout(() => done(`no answer to an HTTP/2 preface within ${timeoutMs} ms`), timeoutMs);
    socket.once('data', () => done(null));
    socket.once('error', (err: NodeJS.ErrnoException) => done(opensslWords(err)));
    socket.once('close', () =>
      done(
        handshook
          ? 'the server closed the connection right after the TLS handshake, without a word'
          : 'the connection closed before HTTP/2 settings',
      ),
    );
  });
}

/** `CODE: reason` of a socket error; OpenSSL's long lines cut to their reason ("tlsv13 alert certificate required"). */
function opensslWords(err: NodeJS.ErrnoException): string {
  const reason = /SSL routines:[^:]*:([^:]+)/.exec(err.message)?.[1] ?? err.message.split('\n')[0];
  return `${err.code ? `${err.code}: ` : ''}${reason}`;
}

/** HTTP/2's client preface and an empty SETTINGS frame: what a gRPC client sends first. */
const H2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

/**
 * Real TLS for tests: a CA of the test's own in a temp dir, the control plane's server certificate for
 * 127.0.0.1, and clients presenting node or operator certificates recorded in the test's database.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createCaOperations, type IssuedCertificate } from '../../activities/ca';
import type { ServerConfig } from '../../config/types';
import { initCa, issueServerCertificate, type ClientRole } from '../../lib/pki';
import type { Store } from '../../lib/store/store';
import { TlsClient } from '../../lib/tls-client';

/** A new test CA (RSA-2048 unless told: quick to make) and a server certificate for 127.0.0.1 and localhost, as `tls` config. */
export function testTls(o: { caKeyBits?: number } = {}): ServerConfig['tls'] {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-test-ca-'));
  const ca = initCa(join(dir, 'ca'), { keyBits: o.caKeyBits ?? 2048 });
  const server = issueServerCertificate(ca, 'control-plane', ['127.0.0.1', 'localhost']);
  const file = (name: string, content: string): string => {
    writeFileSync(join(dir, name), content, { mode: 0o600 });
    return join(dir, name);
  };
  return {
    ca: join(dir, 'ca', 'ca.crt'),
    serverCert: file('server.crt', server.certPem),
    serverKey: file('server.key', server.keyPem),
    clientCert: join(dir, 'operator.crt'),
    clientKey: join(dir, 'operator.key'),
    gatewayCert: join(dir, 'gateway.crt'),
    gatewayKey: join(dir, 'gateway.key'),
  };
}

/** A client certificate of the test CA and a TLS client presenting it. */
export interface TestClient {
  cert: IssuedCertificate & { keyPem: string };
  client: TlsClient;
  fetch: TlsClient['fetch'];
}

const clients = new Map<string, Promise<TestClient>>();

/**
 * A node (or operator) certificate for `cn` from `config`'s test CA, recorded in `store`, with a client presenting
 * it; one per CA and CN unless `fresh` (then a new certificate each call).
 */
export function certClient(
  config: Pick<ServerConfig, 'tls'>,
  store: Store,
  cn: string,
  o: { role?: 'node' | ClientRole; days?: number; fresh?: boolean } = {},
): Promise<TestClient> {
  const key = `${config.tls.ca}|${cn}|${o.role ?? 'node'}`;
  const cached = o.fresh ? undefined : clients.get(key);
  if (cached) return cached;
  const made = (async (): Promise<TestClient> => {
    const ops = createCaOperations({ caDir: dirname(config.tls.ca), store });
    const cert =
      o.role === undefined || o.role === 'node'
        ? await ops.issueNodeCertificate({ nodeId: cn, days: o.days })
        : await ops.issueClientCertificate({ role: o.role, name: cn, days: o.days });
    const client = new TlsClient(cert);
    return { cert, client, fetch: client.fetch };
  })();
  if (!o.fresh) clients.set(key, made);
  return made;
}

/** Writes the operator certificate `llmgw ctl` presents to config.tls.clientCert/clientKey. */
export async function writeOperatorCert(
  config: Pick<ServerConfig, 'tls'>,
  store: Store,
  name = 'operator',
): Promise<void> {
  const { cert } = await certClient(config, store, name, { role: 'operator' });
  writeFileSync(config.tls.clientCert, cert.certPem, { mode: 0o644 });
  writeFileSync(config.tls.clientKey, cert.keyPem, { mode: 0o600 });
}

/** Writes the gateway certificate a gateway presents to config.tls.gatewayCert/gatewayKey. */
export async function writeGatewayCert(
  config: Pick<ServerConfig, 'tls'>,
  store: Store,
  name = 'gateway',
): Promise<void> {
  const { cert } = await certClient(config, store, name, { role: 'gateway' });
  writeFileSync(config.tls.gatewayCert, cert.certPem, { mode: 0o644 });
  writeFileSync(config.tls.gatewayKey, cert.keyPem, { mode: 0o600 });
}

/** Closes every test client's connections (call in afterAll). */
export async function closeCertClients(): Promise<void> {
  const all = [...clients.values()];
  clients.clear();
  for (const c of all) await (await c.catch(() => null))?.client.close();
}

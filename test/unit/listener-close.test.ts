/** A listener's close has a deadline: stalled TLS handshakes (which no server-side close of HTTP connections reaches) are dropped. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initCa, issueNodeCertificate } from '../../lib/pki';
import { startWeightsServer } from '../../lib/weights/serve';
import { stalledConnections } from '../helpers/raw-http';

describe("the agent's weights endpoint", () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-listener-close-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('18: closes at once with stalled TLS handshakes open (they held its close for up to 2 minutes)', async () => {
    const ca = initCa(join(dir, 'ca'), { keyBits: 2048 });
    const cert = issueNodeCertificate(ca, 'node-a');
    const server = await startWeightsServer({
      file: async () => null,
      tls: { certPem: cert.certPem, keyPem: cert.keyPem, caPem: ca.certPem },
      host: '127.0.0.1',
      port: 0,
    });
    const stalled = await stalledConnections(server.port, 10);
    const closed = await Promise.race([
      server.close().then(() => 'closed'),
      new Promise((r) => setTimeout(() => r('still closing after 10 s'), 10_000)),
    ]);
    expect(closed).toBe('closed');
    await Promise.all(stalled.map((s) => new Promise((r) => (s.destroyed ? r(null) : s.once('close', r)))));
  });
});

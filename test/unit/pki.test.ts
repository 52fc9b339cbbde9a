/**
 * The PKI library against the tools that will read its output: OpenSSL (`openssl verify`, `openssl crl`),
 * Node's X509Certificate and a real mutual-TLS handshake on loopback. One CA per file (RSA keygen is slow).
 */
import { spawnSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import forge from 'node-forge';
import {
  buildCrl,
  caCertPem,
  certificateInfo,
  checkNodeId,
  crlRefreshAt,
  generateRsaKey,
  initCa,
  issueClientCertificate,
  issueNodeCertificate,
  issueServerCertificate,
  loadCa,
  NODE_CA_PATH,
  randomSerial,
  renewAt,
  signNodeCsr,
  trustInstallPlan,
  type Ca,
} from '../../lib/pki';
import { thrownWithCode } from '../helpers/errors';

const DAY = 86_400_000;
const tmp = mkdtempSync(join(tmpdir(), 'llmgw-pki-'));
const caDir = join(tmp, 'ca');
let ca: Ca;
let other: Ca; // a second CA, which must not be mistaken for ours

const openssl = (...args: string[]): { status: number | null; out: string } => {
  const r = spawnSync('openssl', args, { encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
};
const file = (name: string, content: string): string => {
  const p = join(tmp, name);
  writeFileSync(p, content);
  return p;
};
const csrFor = (cn: string, bits = 2048): string => {
  const { key, publicKey } = generateRsaKey(bits);
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = publicKey;
  csr.setSubject([{ shortName: 'CN', value: cn }]);
  csr.sign(key, forge.md.sha256.create());
  return forge.pki.certificationRequestToPem(csr);
};
const text = (pem: string): string => openssl('x509', '-in', file('show.crt', pem), '-noout', '-text').out;

beforeAll(() => {
  const t = Date.now();
  ca = initCa(caDir);
  console.log(`ca init (RSA-3072): ${Date.now() - t} ms`);
  other = initCa(join(tmp, 'other'), { commonName: 'someone else', keyBits: 2048 });
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('the CA', () => {
  test('ca.key is 0600 and ca.crt 0644', () => {
    expect(statSync(join(caDir, 'ca.key')).mode & 0o777).toBe(0o600);
    expect(statSync(join(caDir, 'ca.crt')).mode & 0o777).toBe(0o644);
  });

  test('is a critical cA=true certificate for keyCertSign+cRLSign, RSA-3072, SHA-256, with a subject key id', () => {
    const x = new X509Certificate(ca.certPem);
    expect(x.ca).toBe(true);
    expect(x.publicKey.asymmetricKeyDetails?.modulusLength).toBe(3072);
    const t = text(ca.certPem);
    expect(t).toMatch(/Signature Algorithm: sha256WithRSAEncryption/);
    expect(t).toMatch(/Basic Constraints: critical\s+CA:TRUE/);
    expect(t).toMatch(/Key Usage: critical\s+Certificate Sign, CRL Sign/);
    expect(t).toMatch(/Subject Key Identifier/);
    expect(x.verify(x.publicKey)).toBe(true);
  });

  test('init refuses to overwrite a CA, naming the directory, and leaves it as it was', () => {
    const before = createHash('sha256')
      .update(readFileSync(join(caDir, 'ca.key')))
      .digest('hex');
    const err = thrownWithCode(() => initCa(caDir), 'LLMGW_CA_EXISTS');
    expect(err.message).toContain(caDir);
    expect(err.message).toMatch(/move the directory away/);
    expect(
      createHash('sha256')
        .update(readFileSync(join(caDir, 'ca.key')))
        .digest('hex'),
    ).toBe(before);
  });

  test('loadCa refuses a missing CA, a key others can read, and a key of another CA', () => {
    expect(thrownWithCode(() => loadCa(join(tmp, 'nowhere')), 'LLMGW_CA_MISSING').message).toMatch(
      /llmgw ca init --dir/,
    );
    const copy = join(tmp, 'copy');
    mkdirSync(copy);
    copyFileSync(join(caDir, 'ca.crt'), join(copy, 'ca.crt'));
    copyFileSync(join(caDir, 'ca.key'), join(copy, 'ca.key'));
    chmodSync(join(copy, 'ca.key'), 0o644);
    expect(thrownWithCode(() => loadCa(copy), 'LLMGW_CA_INVALID').message).toMatch(/chmod 600/);
    copyFileSync(join(tmp, 'other', 'ca.key'), join(copy, 'ca.key'));
    chmodSync(join(copy, 'ca.key'), 0o600);
    expect(thrownWithCode(() => loadCa(copy), 'LLMGW_CA_INVALID').message).toMatch(/is not the key of/);
    expect(caCertPem(copy)).toBe(ca.certPem); // the public half alone needs no key
  });
});

describe('node certificates', () => {
  test('CN and DNS SAN are the node id; clientAuth only; signed by the CA; OpenSSL verifies it as a TLS client', () => {
    const t = Date.now();
    const n = issueNodeCertificate(ca, 'node-a');
    console.log(`issue one node certificate (RSA-2048 key + signature): ${Date.now() - t} ms`);
    const x = new X509Certificate(n.certPem);
    expect(x.subject).toBe('CN=node-a\nOU=node');
    expect(x.subjectAltName).toBe('DNS:node-a');
    expect(x.ca).toBe(false);
    expect(x.keyUsage).toEqual(['1.3.6.1.5.5.7.3.2']); // clientAuth
    expect(x.checkIssued(new X509Certificate(ca.certPem))).toBe(true);
    expect(x.verify(new X509Certificate(ca.certPem).publicKey)).toBe(true);
    expect(x.verify(new X509Certificate(other.certPem).publicKey)).toBe(false);
    expect(x.publicKey.asymmetricKeyDetails?.modulusLength).toBe(2048);
    const t2 = text(n.certPem);
    expect(t2).toMatch(/Basic Constraints: critical\s+CA:FALSE/);
    expect(t2).toMatch(/Key Usage: critical\s+Digital Signature, Key Encipherment/);
    expect(t2).toMatch(/Signature Algorithm: sha256WithRSAEncryption/);
    const ski = /Subject Key Identifier:\s+([0-9A-F:]+)/.exec(text(ca.certPem))?.[1];
    expect(/Authority Key Identifier:\s+(?:keyid:)?([0-9A-F:]+)/.exec(t2)?.[1]).toBe(ski);
    const crt = file('node-a.crt', n.certPem);
    expect(openssl('verify', '-CAfile', join(caDir, 'ca.crt'), '-purpose', 'sslclient', crt)).toEqual({
      status: 0,
      out: `${crt}: OK\n`,
    });
    expect(openssl('verify', '-CAfile', join(caDir, 'ca.crt'), '-purpose', 'sslserver', crt).status).not.toBe(0);
    expect(openssl('verify', '-CAfile', join(tmp, 'other', 'ca.crt'), crt).status).not.toBe(0);
    // its key is the key of the certificate
    expect(forge.pki.privateKeyFromPem(n.keyPem).n.toString(16)).toBe(
      (forge.pki.certificateFromPem(n.certPem).publicKey as forge.pki.rsa.PublicKey).n.toString(16),
    );
  });

  test('serials are random positive 128-bit numbers, recorded as 32 lowercase hex digits', () => {
    const serials = Array.from({ length: 200 }, randomSerial);
    expect(new Set(serials).size).toBe(200);
    for (const s of serials) {
      expect(s).toMatch(/^[0-7][0-9a-f]{31}$/);
      expect(s.startsWith('00')).toBe(false);
    }
    const n = issueNodeCertificate(ca, 'node-a');
    expect(certificateInfo(n.certPem).serial).toBe(n.serial);
  });

  test('valid 90 days by default, as many as asked, never longer than the CA', () => {
    const now = new Date('2027-01-01T00:00:00Z');
    const d90 = issueNodeCertificate(ca, 'node-a', { now });
    expect(d90.notAfter.getTime() - now.getTime()).toBe(90 * DAY);
    expect(d90.notBefore.getTime()).toBeLessThan(now.getTime()); // backdated for clock skew
    expect(new X509Certificate(d90.certPem).validTo).toBe('Apr  1 00:00:00 2027 GMT');
    expect(issueNodeCertificate(ca, 'node-a', { now, days: 7 }).notAfter.getTime() - now.getTime()).toBe(7 * DAY);
    expect(
      thrownWithCode(() => issueNodeCertificate(ca, 'node-a', { days: 4000 }), 'LLMGW_CA_INVALID').message,
    ).toMatch(/outlive the CA/);
    expect(renewAt(new Date(0), new Date(90 * DAY)).getTime()).toBe(60 * DAY);
  });

  test.each(['Node-A', 'a', '-ab', 'ab-', 'a_b', 'a.b', '1abc', 'x'.repeat(64), '', 'node a'])(
    'node id %j is refused with LLMGW_BAD_NODE_ID',
    (id) => {
      const err = thrownWithCode(() => issueNodeCertificate(ca, id), 'LLMGW_BAD_NODE_ID');
      expect(err.message).toMatch(/a-z, 0-9 and '-'/);
    },
  );

  test('ids that fit the alphabet pass', () => {
    for (const id of ['gpu-07', 'sim-a', 'ab', 'n'.repeat(32)]) expect(checkNodeId(id)).toBe(id);
  });
});

describe('signing a CSR', () => {
  test('the certificate is for the authenticated identity, not the CN the CSR asks for, with the CSR key', () => {
    const csr = csrFor('other-node');
    const c = signNodeCsr(ca, csr, 'node-a');
    const x = new X509Certificate(c.certPem);
    expect(c.cn).toBe('node-a');
    expect(x.subject).toBe('CN=node-a\nOU=node');
    expect(x.subjectAltName).toBe('DNS:node-a');
    const csrKey = forge.pki.certificationRequestFromPem(csr).publicKey as forge.pki.rsa.PublicKey;
    expect((forge.pki.certificateFromPem(c.certPem).publicKey as forge.pki.rsa.PublicKey).n.equals(csrKey.n)).toBe(
      true,
    );
    expect(
      openssl('verify', '-CAfile', join(caDir, 'ca.crt'), '-purpose', 'sslclient', file('csr.crt', c.certPem)).status,
    ).toBe(0);
  });

  test('a CSR whose signature does not verify is refused with LLMGW_BAD_CSR', () => {
    const der = Buffer.from(forge.pem.decode(csrFor('node-a'))[0]!.body, 'binary');
    der[der.length - 1]! ^= 0x01; // the last byte is inside the signature
    const tampered = forge.pem.encode({ type: 'CERTIFICATE REQUEST', body: der.toString('binary') });
    expect(thrownWithCode(() => signNodeCsr(ca, tampered, 'node-a'), 'LLMGW_BAD_CSR').message).toMatch(
      /does not verify/,
    );
  });

  test('a CSR with a small RSA key or an EC key is refused with LLMGW_BAD_CSR', () => {
    expect(thrownWithCode(() => signNodeCsr(ca, csrFor('node-a', 1024), 'node-a'), 'LLMGW_BAD_CSR').message).toMatch(
      /1024 bits/,
    );
    const ec = spawnSync(
      'openssl',
      [
        'req',
        '-new',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(tmp, 'ec.key'),
        '-subj',
        '/CN=node-a',
      ],
      { encoding: 'utf8' },
    );
    expect(ec.stdout).toMatch(/BEGIN CERTIFICATE REQUEST/);
    expect(thrownWithCode(() => signNodeCsr(ca, ec.stdout, 'node-a'), 'LLMGW_BAD_CSR').message).toMatch(/not RSA/);
  });

  test.each([
    ['nothing', '', /got nothing/],
    ['no PEM block', 'hello', /no BEGIN\/END block/],
    ['a certificate', 'CERT', /is a "CERTIFICATE" block/],
    [
      'garbage inside the block',
      '-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n',
      /does not hold a readable/,
    ],
    ['two CSRs', 'TWO', /holds 2 PEM blocks/],
  ])('%s instead of a CSR is LLMGW_BAD_PEM naming what was expected', (_what, input, why) => {
    const pem = input === 'CERT' ? ca.certPem : input === 'TWO' ? csrFor('a1') + csrFor('a2') : input;
    const err = thrownWithCode(() => signNodeCsr(ca, pem, 'node-a'), 'LLMGW_BAD_PEM');
    expect(err.message).toMatch(
      /CSR from node-a: expected a PEM certificate request \(-----BEGIN CERTIFICATE REQUEST-----/,
    );
    expect(err.message).toMatch(why);
  });

  test('the identity is checked against the alphabet', () => {
    thrownWithCode(() => signNodeCsr(ca, csrFor('x'), 'Other_Node'), 'LLMGW_BAD_NODE_ID');
  });
});

describe('server certificates', () => {
  test('serverAuth with DNS and IP SANs from the hosts; OpenSSL verifies it as a TLS server', () => {
    const s = issueServerCertificate(ca, 'control-plane', ['cp.example.net', '127.0.0.1', '::1']);
    const x = new X509Certificate(s.certPem);
    expect(x.subject).toBe('CN=control-plane\nOU=server');
    expect(x.subjectAltName).toBe('DNS:cp.example.net, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1');
    expect(x.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']); // serverAuth
    expect(x.checkHost('cp.example.net')).toBe('cp.example.net');
    expect(x.checkIP('127.0.0.1')).toBe('127.0.0.1');
    const crt = file('server.crt', s.certPem);
    expect(openssl('verify', '-CAfile', join(caDir, 'ca.crt'), '-purpose', 'sslserver', crt).status).toBe(0);
    expect(openssl('verify', '-CAfile', join(caDir, 'ca.crt'), '-purpose', 'sslclient', crt).status).not.toBe(0);
  });

  test('needs hosts, each a DNS name or an IP address', () => {
    thrownWithCode(() => issueServerCertificate(ca, 'cp', []), 'LLMGW_BAD_REQUEST');
    expect(thrownWithCode(() => issueServerCertificate(ca, 'cp', ['not a host']), 'LLMGW_BAD_REQUEST').message).toMatch(
      /"not a host"/,
    );
  });
});

describe('the CRL', () => {
  test('OpenSSL parses and verifies it against the CA; it lists the revoked serials; verify -crl_check refuses them', () => {
    const revoked = issueNodeCertificate(ca, 'node-r');
    const kept = issueNodeCertificate(ca, 'node-k');
    const crl = buildCrl(ca, [
      { serial: revoked.serial, revokedAt: new Date() },
      { serial: randomSerial(), revokedAt: new Date(Date.now() - DAY) },
    ]);
    const crlFile = file('crl.pem', crl.pem);
    expect(crl.pem).toMatch(/^-----BEGIN X509 CRL-----\n/);
    const r = openssl('crl', '-in', crlFile, '-CAfile', join(caDir, 'ca.crt'), '-noout', '-text');
    expect(r.status).toBe(0);
    expect(r.out).toMatch(/verify OK/);
    expect(r.out).toMatch(/Version 2/);
    expect(r.out).toMatch(/Signature Algorithm: sha256WithRSAEncryption/);
    expect(r.out).toMatch(/Issuer: CN = llmgw cluster CA, O = llmgw/);
    expect(r.out).toContain(`Serial Number: ${revoked.serial.toUpperCase()}`);
    expect(r.out).toMatch(new RegExp(`CRL Number:\\s+${crl.number}`));
    const ski = /Subject Key Identifier:\s+([0-9A-F:]+)/.exec(text(ca.certPem))?.[1];
    expect(/Authority Key Identifier:\s+(?:keyid:)?([0-9A-F:]+)/.exec(r.out)?.[1]).toBe(ski);
    expect(crl.nextUpdate.getTime() - crl.thisUpdate.getTime()).toBe(7 * DAY);
    expect(crlRefreshAt(crl).getTime() - crl.thisUpdate.getTime()).toBe(3.5 * DAY);

    const check = (pem: string): { status: number | null; out: string } =>
      openssl('verify', '-crl_check', '-CRLfile', crlFile, '-CAfile', join(caDir, 'ca.crt'), file('check.crt', pem));
    expect(check(kept.certPem).status).toBe(0);
    const refused = check(revoked.certPem);
    expect(refused.status).not.toBe(0);
    expect(refused.out).toMatch(/certificate revoked/);
  });

  test('an empty CRL verifies too, one signed by another CA does not, and numbers grow', () => {
    const a = buildCrl(ca, []);
    const b = buildCrl(ca, []);
    expect(BigInt(b.number)).toBeGreaterThan(BigInt(a.number));
    expect(openssl('crl', '-in', file('empty.pem', a.pem), '-CAfile', join(caDir, 'ca.crt'), '-noout').out).toMatch(
      /verify OK/,
    );
    const foreign = openssl(
      'crl',
      '-in',
      file('foreign.pem', buildCrl(other, []).pem),
      '-CAfile',
      join(caDir, 'ca.crt'),
      '-noout',
    );
    expect(foreign.out).not.toMatch(/verify OK/);
  });

  test("Node's TLS accepts it as a CRL (and rejects a broken one)", () => {
    const crl = buildCrl(ca, [{ serial: randomSerial(), revokedAt: new Date() }]).pem;
    expect(() => tls.createSecureContext({ ca: ca.certPem, crl })).not.toThrow();
    expect(() =>
      tls.createSecureContext({ ca: ca.certPem, crl: '-----BEGIN X509 CRL-----\nAAAAAAAA\n-----END X509 CRL-----\n' }),
    ).toThrow();
  });
});

describe('mutual TLS on loopback with these certificates', () => {
  /**
   * Connects with a client certificate; resolves with what the server said. The server verifies in its
   * own handler (rejectUnauthorized: false), as the control plane will, so it can say why it refused.
   */
  const handshake = async (client: { certPem: string; keyPem: string }, crl?: string): Promise<string> => {
    const server = issueServerCertificate(ca, 'control-plane', ['localhost', '127.0.0.1']);
    const srv = tls.createServer(
      { key: server.keyPem, cert: server.certPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: false, crl },
      (s) => {
        s.end(
          s.authorized
            ? `hello ${(s.getPeerCertificate().subject as { CN?: string }).CN}`
            : `refused: ${String(s.authorizationError)}`,
        );
      },
    );
    await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
    try {
      return await new Promise<string>((ok, fail) => {
        const c = tls.connect({
          host: '127.0.0.1',
          port: (srv.address() as AddressInfo).port,
          servername: 'localhost',
          ca: ca.certPem,
          cert: client.certPem,
          key: client.keyPem,
        });
        let got = '';
        c.on('data', (d: Buffer) => (got += d.toString()));
        c.on('end', () => ok(got));
        c.on('error', fail);
      });
    } finally {
      srv.close();
    }
  };

  test('a node certificate authenticates; a revoked one does not', async () => {
    const n = issueNodeCertificate(ca, 'node-a');
    expect(await handshake(n)).toBe('hello node-a');
    const crl = buildCrl(ca, [{ serial: n.serial, revokedAt: new Date() }]).pem;
    expect(await handshake(n, crl)).toBe('refused: CERT_REVOKED');
    expect(await handshake(issueNodeCertificate(other, 'node-a'))).toMatch(
      /^refused: (UNABLE_TO_GET_ISSUER_CERT_LOCALLY|UNABLE_TO_VERIFY_LEAF_SIGNATURE)$/,
    );
  });
});

describe('certificateInfo', () => {
  test('serial, CN and dates as recorded; issuerMatches only our CA; PEM or DER', () => {
    const n = issueNodeCertificate(ca, 'node-a');
    const info = certificateInfo(n.certPem);
    expect({ serial: info.serial, cn: info.cn, notBefore: info.notBefore, notAfter: info.notAfter }).toEqual({
      serial: n.serial,
      cn: 'node-a',
      notBefore: n.notBefore,
      notAfter: n.notAfter,
    });
    expect(info.issuerMatches(ca.certPem)).toBe(true);
    expect(info.issuerMatches(other.certPem)).toBe(false);
    expect(certificateInfo(new X509Certificate(n.certPem).raw).serial).toBe(n.serial);
    thrownWithCode(() => certificateInfo('not a certificate'), 'LLMGW_BAD_PEM');
  });

  test('the role is signed into the subject (OU), so a listener without the certificates table can read it', () => {
    expect(certificateInfo(issueNodeCertificate(ca, 'node-a').certPem).role).toBe('node');
    expect(certificateInfo(issueClientCertificate(ca, 'gateway', 'gw-1').certPem).role).toBe('gateway');
    expect(certificateInfo(issueClientCertificate(ca, 'operator', 'ops').certPem).role).toBe('operator');
    expect(certificateInfo(issueServerCertificate(ca, 'cp', ['127.0.0.1']).certPem).role).toBe('server');
    expect(certificateInfo(signNodeCsr(ca, csrFor('whatever'), 'node-b').certPem).role).toBe('node');
    // A CSR cannot choose its role: the CA writes the subject.
    const csr = csrFor('gw-2');
    expect(certificateInfo(signNodeCsr(ca, csr, 'node-c').certPem)).toMatchObject({ cn: 'node-c', role: 'node' });
  });
});

describe('trust on the node', () => {
  test('the plan installs the CA root for the system and for Node', () => {
    expect(trustInstallPlan(ca.certPem)).toEqual({
      files: [{ path: '/usr/local/share/ca-certificates/llmgw-ca.crt', content: ca.certPem, mode: 0o644 }],
      commands: [['update-ca-certificates']],
      unitLines: ['Environment=NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/llmgw-ca.crt'],
    });
    expect(NODE_CA_PATH).toBe('/usr/local/share/ca-certificates/llmgw-ca.crt');
    thrownWithCode(
      () => trustInstallPlan('-----BEGIN PRIVATE KEY-----\nAA\n-----END PRIVATE KEY-----\n'),
      'LLMGW_BAD_PEM',
    );
  });
});

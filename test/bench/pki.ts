/** How long the PKI takes (median of N): a node certificate with and without its key generation, a CRL, a hook's check. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import forge from 'node-forge';
import {
  buildCrl,
  certificateInfo,
  generateRsaKey,
  initCa,
  issueNodeCertificate,
  randomSerial,
  signNodeCsr,
} from '../../lib/pki';

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const time = (n: number, fn: () => void): number =>
  median(
    Array.from({ length: n }, () => {
      const t = process.hrtime.bigint();
      fn();
      return Number(process.hrtime.bigint() - t) / 1e6;
    }),
  );

const dir = mkdtempSync(join(tmpdir(), 'llmgw-pki-bench-'));
const t0 = Date.now();
const ca = initCa(join(dir, 'ca'));
const report = (what: string, ms: number): void => console.log(`${what.padEnd(58)} ${ms.toFixed(ms < 10 ? 2 : 0)} ms`);
report('ca init (RSA-3072 key, self-signed)', Date.now() - t0);

const { key, publicKey } = generateRsaKey(2048);
const req = forge.pki.createCertificationRequest();
req.publicKey = publicKey;
req.setSubject([{ shortName: 'CN', value: 'x' }]);
req.sign(key, forge.md.sha256.create());
const csr = forge.pki.certificationRequestToPem(req);

report(
  'issue a node certificate, key included (median of 20)',
  time(20, () => issueNodeCertificate(ca, 'node-a')),
);
report(
  'sign a node CSR: verify + sign, no keygen (median of 20)',
  time(20, () => signNodeCsr(ca, csr, 'node-a')),
);
const revoked = Array.from({ length: 1000 }, () => ({ serial: randomSerial(), revokedAt: new Date() }));
report(
  'build a CRL of 1,000 revoked certificates (median of 10)',
  time(10, () => buildCrl(ca, revoked)),
);
const cert = issueNodeCertificate(ca, 'node-a').certPem;
report(
  'certificateInfo + issuerMatches, a TLS hook (median of 200)',
  time(200, () => certificateInfo(cert).issuerMatches(ca.certPem)),
);
rmSync(dir, { recursive: true, force: true });

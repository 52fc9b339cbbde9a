/** The CA on disk: `ca.crt` (0644) and `ca.key` (0600) in one directory; created once, never overwritten. */
import { createPrivateKey, sign, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import forge from 'node-forge';
import { LlmgwError } from '../errors';
import { CA_KEY_BITS, generateRsaKey } from './keys';
import { lf, parseCertificatePem, parsePrivateKeyPem } from './pem';
import { randomSerial } from './serial';

/** Where `llmgw ca` looks without `--dir`, relative to the working directory. */
export const DEFAULT_CA_DIR = '.llmgw/ca';
/** How long a new CA is valid. */
export const CA_VALIDITY_DAYS = 3650;

const DAY_MS = 86_400_000;

/** A loaded CA, able to sign. */
export interface Ca {
  dir: string;
  certPem: string;
  cert: forge.pki.Certificate;
  key: forge.pki.rsa.PrivateKey;
  /** the same key for Node's native RSA: signing with it takes ~2 ms where forge's JavaScript RSA-3072 takes ~100 */
  keyObject: KeyObject;
  /** the CA's subjectKeyIdentifier (raw bytes as a binary string): every issued certificate's authorityKeyIdentifier */
  keyId: string;
  notAfter: Date;
}

/** The files of a CA directory. */
export function caPaths(dir: string): { cert: string; key: string; crl: string } {
  const d = resolve(dir);
  return { cert: join(d, 'ca.crt'), key: join(d, 'ca.key'), crl: join(d, 'crl.pem') };
}

/** A new self-signed CA certificate and key, in memory. */
export function createCa(o: { commonName?: string; days?: number; keyBits?: number; now?: Date } = {}): {
  certPem: string;
  keyPem: string;
} {
  const now = new Date(Math.floor((o.now ?? new Date()).getTime() / 1000) * 1000);
  const { keyPem, key, publicKey } = generateRsaKey(o.keyBits ?? CA_KEY_BITS);
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = randomSerial();
  cert.validity.notBefore = new Date(now.getTime() - 5 * 60_000);
  cert.validity.notAfter = new Date(now.getTime() + (o.days ?? CA_VALIDITY_DAYS) * DAY_MS);
  const subject = [
    { shortName: 'CN', value: o.commonName ?? 'llmgw cluster CA' },
    { shortName: 'O', value: 'llmgw' },
  ];
  cert.setSubject(subject);
  cert.setIssuer(subject);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(key, forge.md.sha256.create());
  return { certPem: lf(forge.pki.certificateToPem(cert)), keyPem };
}

/** Creates the CA in `dir`; refuses (LLMGW_CA_EXISTS) when the directory already holds one. */
export function initCa(dir: string, o: { commonName?: string; days?: number; keyBits?: number } = {}): Ca {
  const paths = caPaths(dir);
  const existing = [paths.cert, paths.key].filter((p) => existsSync(p));
  if (existing.length) {
    throw new LlmgwError(
      'LLMGW_CA_EXISTS',
      `${resolve(dir)} already holds a CA (${existing.join(', ')}); llmgw ca init never overwrites one, because every certificate it issued would stop verifying. Keep it, or move the directory away first to really start over`,
      { dir: resolve(dir) },
    );
  }
  mkdirSync(resolve(dir), { recursive: true, mode: 0o700 });
  const { certPem, keyPem } = createCa(o);
  // 'wx': another init racing this one fails here instead of overwriting. The key is written first,
  // so a crash in between leaves an incomplete CA that the next init refuses rather than silently replaces.
  writeFileSync(paths.key, keyPem, { mode: 0o600, flag: 'wx' });
  writeFileSync(paths.cert, certPem, { mode: 0o644, flag: 'wx' });
  chmodSync(paths.cert, 0o644); // the umask may have taken bits away
  return loadCa(dir);
}

/** The CA certificate alone (what the control plane and the nodes trust); needs no key. */
export function caCertPem(dir: string): string {
  const file = caPaths(dir).cert;
  if (!existsSync(file)) throw missing(dir);
  const pem = readFileSync(file, 'utf8');
  parseCertificatePem(pem, file);
  return pem;
}

/** Loads the CA for signing, checking that its key is private, matches the certificate, and the CA is valid now. */
export function loadCa(dir: string, now = new Date()): Ca {
  const paths = caPaths(dir);
  if (!existsSync(paths.cert) || !existsSync(paths.key)) throw missing(dir);
  const invalid = (why: string): LlmgwError =>
    new LlmgwError('LLMGW_CA_INVALID', `the CA in ${resolve(dir)} is unusable: ${why}`, { dir: resolve(dir) });
  const mode = statSync(paths.key).mode & 0o777;
  if (mode & 0o077)
    throw invalid(
      `${paths.key} is readable by group or others (mode 0${mode.toString(8)}); run chmod 600 ${paths.key}`,
    );
  const certPem = readFileSync(paths.cert, 'utf8');
  const cert = parseCertificatePem(certPem, paths.cert);
  const keyPem = readFileSync(paths.key, 'utf8');
  const key = parsePrivateKeyPem(keyPem, paths.key);
  const pub = cert.publicKey as forge.pki.rsa.PublicKey;
  if (pub.n.compareTo(key.n) !== 0 || pub.e.compareTo(key.e) !== 0)
    throw invalid(`${paths.key} is not the key of ${paths.cert}; restore the matching pair`);
  const bc = cert.getExtension('basicConstraints') as { cA?: boolean } | null;
  if (!bc?.cA) throw invalid(`${paths.cert} is not a CA certificate (no basicConstraints cA=true)`);
  if (cert.validity.notAfter.getTime() <= now.getTime())
    throw invalid(`${paths.cert} expired at ${cert.validity.notAfter.toISOString()}`);
  const ski = cert.getExtension('subjectKeyIdentifier') as { subjectKeyIdentifier?: string } | null;
  const keyId = ski?.subjectKeyIdentifier
    ? forge.util.hexToBytes(ski.subjectKeyIdentifier)
    : cert.generateSubjectKeyIdentifier().getBytes();
  return {
    dir: resolve(dir),
    certPem,
    cert,
    key,
    keyObject: createPrivateKey(keyPem),
    keyId,
    notAfter: cert.validity.notAfter,
  };
}

/** Signs DER bytes (a binary string) with the CA key: RSA PKCS#1 v1.5 over SHA-256. */
export function caSign(ca: Ca, tbsDer: string): string {
  return sign('sha256', Buffer.from(tbsDer, 'binary'), ca.keyObject).toString('binary');
}

/** What forge's cert.sign(key, sha256) does, with the signature made natively. */
export function signCertificate(ca: Ca, cert: forge.pki.Certificate): void {
  cert.md = forge.md.sha256.create();
  cert.signatureOid = cert.siginfo.algorithmOid = forge.pki.oids.sha256WithRSAEncryption!;
  // getTBSCertificate is public in forge but missing from @types/node-forge.
  cert.tbsCertificate = (
    forge.pki as unknown as { getTBSCertificate(c: forge.pki.Certificate): forge.asn1.Asn1 }
  ).getTBSCertificate(cert);
  cert.signature = caSign(ca, forge.asn1.toDer(cert.tbsCertificate).getBytes());
}

function missing(dir: string): LlmgwError {
  return new LlmgwError(
    'LLMGW_CA_MISSING',
    `there is no CA in ${resolve(dir)} (ca.crt and ca.key): run llmgw ca init --dir ${dir} on the CA host, or pass the --dir of the existing CA`,
    { dir: resolve(dir) },
  );
}

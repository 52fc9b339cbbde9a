/** The node side of a renewal: a new key made here and a CSR for it, so the key never leaves the node. */
import { generateKeyPair, generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import forge from 'node-forge';
import { NODE_KEY_BITS } from './keys';
import { lf } from './pem';

const generateKeyPairAsync = promisify(generateKeyPair);

/**
 * A SHA-256 CSR for `cn` over `publicKey`, signed with `privateKey`: what forge's csr.sign(key, sha256) does, with
 * the signature made natively (as signCertificate does for the CA), not by forge's JavaScript RSA.
 */
function signedCsr(cn: string, privateKey: KeyObject, publicKey: KeyObject): { csrPem: string; keyPem: string } {
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  csr.setSubject([{ shortName: 'CN', value: cn }]);
  const req = csr as forge.pki.CertificateSigningRequest & { certificationRequestInfo: forge.asn1.Asn1 | null };
  req.md = forge.md.sha256.create();
  req.signatureOid = req.siginfo.algorithmOid = forge.pki.oids.sha256WithRSAEncryption!;
  req.certificationRequestInfo = (
    forge.pki as unknown as { getCertificationRequestInfo(c: forge.pki.CertificateSigningRequest): forge.asn1.Asn1 }
  ).getCertificationRequestInfo(req);
  const der = Buffer.from(forge.asn1.toDer(req.certificationRequestInfo).getBytes(), 'binary');
  req.signature = sign('sha256', der, privateKey).toString('binary');
  return {
    csrPem: lf(forge.pki.certificationRequestToPem(req)),
    keyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** A new RSA-2048 key and a SHA-256 CSR signed with it (the CA takes only its key: the CN comes from the connection). */
export function makeNodeCsr(cn: string): { csrPem: string; keyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: NODE_KEY_BITS });
  return signedCsr(cn, privateKey, publicKey);
}

/**
 * makeNodeCsr without holding the event loop: the key is generated on libuv's thread pool (an RSA-2048 key is
 * ~100 ms of CPU). What `llmgw sim-fleet` uses, so a thousand nodes making their keys do not starve the agents
 * already running (their heartbeats, TLS, MySQL).
 */
export async function makeNodeCsrAsync(cn: string): Promise<{ csrPem: string; keyPem: string }> {
  const { privateKey, publicKey } = await generateKeyPairAsync('rsa', { modulusLength: NODE_KEY_BITS });
  return signedCsr(cn, privateKey, publicKey);
}

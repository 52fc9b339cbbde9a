/** The node side of a renewal: a new key made here and a CSR for it, so the key never leaves the node. */
import forge from 'node-forge';
import { generateRsaKey, NODE_KEY_BITS } from './keys';
import { lf } from './pem';

/** A new RSA-2048 key and a SHA-256 CSR signed with it (the CA takes only its key: the CN comes from the connection). */
export function makeNodeCsr(cn: string): { csrPem: string; keyPem: string } {
  const { key, keyPem, publicKey } = generateRsaKey(NODE_KEY_BITS);
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = publicKey;
  csr.setSubject([{ shortName: 'CN', value: cn }]);
  csr.sign(key, forge.md.sha256.create());
  return { csrPem: lf(forge.pki.certificationRequestToPem(csr)), keyPem };
}

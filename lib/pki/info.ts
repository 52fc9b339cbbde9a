/** Fast reads of a certificate with Node's X509Certificate (no forge), for a TLS hook on every connection. */
import { X509Certificate } from 'node:crypto';
import { LlmgwError } from '../errors';

/** What a TLS hook needs to know about a presented certificate. */
export interface CertificateInfo {
  /** lowercase hex, as recorded in the certificates table */
  serial: string;
  /** the subject's CN, or null when it has none */
  cn: string | null;
  /**
   * the role the CA signed into the subject's OU (lib/pki/issue.ts), or null for a certificate issued before roles
   * were signed in (or not by llmgw)
   */
  role: string | null;
  notBefore: Date;
  notAfter: Date;
  /** true when `caPem` issued this certificate and its signature verifies with the CA's key */
  issuerMatches(caPem: string | X509Certificate): boolean;
}

/** Reads a certificate given as PEM or DER (e.g. `tlsSocket.getPeerCertificate().raw`). */
export function certificateInfo(pemOrDer: string | Buffer): CertificateInfo {
  let x: X509Certificate;
  try {
    x = new X509Certificate(pemOrDer);
  } catch (err) {
    throw new LlmgwError(
      'LLMGW_BAD_PEM',
      `expected a certificate (PEM -----BEGIN CERTIFICATE----- or DER), but it does not parse (${(err as Error).message})`,
    );
  }
  const cn = /^CN=(.*)$/m.exec(x.subject)?.[1] ?? null;
  const role = /^OU=(.*)$/m.exec(x.subject)?.[1] ?? null;
  return {
    serial: x.serialNumber.toLowerCase(),
    cn,
    role,
    notBefore: new Date(x.validFrom),
    notAfter: new Date(x.validTo),
    issuerMatches: (caPem) => {
      const ca = typeof caPem === 'string' ? new X509Certificate(caPem) : caPem;
      return x.checkIssued(ca) && x.verify(ca.publicKey);
    },
  };
}

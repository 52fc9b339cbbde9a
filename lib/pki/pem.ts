/** PEM in, forge objects out, with errors that say what was expected and where it came from. */
import forge from 'node-forge';
import { LlmgwError } from '../errors';

const LABELS = {
  certificate: ['CERTIFICATE'],
  csr: ['CERTIFICATE REQUEST', 'NEW CERTIFICATE REQUEST'],
  key: ['PRIVATE KEY', 'RSA PRIVATE KEY'],
} as const;

type Kind = keyof typeof LABELS;

const NAMES: Record<Kind, string> = { certificate: 'certificate', csr: 'certificate request', key: 'private key' };

/** LLMGW_BAD_PEM: names the source, what was expected and what was wrong. */
function bad(kind: Kind, from: string, why: string): LlmgwError {
  const expected = LABELS[kind].map((l) => `-----BEGIN ${l}-----`).join(' or ');
  return new LlmgwError('LLMGW_BAD_PEM', `${from}: expected a PEM ${NAMES[kind]} (${expected}), but ${why}`, {
    from,
    expected,
  });
}

/** Throws LLMGW_BAD_PEM unless `pem` is exactly one PEM block of the expected kind. */
function expectBlock(pem: unknown, kind: Kind, from: string): string {
  if (typeof pem !== 'string' || pem.trim() === '') throw bad(kind, from, 'got nothing');
  if (!pem.includes('-----BEGIN '))
    throw bad(kind, from, `it has no BEGIN/END block (it starts with ${JSON.stringify(pem.trim().slice(0, 30))})`);
  let blocks: forge.pem.ObjectPEM[];
  try {
    blocks = forge.pem.decode(pem);
  } catch (err) {
    throw bad(kind, from, `it does not decode (${(err as Error).message})`);
  }
  if (blocks.length === 0) throw bad(kind, from, 'it has no complete BEGIN/END block');
  if (blocks.length > 1) throw bad(kind, from, `it holds ${blocks.length} PEM blocks; send one`);
  const type = blocks[0]!.type;
  if (!(LABELS[kind] as readonly string[]).includes(type)) throw bad(kind, from, `it is a "${type}" block`);
  if (blocks[0]!.procType?.type === 'ENCRYPTED')
    throw bad(kind, from, 'it is encrypted; give the key unencrypted (its file mode protects it)');
  return pem;
}

/** A well-formed block whose DER inside is not what its label claims. */
function derError(kind: Kind, from: string, err: unknown): LlmgwError {
  return bad(kind, from, `the block does not hold a readable ${NAMES[kind]} (${(err as Error).message})`);
}

/** forge writes CRLF line ends; files and JSON read better with LF. */
export function lf(pem: string): string {
  return pem.replace(/\r\n/g, '\n');
}

/** Parses one certificate PEM block. */
export function parseCertificatePem(pem: unknown, from: string): forge.pki.Certificate {
  const text = expectBlock(pem, 'certificate', from);
  try {
    return forge.pki.certificateFromPem(text);
  } catch (err) {
    throw derError('certificate', from, err);
  }
}

/**
 * Parses one CSR PEM block. A CSR whose key is not RSA fails here as LLMGW_BAD_CSR: forge reads RSA
 * only, and llmgw issues RSA only.
 */
export function parseCsrPem(pem: unknown, from: string): forge.pki.CertificateSigningRequest {
  const text = expectBlock(pem, 'csr', from);
  try {
    return forge.pki.certificationRequestFromPem(text);
  } catch (err) {
    if (/OID is not RSA/i.test((err as Error).message))
      throw new LlmgwError(
        'LLMGW_BAD_CSR',
        `${from}: the CSR's key is not RSA; make the key with RSA of at least 2048 bits`,
        { from },
      );
    throw derError('csr', from, err);
  }
}

/** Parses one unencrypted RSA private key PEM block (PKCS#8 or PKCS#1). */
export function parsePrivateKeyPem(pem: unknown, from: string): forge.pki.rsa.PrivateKey {
  const text = expectBlock(pem, 'key', from);
  try {
    return forge.pki.privateKeyFromPem(text);
  } catch (err) {
    throw derError('key', from, err);
  }
}

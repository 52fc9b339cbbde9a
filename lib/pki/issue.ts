/** Issuing leaf certificates: node client certificates (CN = node id) and server certificates. */
import { isIP } from 'node:net';
import forge from 'node-forge';
import { LlmgwError } from '../errors';
import type { CertificateRole } from '../store/store';
import { signCertificate, type Ca } from './ca';
import { generateRsaKey, MIN_KEY_BITS, NODE_KEY_BITS } from './keys';
import { checkNodeId } from './node-id';
import { lf, parseCsrPem } from './pem';
import { randomSerial } from './serial';

/** How long a node or server certificate is valid unless told otherwise. */
export const DEFAULT_VALIDITY_DAYS = 90;

const DAY_MS = 86_400_000;
// Backdated so a node whose clock is a little behind the CA's accepts a certificate issued just now.
const BACKDATE_MS = 5 * 60_000;

/** A certificate just issued (recorded by the caller). */
export interface Issued {
  certPem: string;
  /** lowercase hex, 32 digits */
  serial: string;
  cn: string;
  role: CertificateRole;
  notBefore: Date;
  notAfter: Date;
}

export interface IssueOptions {
  days?: number;
  now?: Date;
}

type AltName = { type: 2; value: string } | { type: 7; ip: string };

function signLeaf(
  ca: Ca,
  o: { publicKey: forge.pki.PublicKey; cn: string; role: CertificateRole; altNames: AltName[] } & IssueOptions,
): Issued {
  const days = o.days ?? DEFAULT_VALIDITY_DAYS;
  if (!Number.isInteger(days) || days < 1)
    throw new LlmgwError('LLMGW_BAD_REQUEST', `validity must be a whole number of days >= 1, got ${days}`, { days });
  // Whole seconds, as the certificate stores them, so the recorded dates equal the certificate's.
  const now = Math.floor((o.now ?? new Date()).getTime() / 1000) * 1000;
  const notAfter = new Date(now + days * DAY_MS);
  if (notAfter > ca.notAfter) {
    throw new LlmgwError(
      'LLMGW_CA_INVALID',
      `a ${days}-day certificate for ${o.cn} would outlive the CA (it expires at ${ca.notAfter.toISOString()}): ask for fewer days, or create a new CA and re-issue`,
      { cn: o.cn, days },
    );
  }
  const cert = forge.pki.createCertificate();
  cert.publicKey = o.publicKey;
  cert.serialNumber = randomSerial();
  cert.validity.notBefore = new Date(now - BACKDATE_MS);
  cert.validity.notAfter = notAfter;
  // The role is a claim the CA signs (OU), so a listener without the certificates table (a node's door) can read it.
  cert.setSubject([
    { shortName: 'CN', value: o.cn },
    { shortName: 'OU', value: o.role },
  ]);
  cert.setIssuer(ca.cert.subject.attributes);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', ...(o.role === 'server' ? { serverAuth: true } : { clientAuth: true }) },
    { name: 'subjectKeyIdentifier' },
    { name: 'authorityKeyIdentifier', keyIdentifier: ca.keyId },
    { name: 'subjectAltName', altNames: o.altNames },
  ]);
  signCertificate(ca, cert);
  return {
    certPem: lf(forge.pki.certificateToPem(cert)),
    serial: cert.serialNumber,
    cn: o.cn,
    role: o.role,
    notBefore: cert.validity.notBefore,
    notAfter,
  };
}

/**
 * A node's client certificate and a new key for it: CN and DNS SAN are the node id (Temporal's rustls
 * client rejects certificates without a SAN). The key leaves this process: prefer `signNodeCsr` when
 * the node can make its own.
 */
export function issueNodeCertificate(ca: Ca, nodeId: string, o: IssueOptions = {}): Issued & { keyPem: string } {
  const id = checkNodeId(nodeId);
  const { keyPem, publicKey } = generateRsaKey(NODE_KEY_BITS);
  return { ...signLeaf(ca, { ...o, publicKey, cn: id, role: 'node', altNames: [{ type: 2, value: id }] }), keyPem };
}

/** The roles a client certificate that is not a node's may carry. */
export type ClientRole = 'operator' | 'gateway';

/**
 * A client certificate of role `role` (clientAuth; CN and DNS SAN = `name`, same alphabet as node ids) and a new
 * key. An operator's is what `llmgw ctl` presents to the control plane's operator routes; a gateway's is what a
 * gateway presents to the control plane's gateway routes (and nothing else: it is not an operator).
 */
export function issueClientCertificate(
  ca: Ca,
  role: ClientRole,
  name: string,
  o: IssueOptions = {},
): Issued & { keyPem: string } {
  const id = checkNodeId(name);
  const { keyPem, publicKey } = generateRsaKey(NODE_KEY_BITS);
  return { ...signLeaf(ca, { ...o, publicKey, cn: id, role, altNames: [{ type: 2, value: id }] }), keyPem };
}

/** An operator's client certificate (role operator): what `llmgw ctl` presents. */
export function issueOperatorCertificate(ca: Ca, name: string, o: IssueOptions = {}): Issued & { keyPem: string } {
  return issueClientCertificate(ca, 'operator', name, o);
}

/**
 * Signs a node's CSR. The certificate is for `identity` — the node id the caller authenticated (the CN
 * of the mTLS connection the CSR came over) — whatever subject the CSR asks for; only its key is used.
 */
export function signNodeCsr(ca: Ca, csrPem: unknown, identity: string, o: IssueOptions = {}): Issued {
  const id = checkNodeId(identity);
  const from = `CSR from ${id}`;
  const csr = parseCsrPem(csrPem, from);
  let verified = false;
  try {
    verified = csr.verify();
  } catch (err) {
    // forge throws both for a digest it does not know and for a signature that decrypts to garbage.
    const msg = (err as Error).message;
    if (/digest algorithm/i.test(msg))
      throw new LlmgwError(
        'LLMGW_BAD_CSR',
        `${from}: its signature cannot be checked (${msg}); sign the CSR with SHA-256`,
        { nodeId: id },
      );
  }
  if (!verified)
    throw new LlmgwError(
      'LLMGW_BAD_CSR',
      `${from}: its signature does not verify with the key it carries (altered, or not signed by that key); make a new CSR with the node's key`,
      { nodeId: id },
    );
  const publicKey = csr.publicKey as forge.pki.rsa.PublicKey | null;
  const bits = publicKey?.n.bitLength() ?? 0;
  if (!publicKey || bits < MIN_KEY_BITS)
    throw new LlmgwError('LLMGW_BAD_CSR', `${from}: its RSA key has ${bits} bits; use at least ${MIN_KEY_BITS}`, {
      nodeId: id,
      bits,
    });
  return signLeaf(ca, { ...o, publicKey, cn: id, role: 'node', altNames: [{ type: 2, value: id }] });
}

const SERVER_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const DNS_NAME_RE = /^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$/i;

/** A server certificate (serverAuth) for `name`, with a DNS or IP SAN for each of `hosts`, and a new key. */
export function issueServerCertificate(
  ca: Ca,
  name: string,
  hosts: string[],
  o: IssueOptions = {},
): Issued & { keyPem: string } {
  if (!SERVER_NAME_RE.test(name))
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `server name "${name}": use 1-64 of A-Z, a-z, 0-9, '.', '_' and '-', e.g. control-plane`,
      { name },
    );
  if (hosts.length === 0)
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `a server certificate for ${name} needs at least one host (DNS name or IP address) that clients connect to`,
      { name },
    );
  const altNames = hosts.map((h): AltName => {
    if (isIP(h)) return { type: 7, ip: h };
    if (DNS_NAME_RE.test(h)) return { type: 2, value: h.toLowerCase() };
    throw new LlmgwError('LLMGW_BAD_REQUEST', `host "${h}" is neither an IP address nor a DNS name`, { host: h });
  });
  const { keyPem, publicKey } = generateRsaKey(NODE_KEY_BITS);
  return { ...signLeaf(ca, { ...o, publicKey, cn: name, role: 'server', altNames }), keyPem };
}

/** When a certificate should be renewed: at two thirds of its lifetime (day 60 of 90). */
export function renewAt(notBefore: Date, notAfter: Date): Date {
  return new Date(notBefore.getTime() + ((notAfter.getTime() - notBefore.getTime()) * 2) / 3);
}

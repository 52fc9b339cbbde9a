/**
 * The certificate revocation list, an X.509 v2 CRL (RFC 5280 §5) built with forge.asn1: forge reads
 * and writes certificates but has no CRL builder.
 */
import forge from 'node-forge';
import { caSign, type Ca } from './ca';
import { lf } from './pem';
import { derUnsignedInteger } from './serial';

const { asn1 } = forge;
const U = asn1.Class.UNIVERSAL;
const T = asn1.Type;

/** How long a CRL is valid: its nextUpdate is this long after its thisUpdate. */
export const CRL_VALIDITY_DAYS = 7;

const DAY_MS = 86_400_000;
let lastNumber = 0;

export interface Crl {
  pem: string;
  thisUpdate: Date;
  nextUpdate: Date;
  /** the cRLNumber, decimal */
  number: string;
}

/** RFC 5280 §4.1.2.5: UTCTime through 2049, GeneralizedTime from 2050. */
function time(d: Date): forge.asn1.Asn1 {
  return d.getUTCFullYear() < 2050
    ? asn1.create(U, T.UTCTIME, false, asn1.dateToUtcTime(d))
    : asn1.create(U, T.GENERALIZEDTIME, false, asn1.dateToGeneralizedTime(d));
}

const integer = (hex: string): forge.asn1.Asn1 => asn1.create(U, T.INTEGER, false, derUnsignedInteger(hex));
const oid = (o: string): forge.asn1.Asn1 => asn1.create(U, T.OID, false, asn1.oidToDer(o).getBytes());
const seq = (items: forge.asn1.Asn1[]): forge.asn1.Asn1 => asn1.create(U, T.SEQUENCE, true, items);
const der = (a: forge.asn1.Asn1): string => asn1.toDer(a).getBytes();
const extension = (id: string, value: forge.asn1.Asn1): forge.asn1.Asn1 =>
  seq([oid(id), asn1.create(U, T.OCTETSTRING, false, der(value))]);

/**
 * Builds and signs a CRL listing `revoked`. The cRLNumber, which must grow with each CRL, is the
 * issuing time in milliseconds (strictly increasing within a process): no counter to keep on disk, and
 * one CA is used by one `llmgw-ca` worker.
 */
export function buildCrl(
  ca: Ca,
  revoked: { serial: string; revokedAt: Date }[],
  o: { now?: Date; days?: number } = {},
): Crl {
  const at = (o.now ?? new Date()).getTime();
  lastNumber = Math.max(at, lastNumber + 1);
  const number = String(lastNumber);
  // UTCTime has whole seconds.
  const thisUpdate = new Date(Math.floor(at / 1000) * 1000);
  const nextUpdate = new Date(thisUpdate.getTime() + (o.days ?? CRL_VALIDITY_DAYS) * DAY_MS);
  const sha256WithRsa = seq([oid(forge.pki.oids.sha256WithRSAEncryption!), asn1.create(U, T.NULL, false, '')]);
  const tbs = seq([
    asn1.create(U, T.INTEGER, false, '\x01'), // v2
    sha256WithRsa,
    forge.pki.distinguishedNameToAsn1(ca.cert.subject),
    time(thisUpdate),
    time(nextUpdate),
    // An empty list is left out, not written as an empty SEQUENCE (RFC 5280 §5.1.2.6).
    ...(revoked.length ? [seq(revoked.map((r) => seq([integer(r.serial), time(r.revokedAt)])))] : []),
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, [
      seq([
        extension('2.5.29.20', integer(BigInt(number).toString(16))), // cRLNumber
        extension('2.5.29.35', seq([asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, false, ca.keyId)])), // authorityKeyIdentifier
      ]),
    ]),
  ]);
  const signature = caSign(ca, der(tbs));
  const list = seq([tbs, sha256WithRsa, asn1.create(U, T.BITSTRING, false, `\x00${signature}`)]);
  const pem = lf(forge.pem.encode({ type: 'X509 CRL', body: der(list) }, { maxline: 64 }));
  return { pem, thisUpdate, nextUpdate, number };
}

/** When to publish the next CRL: at half of this one's life, well before its nextUpdate. */
export function crlRefreshAt(crl: Pick<Crl, 'thisUpdate' | 'nextUpdate'>): Date {
  return new Date((crl.thisUpdate.getTime() + crl.nextUpdate.getTime()) / 2);
}

/**
 * Checking a node's certificate when a node serves: its weights endpoint and its inference door serve with the
 * node's own certificate, which is clientAuth only, so OpenSSL would refuse it as a server's. The client connects
 * with `rejectUnauthorized: false` and checks the certificate here instead: this cluster's CA, within its dates,
 * the expected node's CN, and not a certificate of another role.
 */
import type { X509Certificate } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import { certificateInfo } from './info';

/** Why the node certificate `socket`'s peer presented is not `expectCn`'s, or null when it is. */
export function nodePeerProblem(
  socket: TLSSocket,
  o: { caPem: string | X509Certificate; expectCn: string },
  now = new Date(),
): string | null {
  const peer = socket.getPeerCertificate();
  if (!peer?.raw) return 'the peer sent no certificate';
  const info = certificateInfo(peer.raw);
  if (!info.issuerMatches(o.caPem))
    return `the peer's certificate (CN ${info.cn ?? '?'}) is not from this cluster's CA`;
  if (now > info.notAfter || now < info.notBefore)
    return `the peer's certificate (CN ${info.cn ?? '?'}) is outside its validity`;
  if (info.cn !== o.expectCn)
    return `the peer's certificate is ${info.cn ?? 'without a CN'}'s, expected ${o.expectCn}'s`;
  // Null: issued before roles were signed into certificates (a node's, until it renews).
  if (info.role !== null && info.role !== 'node')
    return `the peer's certificate is a ${info.role} certificate named ${o.expectCn}, not the node's`;
  return null;
}

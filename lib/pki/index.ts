/** The llmgw PKI: the CA, issuing, CSR signing, the CRL, certificate checks and trust on the nodes. */
export { DEFAULT_CA_DIR, CA_VALIDITY_DAYS, caPaths, createCa, initCa, loadCa, caCertPem, type Ca } from './ca';
export {
  DEFAULT_VALIDITY_DAYS,
  issueNodeCertificate,
  issueOperatorCertificate,
  issueClientCertificate,
  type ClientRole,
  signNodeCsr,
  issueServerCertificate,
  renewAt,
  type Issued,
  type IssueOptions,
} from './issue';
export { CRL_VALIDITY_DAYS, buildCrl, crlRefreshAt, type Crl } from './crl';
export { certificateInfo, type CertificateInfo } from './info';
export { nodePeerProblem } from './peer';
export { NODE_CA_PATH, trustInstallPlan, type TrustInstallPlan } from './trust';
export { checkNodeId } from './node-id';
export { parseCertificatePem, parseCsrPem, parsePrivateKeyPem } from './pem';
export { randomSerial } from './serial';
export { CA_KEY_BITS, NODE_KEY_BITS, MIN_KEY_BITS, generateRsaKey } from './keys';
export { makeNodeCsr, makeNodeCsrAsync } from './csr';

/** Contract of the CA workflows: how the control plane reaches the llmgw-ca worker when the CA key is not on its host. */
import type { IssuedCertificate } from '../../activities/ca';
import type { NodeId } from '../../lib/types';

export interface RenewInput {
  csrPem: string;
  /** the node id the control plane authenticated: its connection's CN, never the CSR's subject */
  identity: NodeId;
  /** the serial of the certificate that connection presented */
  presentedSerial: string;
}

export type RenewResult = IssuedCertificate;

export interface PublishCrlInput {
  /** what asked for it, e.g. "revoke gpu-01" (shown in the workflow's details) */
  why: string;
}

export interface PublishCrlResult {
  number: string;
  nextUpdate: string;
  revoked: number;
}

/** Trust on a node: the plan that puts the CA root where the system and Node trust it (onboarding runs it). */
import { parseCertificatePem } from './pem';

/** Where the CA root goes: update-ca-certificates picks up `*.crt` files from this directory. */
export const NODE_CA_PATH = '/usr/local/share/ca-certificates/llmgw-ca.crt';

export interface TrustInstallPlan {
  files: { path: string; content: string; mode: number }[];
  /** each an argv, run in order as root */
  commands: string[][];
  /** lines for the [Service] section of llmgw's systemd unit (Node reads its own CA list, not the system's) */
  unitLines: string[];
}

/** The plan to install `caPem` as a trusted root on a node. */
export function trustInstallPlan(caPem: string): TrustInstallPlan {
  parseCertificatePem(caPem, 'the CA certificate to install');
  const content = caPem.endsWith('\n') ? caPem : `${caPem}\n`;
  return {
    files: [{ path: NODE_CA_PATH, content, mode: 0o644 }],
    commands: [['update-ca-certificates']],
    unitLines: [`Environment=NODE_EXTRA_CA_CERTS=${NODE_CA_PATH}`],
  };
}

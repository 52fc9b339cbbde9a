/**
 * The CA workflows: run on llmgw-control, each schedules one activity on llmgw-ca, the only queue whose worker
 * holds the CA key. The control plane starts them when that key is not on its own host.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { PublishCrlInput, PublishCrlResult, RenewInput, RenewResult } from './contracts/ca';
import { caSigning, crlPublishing } from './proxies';

/** Signs a renewing node's CSR on llmgw-ca for the identity the control plane authenticated. */
export async function renewCertificate(input: RenewInput): Promise<RenewResult> {
  setCurrentDetails(`signing a renewal for **${input.identity}** (presented serial ${input.presentedSerial})`);
  return caSigning.signNodeCsr({
    csrPem: input.csrPem,
    identity: input.identity,
    presentedSerial: input.presentedSerial,
  });
}

/** Has llmgw-ca sign and write a fresh CRL (crl.pem on the CA host), e.g. right after a revocation. */
export async function publishCrl(input: PublishCrlInput): Promise<PublishCrlResult> {
  setCurrentDetails(`publishing a CRL: ${input.why}`);
  const crl = await crlPublishing.currentCrl();
  return { number: crl.number, nextUpdate: crl.nextUpdate, revoked: crl.revoked };
}

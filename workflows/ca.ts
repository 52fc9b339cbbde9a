/**
 * The CA workflows: run on llmgw-control, each schedules one activity on llmgw-ca, the only queue whose worker
 * holds the CA key. The control plane starts them when that key is not on its own host.
 */
import { proxyActivities, setCurrentDetails } from '@temporalio/workflow';
import type { CaOperations } from '../activities/ca';
import { QUEUES } from '../lib/names';
import type { PublishCrlInput, PublishCrlResult, RenewInput, RenewResult } from './contracts/ca';

/**
 * A renewal is waited for by the agent's HTTP request: give up within a minute (the agent retries a failed
 * renewal every minute, with its old certificate still valid). Refusals (a bad CSR, a revoked serial) fail at once.
 */
const signing = proxyActivities<CaOperations>({
  taskQueue: QUEUES.ca,
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '1m',
  retry: { initialInterval: '1s', maximumInterval: '5s' },
});

/** A CRL after a revocation: worth retrying until the CA worker is back (the revocation itself is already in MySQL). */
const publishing = proxyActivities<CaOperations>({
  taskQueue: QUEUES.ca,
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '1d',
  retry: { initialInterval: '1s', maximumInterval: '1m' },
});

/** Signs a renewing node's CSR on llmgw-ca for the identity the control plane authenticated. */
export async function renewCertificate(input: RenewInput): Promise<RenewResult> {
  setCurrentDetails(`signing a renewal for **${input.identity}** (presented serial ${input.presentedSerial})`);
  return signing.signNodeCsr({ csrPem: input.csrPem, identity: input.identity, presentedSerial: input.presentedSerial });
}

/** Has llmgw-ca sign and write a fresh CRL (crl.pem on the CA host), e.g. right after a revocation. */
export async function publishCrl(input: PublishCrlInput): Promise<PublishCrlResult> {
  setCurrentDetails(`publishing a CRL: ${input.why}`);
  const crl = await publishing.currentCrl();
  return { number: crl.number, nextUpdate: crl.nextUpdate, revoked: crl.revoked };
}

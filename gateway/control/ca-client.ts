/**
 * The control plane's way to the CA when the CA key is not on its host: a workflow on llmgw-control whose one
 * activity runs on llmgw-ca (workflows/ca.ts). Failures come back as catalogue errors.
 */
import { ApplicationFailure, TimeoutFailure } from '@temporalio/common';
import { type Client, WorkflowFailedError } from '@temporalio/client';
import { ERRORS, type ErrorCode, LlmgwError } from '../../lib/errors';
import { QUEUES, workflowIds } from '../../lib/names';
import type { RenewedCertificate } from './contract';
import type { publishCrl, renewCertificate } from '../../workflows/ca';
import type { PublishCrlResult, RenewInput } from '../../workflows/contracts/ca';

export interface RemoteCa {
  /** Signs a renewal on llmgw-ca; a refusal there is thrown with its code (LLMGW_CERT_REFUSED, LLMGW_BAD_CSR, …). */
  renew(input: RenewInput): Promise<RenewedCertificate>;
  /**
   * Has llmgw-ca publish a fresh CRL. Resolves with it, or with null after `waitMs` while the workflow keeps
   * retrying (the CA worker is down: the CRL follows once it is back).
   */
  publishCrl(
    why: string,
    waitMs?: number,
  ): Promise<(PublishCrlResult & { workflowId: string }) | { pending: true; workflowId: string }>;
}

/** The innermost failure of a workflow's failure chain, as a catalogue error where it carries a code. */
function unwrap(err: unknown, what: string): Error {
  if (!(err instanceof WorkflowFailedError)) return err as Error;
  let cause: unknown = err.cause;
  while (
    cause instanceof Error &&
    cause.cause &&
    !(cause instanceof ApplicationFailure && cause.type && cause.type in ERRORS)
  )
    cause = cause.cause;
  if (cause instanceof ApplicationFailure && cause.type && cause.type in ERRORS)
    return new LlmgwError(cause.type as ErrorCode, cause.message);
  if (cause instanceof TimeoutFailure)
    return new LlmgwError(
      'LLMGW_CA_UNAVAILABLE',
      `${what}: the llmgw-ca worker did not answer in time (is llmgw ca-worker running on the CA host?)`,
    );
  return err;
}

/** A RemoteCa over `client`. */
export function remoteCa(client: Client): RemoteCa {
  return {
    async renew(input: RenewInput): Promise<RenewedCertificate> {
      try {
        const c = await client.workflow.execute<typeof renewCertificate>('renewCertificate', {
          taskQueue: QUEUES.control,
          workflowId: workflowIds.renewCertificate(input.identity, Date.now()),
          args: [input],
        });
        return { serial: c.serial, certPem: c.certPem, caPem: c.caPem, notAfter: c.notAfter, renewAt: c.renewAt };
      } catch (err) {
        throw unwrap(err, `renewing ${input.identity}'s certificate`);
      }
    },
    async publishCrl(why: string, waitMs = 10_000) {
      const workflowId = workflowIds.publishCrl(why.replace(/[^a-z0-9-]+/gi, '-'), Date.now());
      const handle = await client.workflow.start<typeof publishCrl>('publishCrl', {
        taskQueue: QUEUES.control,
        workflowId,
        args: [{ why }],
      });
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<{ pending: true; workflowId: string }>(
        (r) => (timer = setTimeout(() => r({ pending: true, workflowId }), waitMs)),
      );
      try {
        return await Promise.race([handle.result().then((c: PublishCrlResult) => ({ ...c, workflowId })), late]);
      } catch (err) {
        throw unwrap(err, 'publishing the CRL');
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/**
 * The node certificate's renewal: a new key and CSR at two thirds of the certificate's lifetime, the renewed
 * certificate written where the next agent start reads it, and the agent's connections moved onto it.
 */
import { renameSync, writeFileSync } from 'node:fs';
import type { ErrorBody, RenewedCertificate, RenewRequest } from '../../gateway/control/contract';
import { certificateInfo, makeNodeCsr, renewAt } from '../../lib/pki';
import type { TlsCredentials } from '../../lib/tls-client';
import { post } from './control-client';
import type { ControlPlanes } from './control-planes';
import type { AgentOptions } from './options';

/** Replaces a file whole (readers never see half of it). */
function writeAtomic(file: string, content: string, mode: number): void {
  writeFileSync(`${file}.tmp`, content, { mode });
  renameSync(`${file}.tmp`, file);
}

/**
 * Renews the node's certificate at two thirds of its lifetime: a new key made here and a CSR sent over the
 * current mTLS connection (the control plane takes the CN from that connection); then new connections present
 * the new certificate while requests in flight finish on the old ones. A failure is logged loudly with the
 * expiry and retried every minute (sooner near the end).
 */
export function startRenewal(
  control: ControlPlanes,
  opts: AgentOptions,
  closing: () => boolean,
  renewed: (creds: TlsCredentials) => void,
): { stop(): void } {
  let creds = opts.tls;
  let timer: NodeJS.Timeout | undefined;
  // A timer fires after at most ~24.8 days (2^31 ms): a longer wait is taken in steps.
  const MAX_TIMER = 2 ** 31 - 1;
  const schedule = (ms: number): void => {
    timer = setTimeout(
      () => void (ms > MAX_TIMER ? schedule(ms - MAX_TIMER) : renew()),
      Math.min(Math.max(ms, 0), MAX_TIMER),
    );
    timer.unref();
  };
  const fromNow = (): number => {
    const info = certificateInfo(creds.certPem);
    return renewAt(info.notBefore, info.notAfter).getTime() - Date.now();
  };
  const renew = async (): Promise<void> => {
    if (closing()) return;
    const info = certificateInfo(creds.certPem);
    try {
      const { csrPem, keyPem } = makeNodeCsr(opts.nodeId);
      const r = await post<RenewedCertificate & ErrorBody>(control, '/v1/agent/renew', {
        nodeId: opts.nodeId,
        csr: csrPem,
      } satisfies RenewRequest);
      if (r.status !== 200)
        throw new Error(`the control plane answered ${r.status}: ${r.body.error?.message ?? JSON.stringify(r.body)}`);
      creds = { certPem: r.body.certPem, keyPem, caPem: creds.caPem };
      if (opts.certFiles) {
        writeAtomic(opts.certFiles.key, keyPem, 0o600);
        writeAtomic(opts.certFiles.cert, r.body.certPem, 0o644);
      }
      control.use(creds);
      renewed(creds);
      opts.log('certificate renewed', {
        serial: r.body.serial,
        previous: info.serial,
        notAfter: r.body.notAfter,
        renewAt: r.body.renewAt,
      });
      schedule(fromNow());
    } catch (err) {
      const left = info.notAfter.getTime() - Date.now();
      opts.log('CERTIFICATE RENEWAL FAILED: the control plane refuses this node once its certificate expires', {
        level: 'error',
        error: (err as Error).message,
        serial: info.serial,
        expires: info.notAfter.toISOString(),
        fix: 'check the control plane log; or issue a new certificate (llmgw ca issue --node ID)',
      });
      schedule(Math.min(60_000, Math.max(1000, left / 10)));
    }
  };
  schedule(fromNow());
  return { stop: () => clearTimeout(timer) };
}

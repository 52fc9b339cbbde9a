/** `llmgw ca-worker`: the llmgw-ca worker, run on the host that holds the CA key. */
import { resolve } from 'node:path';
import { loadServerConfig } from '../config/load';
import { CRL_VALIDITY_DAYS, DEFAULT_CA_DIR } from '../lib/pki';
import { QUEUES } from '../lib/names';
import { startCaWorker } from '../workers/ca';
import { intOption, parse, UsageError } from './args';
import { startProcessMetrics } from '../workers/process-metrics';
import { announceDefaultDatabase, CONFIG_HELP, installRoleRuntime, runRole, temporalMetricsOf } from './role-process';

const CA_WORKER_USAGE = `llmgw ca-worker --config FILE [--ca-dir DIR] [--crl-days N]

Runs the llmgw-ca worker (queue llmgw-ca) on the CA's host: signs node CSRs (onboarding, and renewals the
control plane passes on), issues certificates, revokes them, and keeps DIR/crl.pem fresh — a new CRL at half
of each one's validity, well before its next-update. The CA key (DIR/ca.key) never leaves this host.
It also runs onboarding's steps (llmgw onboard-node): they ssh to the new node with this host's ssh key, as
the user running this worker, and read the --binary artefact from this host's disk.

${CONFIG_HELP}
  --ca-dir DIR    the CA directory made by llmgw ca init (default ${DEFAULT_CA_DIR})
  --crl-days N    how long each CRL is valid (default ${CRL_VALIDITY_DAYS}); it is re-issued at half of it`;

/** `llmgw ca-worker`: the llmgw-ca worker, beside the CA key. */
export async function caWorkerCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: CA_WORKER_USAGE,
    options: { config: { type: 'string' }, 'ca-dir': { type: 'string' }, 'crl-days': { type: 'string' } },
  });
  const crlDays = intOption(values['crl-days'], '--crl-days', CRL_VALIDITY_DAYS);
  if (crlDays < 1) throw new UsageError(`--crl-days must be at least 1\n\n${CA_WORKER_USAGE}`);
  await runRole(
    'ca-worker',
    async (log) => {
      const config = loadServerConfig(values.config);
      installRoleRuntime(log, temporalMetricsOf(config.metrics.caWorker));
      announceDefaultDatabase(config, log);
      const caDir = resolve(values['ca-dir'] ?? DEFAULT_CA_DIR);
      const ca = await startCaWorker({ config, caDir, crlDays, log });
      log('ca worker running', {
        queue: QUEUES.ca,
        caDir,
        temporal: config.temporal.address,
        crlNextUpdate: ca.crl().nextUpdate,
      });
      const metrics = await startProcessMetrics(config.metrics.caWorker);
      if (metrics) log('metrics listening', { url: metrics.url });
      return {
        close: async (): Promise<void> => {
          await ca.close();
          await metrics?.close();
        },
      };
    },
    { temporal: false },
  );
}

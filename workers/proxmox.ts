/**
 * The llmgw-proxmox role: a Temporal worker on the llmgw-proxmox queue running provisioning's activities. It is
 * the one process that holds the Proxmox API token (proxmox.tokenSecretFile), on whichever host the operator
 * trusts with it; nothing else needs Proxmox credentials.
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import { createProxmoxActivities } from '../activities/proxmox';
import type { ServerConfig } from '../config/types';
import { LlmgwError } from '../lib/errors';
import { QUEUES } from '../lib/names';
import { connectTemporal } from '../lib/temporal-connect';
import { Proxmox, proxmoxConnection } from '../lib/proxmox/client';

export interface ProxmoxWorkerOptions {
  config: Pick<ServerConfig, 'temporal' | 'proxmox'>;
  /** how often tasks and VM states are polled, ms (default 1000) */
  pollMs?: number;
  lockBackoffMs?: number;
  log?: (msg: string, fields: Record<string, unknown>) => void;
}

export interface ProxmoxWorker {
  /** what Proxmox said its version is, at start */
  version: string;
  close(): Promise<void>;
}

/** Starts the worker; resolves once Proxmox answered (token and TLS checked) and the worker polls. */
export async function startProxmoxWorker(opts: ProxmoxWorkerOptions): Promise<ProxmoxWorker> {
  const log = opts.log ?? ((): void => undefined);
  const cfg = opts.config.proxmox;
  if (!cfg)
    throw new LlmgwError(
      'LLMGW_CONFIG_INVALID',
      'server.yaml has no proxmox section: add one (url, node, tokenId, tokenSecretFile, ca, storage, image, bridge; see config/server.example.yaml and docs/provisioning.md)',
    );
  const proxmox = new Proxmox(proxmoxConnection(cfg));
  let version: string;
  try {
    // Fails now, naming the fix (token, CA, address), rather than at the first provisioning.
    version = (await proxmox.version()).version;
  } catch (err) {
    await proxmox.close();
    throw err;
  }
  log('proxmox reachable', { url: cfg.url, version, node: cfg.node });
  const connection = await connectTemporal(opts.config.temporal, (options) => NativeConnection.connect(options)).catch(
    async (err: unknown) => {
      await proxmox.close();
      throw err;
    },
  );
  const worker = await Worker.create({
    connection,
    namespace: opts.config.temporal.namespace,
    taskQueue: QUEUES.proxmox,
    // The steps heartbeat what they wait for; the CLI and the UI show it within a second.
    maxHeartbeatThrottleInterval: '1s',
    defaultHeartbeatThrottleInterval: '1s',
    activities: createProxmoxActivities({
      proxmox,
      pollMs: opts.pollMs,
      lockBackoffMs: opts.lockBackoffMs,
      log: (m, f) => log(m, f ?? {}),
    }),
  });
  const running = worker.run();
  return {
    version,
    async close(): Promise<void> {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      await proxmox.close();
    },
  };
}

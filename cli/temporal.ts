/** How CLI commands reach Temporal: one client per command, the UI link of a workflow, Ctrl-C as "detach". */
import type { Client } from '@temporalio/client';
import type { ServerConfig } from '../config/types';
import { connectTemporal } from '../lib/temporal-connect';

export { workflowLink } from '../lib/workflow-starts';

/**
 * The Temporal client library, loaded on first use: a command that never reaches Temporal (ctl nodes, every --help)
 * starts without it (~0.7 s of module loading on two busy cores).
 */
/* eslint-disable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */
export function temporalSdk(): typeof import('@temporalio/client') {
  return require('@temporalio/client') as typeof import('@temporalio/client');
}
/* eslint-enable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */

/** A Temporal client for server.yaml's temporal section; a failure names the key to fix (lib/temporal-connect.ts). */
export async function temporalClient(config: ServerConfig): Promise<{ client: Client; close: () => Promise<void> }> {
  const { Client, Connection } = temporalSdk();
  const connection = await connectTemporal(config.temporal, (options) =>
    Connection.connect({ ...options, connectTimeout: 5000 }),
  );
  return { client: new Client({ connection, namespace: config.temporal.namespace }), close: () => connection.close() };
}

/** Runs `fn` with a Temporal client; Ctrl-C aborts `signal` (the command then detaches, the workflow goes on). */
export async function withTemporalClient<T>(
  config: ServerConfig,
  fn: (client: Client, signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const { client, close } = await temporalClient(config);
  const detach = new AbortController();
  const onSigint = (): void => detach.abort();
  process.on('SIGINT', onSigint);
  try {
    return await fn(client, detach.signal);
  } finally {
    process.off('SIGINT', onSigint);
    await close();
  }
}

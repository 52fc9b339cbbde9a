/** The metrics of a role with no series of its own: its process' (CPU, memory, event loop). */
import { collectDefaultMetrics, Registry } from 'prom-client';
import { startMetricsListener, type MetricsListener } from '../gateway/metrics';

/** Serves the process' series of a role (CA, Proxmox workers) at `at`, or nothing (null) when its metrics are off. */
export async function startProcessMetrics(at: { host: string; port: number } | null): Promise<MetricsListener | null> {
  if (!at) return null;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return startMetricsListener({ host: at.host, port: at.port, registry });
}

/** Tags of llmgw's VMs, with no imports: the provisionNode workflow (its sandbox has no node:* modules) uses them too. */

/** The tag naming one provisioning run (`run-<workflow run id>`); PVE tags allow [a-z0-9_+.-]. */
export function runTag(runId: string): string {
  return `run-${runId.toLowerCase().replace(/[^a-z0-9]/g, '')}`;
}

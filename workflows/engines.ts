/**
 * ensureEngines (ID `engines/<node>`): has a node install and probe the engines server.yaml names, then records
 * what it offers. Started by the control plane when a node registers and, at its own start, for every node
 * checked against other engines or another catalog than the ones it now has.
 */
import { setCurrentDetails } from '@temporalio/workflow';
import type { EnsureEnginesResult, EnsureEnginesWorkflowInput } from './contracts/engines';
import { control, nodeEngines } from './proxies';

/** Installs the named engines on the node and records each one's status. */
export async function ensureEngines(input: EnsureEnginesWorkflowInput): Promise<EnsureEnginesResult> {
  const named =
    Object.entries(input.engines)
      .map(([e, v]) => `${e} ${v || '(operator binary)'}`)
      .join(', ') || 'none';
  setCurrentDetails(`installing and probing on **${input.nodeId}**: ${named} (heartbeats say which engine and step)`);
  const statuses = await nodeEngines(input.nodeId).ensureEngines({ engines: input.engines, catalog: input.catalog });
  await control.recordEngines({ nodeId: input.nodeId, statuses, configHash: input.configHash });
  setCurrentDetails(
    `**${input.nodeId}**: ${statuses.map((s) => `${s.engine} ${s.version} ${s.state}${s.reason ? ` — ${s.reason.split('\n')[0]}` : ''}`).join('; ') || 'no engines named'}`,
  );
  return statuses;
}

/**
 * ensureEngines (ID `engines/<node>`): has a node install and probe the engines server.yaml names, then records
 * what it offers. Started by the control plane when a node registers and, at its own start, for every node
 * checked against other engines or another catalog than the ones it now has.
 */
import { proxyActivities, setCurrentDetails } from '@temporalio/workflow';
import type { ControlActivities } from '../activities/control';
import type { NodeActivities } from '../activities/node';
import { nodeQueue } from '../lib/names';
import type { EnsureEnginesResult, EnsureEnginesWorkflowInput } from './contracts/engines';

const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 10, initialInterval: '500ms', maximumInterval: '10s' },
});

/** Installs the named engines on the node and records each one's status. */
export async function ensureEngines(input: EnsureEnginesWorkflowInput): Promise<EnsureEnginesResult> {
  const named = Object.entries(input.engines).map(([e, v]) => `${e} ${v || '(operator binary)'}`).join(', ') || 'none';
  setCurrentDetails(`installing and probing on **${input.nodeId}**: ${named} (heartbeats say which engine and step)`);
  const node = proxyActivities<NodeActivities>({
    taskQueue: nodeQueue(input.nodeId),
    // A pip install of vLLM with its dependencies takes minutes; the heartbeat (every 2 s) says it is alive.
    startToCloseTimeout: '2h',
    heartbeatTimeout: '1m',
    retry: { maximumAttempts: 3, initialInterval: '5s' },
  });
  const statuses = await node.ensureEngines({ engines: input.engines, catalog: input.catalog });
  await control.recordEngines({ nodeId: input.nodeId, statuses, configHash: input.configHash });
  setCurrentDetails(`**${input.nodeId}**: ${statuses.map((s) => `${s.engine} ${s.version} ${s.state}${s.reason ? ` — ${s.reason.split('\n')[0]}` : ''}`).join('; ') || 'no engines named'}`);
  return statuses;
}

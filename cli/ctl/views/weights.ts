/**
 * `llmgw ctl weights`: the weights fetches under way (read from Temporal: each running fetchWeights activity's
 * last heartbeat — bytes, total, rate, source) and the copies each node's cache holds (the control plane's
 * table). `ctl deploy` prints the same progress lines while it waits.
 */
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { WeightsHeartbeat } from '../../../activities/node/weights';
import type { WeightCopy } from '../../../lib/store/weights';
import { formatBytes, formatProgress, isWeightsProgress } from '../../../lib/weights/progress';
import { ago, table } from '../../table';

/** One fetchWeights activity in flight. */
export interface WeightsFetch {
  workflowId: string;
  attempt: number;
  /** its last heartbeat (null before the first one arrived) */
  progress: WeightsHeartbeat | null;
  lastHeartbeat: Date | null;
  /** the previous attempt's failure, when it is being retried */
  lastFailure: string | null;
}

/**
 * The fetchWeights activities pending in running workflows of `types` (default the replica workflow), optionally
 * of one model (its search attribute).
 */
export async function weightsFetches(
  client: Client,
  o: { types?: string[]; model?: string } = {},
): Promise<WeightsFetch[]> {
  const types = (o.types ?? ['replica']).map((t) => `'${t}'`).join(', ');
  const query = `ExecutionStatus = 'Running' AND WorkflowType IN (${types})${o.model ? ` AND LlmgwModel = '${o.model.replace(/'/g, '')}'` : ''}`;
  const out: WeightsFetch[] = [];
  for await (const wf of client.workflow.list({ query })) {
    const desc = await client.workflow
      .getHandle(wf.workflowId, wf.runId)
      .describe()
      .catch(() => null);
    for (const a of desc?.raw.pendingActivities ?? []) {
      if (a.activityType?.name !== 'fetchWeights') continue;
      const payload = a.heartbeatDetails?.payloads?.[0];
      const decoded: unknown = payload ? defaultPayloadConverter.fromPayload(payload) : null;
      const seconds = a.lastHeartbeatTime?.seconds;
      out.push({
        workflowId: wf.workflowId,
        attempt: a.attempt ?? 1,
        progress: isWeightsProgress(decoded) ? (decoded as WeightsHeartbeat) : null,
        lastHeartbeat: seconds === undefined || seconds === null ? null : new Date(Number(seconds) * 1000),
        lastFailure: a.lastFailure?.message ?? null,
      });
    }
  }
  return out;
}

/** One line for a fetch in flight: "sim-a tiny (replica/tiny-0): downloading from origin: …". */
export function formatFetch(f: WeightsFetch, now = Date.now()): string {
  const p = f.progress;
  const head = p ? `${p.node} ${p.model} (${f.workflowId})` : f.workflowId;
  const body = p ? formatProgress(p) : 'waiting for its first heartbeat';
  const retry = f.attempt > 1 ? ` — attempt ${f.attempt}${f.lastFailure ? `, last: ${f.lastFailure}` : ''}` : '';
  const stale =
    f.lastHeartbeat && now - f.lastHeartbeat.getTime() > 10_000
      ? ` (last heartbeat ${ago(f.lastHeartbeat.getTime(), now)})`
      : '';
  return `${head}: ${body}${retry}${stale}`;
}

/** The whole `ctl weights` view. */
export function formatWeights(fetches: WeightsFetch[], copies: WeightCopy[], now = Date.now()): string {
  const inFlight = fetches.length ? `${fetches.map((f) => `  ${formatFetch(f, now)}`).join('\n')}\n` : '  none\n';
  const held = copies.length
    ? table(
        ['NODE', 'SIZE', 'SHA256', 'VERIFIED', 'STORED', 'URL'],
        copies.map((c) => [
          c.nodeId,
          formatBytes(c.size),
          `${c.sha256.slice(0, 12)}…`,
          c.verified ? 'yes' : 'no (no sha256 in the catalog)',
          ago(Date.parse(c.storedAt), now),
          c.url,
        ]),
      )
    : 'none\n';
  return `FETCHING\n${inFlight}\nCACHED ON NODES\n${held}`;
}

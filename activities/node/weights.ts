/**
 * `fetchWeights` on a node's queue: makes a model's weights available on this node before its shard starts and
 * returns the path to give the engine (ShardLaunch.modelPath). Heartbeats its progress every second (bytes done,
 * total, rate: the Temporal UI shows them on the pending activity, `llmgw ctl weights` prints them); a failure is
 * a typed ApplicationFailure naming the URL and the cause, non-retryable where no retry can fix it.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import type { ErrorCode, LlmgwError } from '../../lib/errors';
import type { WeightsCache } from '../../lib/weights/cache';
import type { WeightsProgress } from '../../lib/weights/progress';

export interface FetchWeightsInput {
  model: string;
  /** the catalog's source: a URL (fetched into the cache), a path on the node, sim://, or an engine-resolved id */
  source: string;
  /** the catalog's sha256 of the file, verified before it is used */
  sha256?: string;
  /** for logs and the heartbeat */
  replicaId?: string;
}

export interface FetchWeightsResult {
  /** give this to the engine (ShardLaunch.modelPath) */
  path: string;
  /** none: sim:// or an id the engine resolves; local: a path found on the node; cached: fetched before; fetched: now */
  how: 'none' | 'local' | 'cached' | 'fetched';
  /** `origin` or `peer <node>` (fetched, cached); null otherwise */
  from: string | null;
  size: number | null;
  sha256: string | null;
  /** true when the file matched the catalog's sha256 */
  verified: boolean;
  /** bytes received by this fetch (0 unless fetched) */
  transferred: number;
  /** bytes of a partial file that this fetch continued from */
  resumedFrom: number;
  ms: number;
  /** this call joined a download another call had started */
  shared: boolean;
}

/** What each fetchWeights heartbeat carries. */
export interface WeightsHeartbeat extends WeightsProgress {
  node: string;
  model: string;
  replicaId: string | null;
}

const WEIGHTS_CODES: readonly ErrorCode[] = [
  'LLMGW_WEIGHTS_FETCH_FAILED',
  'LLMGW_WEIGHTS_SHA_MISMATCH',
  'LLMGW_WEIGHTS_DISK_FULL',
  'LLMGW_WEIGHTS_NOT_FOUND',
];

export interface WeightsActivityDeps {
  nodeId: string;
  cache: WeightsCache;
  /** how often progress is heartbeated, ms (default 1000; the worker throttles to its own interval too) */
  heartbeatMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** Builds the weights activity of one node. */
export function createWeightsActivities(deps: WeightsActivityDeps) {
  const log = deps.log ?? ((): void => undefined);
  return {
    /** Makes `input.source` available on this node; see the module comment. */
    async fetchWeights(input: FetchWeightsInput): Promise<FetchWeightsResult> {
      const ctx = Context.current();
      const started = Date.now();
      let beat: WeightsHeartbeat = {
        phase: 'checking',
        key: '',
        url: input.source,
        from: '-',
        bytesDone: 0,
        total: null,
        rateBps: 0,
        resumedFrom: 0,
        waiters: 1,
        node: deps.nodeId,
        model: input.model,
        replicaId: input.replicaId ?? null,
      };
      ctx.heartbeat(beat);
      const timer = setInterval(() => ctx.heartbeat(beat), deps.heartbeatMs ?? 1000);
      try {
        const r = await deps.cache.ensure(
          { source: input.source, sha256: input.sha256 },
          {
            signal: ctx.cancellationSignal,
            onProgress: (p) => void (beat = { ...beat, ...p }),
          },
        );
        ctx.heartbeat(beat);
        const ms = Date.now() - started;
        switch (r.kind) {
          case 'none':
          case 'local':
            return {
              path: r.path,
              how: r.kind,
              from: null,
              size: null,
              sha256: null,
              verified: false,
              transferred: 0,
              resumedFrom: 0,
              ms,
              shared: false,
            };
          case 'cached':
            return {
              path: r.path,
              how: 'cached',
              from: r.file.from,
              size: r.file.size,
              sha256: r.file.sha256,
              verified: r.file.verified,
              transferred: 0,
              resumedFrom: 0,
              ms,
              shared: false,
            };
          case 'fetched':
            log('weights fetched', {
              model: input.model,
              replica: input.replicaId,
              from: r.file.from,
              size: r.file.size,
              transferred: r.transferred,
              resumedFrom: r.resumedFrom,
              ms,
              shared: r.shared,
            });
            return {
              path: r.path,
              how: 'fetched',
              from: r.file.from,
              size: r.file.size,
              sha256: r.file.sha256,
              verified: r.file.verified,
              transferred: r.transferred,
              resumedFrom: r.resumedFrom,
              ms,
              shared: r.shared,
            };
          default: {
            const never: never = r;
            throw new Error(`unknown result ${String(never)}`);
          }
        }
      } catch (err) {
        if (ctx.cancellationSignal.aborted)
          throw new CancelledFailure(
            `weights fetch of ${input.source} on ${deps.nodeId} cancelled (the download stops when no one else waits for it; its partial file is kept)`,
          );
        const e = err as LlmgwError;
        if (!WEIGHTS_CODES.includes(e.code)) throw err;
        log('weights fetch failed', { model: input.model, replica: input.replicaId, code: e.code, error: e.message });
        throw ApplicationFailure.create({
          type: e.code,
          message: `${deps.nodeId}: ${e.message}`,
          nonRetryable: e.context.retryable === false,
          details: [{ ...e.context, node: deps.nodeId, progress: beat }],
        });
      } finally {
        clearInterval(timer);
      }
    },
  };
}

export type WeightsActivities = ReturnType<typeof createWeightsActivities>;

/** Activities on a node's own queue (`node-<id>`): supervising the engine processes of its shards. */
import { spawn } from 'node:child_process';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { buildEngineCommand, type ShardLaunch } from '../../lib/engines/command';
import { hasExited, stopProcess } from '../../lib/process';
import type { EngineName } from '../../lib/types';
import type { ErrorCode } from '../../lib/errors';

export interface NodeDeps {
  nodeId: string;
  /** The argv prefix that runs an engine on this node (sim: the sim engine entrypoint). */
  engineArgv: (engine: EngineName) => string[];
  /** Grace between SIGTERM and SIGKILL when a shard is stopped, ms. */
  stopGraceMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface RunShardInput extends ShardLaunch {
  replicaId: string;
}

/** What each heartbeat of a running shard carries (shown in the Temporal UI). */
export interface ShardHeartbeat {
  pid: number | undefined;
  state: 'running';
  since: string;
  command: string;
}

const TAIL_BYTES = 4000;

/** Builds the node activities for one node. */
export function createNodeActivities(deps: NodeDeps) {
  const log = deps.log ?? ((): void => undefined);
  const stopGraceMs = deps.stopGraceMs ?? 15_000;

  return {
    /**
     * Runs one shard's engine process for as long as the replica wants it: heartbeats every second,
     * fails with `LLMGW_ENGINE_EXITED` (exit code and stderr tail; no retry, the replica rebuilds) if the
     * process dies, and stops it (SIGTERM, then SIGKILL after a grace) when cancelled.
     */
    async runShard(input: RunShardInput): Promise<void> {
      const ctx = Context.current();
      const cmd = buildEngineCommand(input);
      const [bin, ...prefix] = deps.engineArgv(cmd.engine);
      if (!bin) throw ApplicationFailure.nonRetryable(`engine ${cmd.engine} is not installed on node ${deps.nodeId}`, 'LLMGW_ENGINE_MISSING' satisfies ErrorCode);
      const child = spawn(bin, [...prefix, ...cmd.args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let tail = '';
      const keep = (b: Buffer): void => {
        tail = (tail + b.toString('utf8')).slice(-TAIL_BYTES);
      };
      child.stdout?.on('data', keep);
      child.stderr?.on('data', keep);
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>((resolve) => {
        child.once('error', (error) => resolve({ code: null, signal: null, error }));
        child.once('exit', (code, signal) => resolve({ code, signal }));
      });
      const beat: ShardHeartbeat = { pid: child.pid, state: 'running', since: new Date().toISOString(), command: `${cmd.engine} ${cmd.args.join(' ')}` };
      log('shard started', { replica: input.replicaId, rank: input.rank, pid: child.pid, port: input.port });
      ctx.heartbeat(beat);
      const timer = setInterval(() => ctx.heartbeat(beat), 1000);
      try {
        const outcome = await Promise.race([
          exited.then((o) => ({ kind: 'exited' as const, ...o })),
          ctx.cancelled.then(
            () => ({ kind: 'cancelled' as const, err: undefined as unknown }),
            (err: unknown) => ({ kind: 'cancelled' as const, err }),
          ),
        ]);
        if (outcome.kind === 'exited') {
          const how = outcome.error ? `could not start (${outcome.error.message})` : outcome.signal ? `was killed by ${outcome.signal}` : `exited with code ${outcome.code}`;
          const msg = `engine ${cmd.engine} for ${input.replicaId} rank ${input.rank} on ${deps.nodeId} ${how}; last output:\n${tail.trim().split('\n').slice(-15).join('\n')}`;
          log('shard exited', { replica: input.replicaId, rank: input.rank, code: outcome.code, signal: outcome.signal });
          throw ApplicationFailure.create({ message: msg, type: 'LLMGW_ENGINE_EXITED' satisfies ErrorCode, nonRetryable: true, details: [{ code: outcome.code, signal: outcome.signal, stderrTail: tail }] });
        }
        // Cancelled: stop the engine, then report the cancellation.
        await stopProcess(child, stopGraceMs);
        log('shard stopped', { replica: input.replicaId, rank: input.rank });
        throw outcome.err instanceof Error ? outcome.err : new CancelledFailure('shard stopped');
      } finally {
        clearInterval(timer);
        if (!hasExited(child)) await stopProcess(child, stopGraceMs);
      }
    },
  };
}

export type NodeActivities = ReturnType<typeof createNodeActivities>;

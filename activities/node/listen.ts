/**
 * waitListening: on a worker rank's own node, until its engine accepts connections on its port. The replica runs it
 * before rank 0 of an engine whose rank 0 connects to its workers at start (llama.cpp's `--rpc`, which fails at once
 * on a worker that is not listening yet). Here, because the worker's node holds its engine's record and log: a
 * worker that exited or never listens fails the replica in its own words.
 */
import { connect } from 'node:net';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { logTail, readEngineExit, shardKey } from '../../lib/engine-state';
import type { ErrorCode } from '../../lib/errors';

/** Which rank's engine, where it should listen, and how long it may take. */
export interface WaitListeningInput {
  replicaId: string;
  generation: number;
  rank: number;
  host: string;
  port: number;
  timeoutS: number;
}

const TAIL_LINES = 15;

/** True when `host:port` accepts a TCP connection within a second. */
export function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 1000 });
    const done = (ok: boolean): void => {
      s.destroy();
      resolve(ok);
    };
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
    s.once('timeout', () => done(false));
  });
}

/** Builds waitListening over the node's engine state dir. */
export function createListenActivities(deps: { nodeId: string; stateDir: string }) {
  return {
    /**
     * Resolves once the rank's engine listens on its port (ms waited); fails with its exit and output tail when it
     * exited, or with LLMGW_RANK_NOT_LISTENING (its output tail) when it did not listen within `timeoutS`.
     */
    async waitListening(input: WaitListeningInput): Promise<{ waitedMs: number }> {
      const ctx = Context.current();
      const key = shardKey(input.replicaId, input.generation, input.rank);
      const where = `rank ${input.rank} of ${input.replicaId} on ${deps.nodeId} (${input.host}:${input.port})`;
      const started = Date.now();
      for (;;) {
        if (await accepts(input.host, input.port)) return { waitedMs: Date.now() - started };
        const exit = readEngineExit(deps.stateDir, key);
        if (exit) {
          throw ApplicationFailure.create({
            type: 'LLMGW_ENGINE_EXITED' satisfies ErrorCode,
            nonRetryable: true,
            message: `${where} exited (code ${exit.code}${exit.signal ? `, ${exit.signal}` : ''}) before it listened; last output:\n${logTail(deps.stateDir, key, TAIL_LINES)}`,
          });
        }
        if (Date.now() - started > input.timeoutS * 1000) {
          throw ApplicationFailure.create({
            type: 'LLMGW_RANK_NOT_LISTENING' satisfies ErrorCode,
            nonRetryable: true,
            message: `${where} did not listen within ${input.timeoutS}s, so rank 0 was not started; last output:\n${logTail(deps.stateDir, key, TAIL_LINES) || '(none: the engine did not start)'}`,
          });
        }
        ctx.heartbeat(`waiting for ${where} to listen (${Math.round((Date.now() - started) / 1000)} s)`);
        await new Promise((r) => setTimeout(r, 200));
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? new Error('cancelled');
      }
    },
  };
}

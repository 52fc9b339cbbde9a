/** Contract of the drainNode workflow. */
import { defineQuery } from '@temporalio/workflow';
import type { NodeId, ReplicaId } from '../../lib/types';

export interface DrainInput {
  nodeId: NodeId;
  /** Give up (the node stays cordoned) after this long; null waits for as long as it takes. */
  timeoutS: number | null;
}

export interface DrainProgress {
  nodeId: NodeId;
  phase: 'cordoning' | 'moving' | 'done' | 'timed-out';
  /** Replicas moved off so far, and how many there were in all (grows if one lands there meanwhile). */
  moved: number;
  total: number;
  /** The replica moving now, its replacement and what the replacement is doing. */
  current: { replicaId: ReplicaId; replacement: ReplicaId | null; state: string | null; reason: string | null } | null;
}

export interface DrainResult {
  nodeId: NodeId;
  moved: ReplicaId[];
}

export const drainProgressQuery = defineQuery<DrainProgress>('drainProgress');

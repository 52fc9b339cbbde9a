/** Contract of the replica workflow: input, signals, queries. */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { Profile, ReplicaId, ReplicaState, ShardAssignment } from '../../lib/types';

export interface ReplicaInput {
  replicaId: ReplicaId;
  model: string;
  source: string;
  /** the catalog's sha256 of a URL source's file: fetchWeights verifies it on each node */
  sha256?: string;
  profile: Profile;
  /** the model's profiles in catalog order: each placement takes the first that fits (absent: `profile` alone) */
  profiles?: Profile[];
  /** the catalog spec's hash the replica was started from (a deployment rolls replicas of an older one) */
  specHash?: string;
  /** how long the engine may take to serve once its weights are in place (the catalog's startTimeoutS) */
  startTimeoutS?: number;
  /** rebuilds so far, carried across continue-as-new */
  rebuilds?: number;
}

export interface ReplicaStatus {
  state: ReplicaState;
  reason: string | null;
  endpoint: string | null;
  shards: ShardAssignment[];
  rebuilds: number;
}

/** Ask the replica to stop: it leaves the routing table, drains, stops its shards and ends. */
export const stopSignal = defineSignal('stop');
/** Nodes changed (one registered, uncordoned): a waiting replica tries placement again now. */
export const nodesChangedSignal = defineSignal('nodesChanged');
/** The control plane found a node gone by every signal (docs/operations.md): a replica placed there rebuilds elsewhere now. */
export const nodeLostSignal = defineSignal<[{ nodeId: string; why: string }]>('nodeLost');
/** A node's agent crashed and a new one registered: the replica's shards there run again, and the new agent adopts their engines. */
export const agentRestartedSignal = defineSignal<[{ nodeId: string }]>('agentRestarted');
export const statusQuery = defineQuery<ReplicaStatus>('status');

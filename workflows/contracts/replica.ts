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
export const statusQuery = defineQuery<ReplicaStatus>('status');

/** Contract of the modelDeployment workflow. */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { ReplicaId } from '../../lib/types';

export interface ModelDeploymentInput {
  model: string;
  /** carried across continue-as-new */
  state?: ModelDeploymentState;
}

export interface ModelDeploymentState {
  desired: number | null;
  replicas: ReplicaId[];
  nextIndex: number;
  /** Replacements in progress: the new replica serves first, then the old one stops. */
  replacing?: Replacement[];
  /** specHash (lib/catalog.ts) of the catalog spec its replicas are started with */
  specHash?: string;
  /** replicas started with an older spec, rolled one at a time (make before break) */
  stale?: ReplicaId[];
  /** removed from the catalog (ctl apply --prune): scaled to 0, then the model is forgotten and the workflow ends */
  retiring?: boolean;
}

export interface Replacement {
  old: ReplicaId;
  new: ReplicaId;
  why: string;
  /** the old one was stopped before the new one served (a drain with --allow-downtime) */
  stopFirst?: boolean;
}

/**
 * Replace one replica (make before break): start a new one, and stop the old one once the new one serves.
 * `stopFirst` on a replacement already asked for: stop the old one now (the new one cannot be placed beside it).
 */
export const replaceSignal = defineSignal<[{ replicaId: ReplicaId; why: string; stopFirst?: boolean }]>('replace');
/**
 * Withdraw a replacement: its original left the node by itself (rebuilt elsewhere after a failure), or the drain
 * was cancelled, so a replacement that does not serve yet is stopped and the original keeps its place. One that
 * serves completes; a stop-first one stays (its original is already stopping).
 */
export const withdrawReplaceSignal = defineSignal<[{ replicaId: ReplicaId; why: string }]>('withdrawReplace');
/** The catalog spec may have changed (ctl apply): the deployment reloads it and rolls replicas of an older one. */
export const catalogChangedSignal = defineSignal('catalogChanged');
/** The model left the catalog (ctl apply --prune): stop every replica, forget the model once they stopped, end. */
export const retireSignal = defineSignal('retire');
/** Sent by a child replica each time it becomes ready. */
export const replicaReadySignal = defineSignal<[ReplicaId]>('replicaReady');

/** Set the desired number of replicas; returns the new count. */
export const scaleUpdate = defineUpdate<number, [number]>('scale');
export const deploymentQuery = defineQuery<ModelDeploymentState>('deployment');

/** Contract of the modelDeployment workflow. */
import { defineQuery, defineUpdate } from '@temporalio/workflow';

export interface ModelDeploymentInput {
  model: string;
  /** carried across continue-as-new */
  state?: ModelDeploymentState;
}

export interface ModelDeploymentState {
  desired: number | null;
  replicas: string[];
  nextIndex: number;
}

/** Set the desired number of replicas; returns the new count. */
export const scaleUpdate = defineUpdate<number, [number]>('scale');
export const deploymentQuery = defineQuery<ModelDeploymentState>('deployment');

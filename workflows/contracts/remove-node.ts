/** Contract of the removeNode workflow (`remove-node/<node>`): its input, steps, progress query and result. */
import { defineQuery } from '@temporalio/workflow';
import type { NodeId } from '../../lib/types';
import type { StepLine } from './provision';

/** How the CA host reaches the node over ssh to stop its agent (as onboarding did to start it). */
export interface RemoveNodeSsh {
  /** null: no address is known (the node never registered one): the agent is not stopped */
  addr: string | null;
  port: number;
  user: string;
  /** the private key on the CA host (absolute path) */
  keyPath: string;
}

/** What `llmgw ctl remove-node` starts the workflow with. */
export interface RemoveNodeInput {
  nodeId: NodeId;
  ssh: RemoveNodeSsh;
  /** also remove the node's VM through llmgw-proxmox: only a VM llmgw created (its name and the llmgw tag) */
  destroyVm: boolean;
  /** remove it even if a model loses its last replica (its replicas move stop-first, or stop and wait elsewhere) */
  force: boolean;
}

/** The steps, in order: each is an activity on the queue whose access it needs, the drain a child workflow. */
export const REMOVE_STEPS = [
  { id: 'check', title: 'check what it holds' },
  { id: 'drain', title: 'drain its replicas' },
  { id: 'stopAgent', title: 'stop the agent' },
  { id: 'revoke', title: 'revoke its certificates' },
  { id: 'forget', title: 'forget its host keys and records' },
  { id: 'destroyVm', title: 'remove its VM' },
] as const;

/** A step's id. */
export type RemoveStepId = (typeof REMOVE_STEPS)[number]['id'];

/** The steps so far, for the CLI and the UI (its progress query). */
export interface RemoveNodeProgress {
  nodeId: NodeId;
  steps: StepLine[];
}

/** Every step's outcome and the time it all took. */
export interface RemoveNodeResult {
  nodeId: NodeId;
  steps: StepLine[];
  totalMs: number;
}

/** The removal's progress, step by step. */
export const removeNodeProgressQuery = defineQuery<RemoveNodeProgress>('removeNodeProgress');

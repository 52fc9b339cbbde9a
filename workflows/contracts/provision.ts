/** Contract of provisionNode (`provision/<node>`) and addNode (`add-node/<node>`): inputs, steps, progress, results. */
import { defineQuery } from '@temporalio/workflow';
import type { NodeId } from '../../lib/types';
import type { OnboardInput, OnboardResult, StepProgress, StepResult } from './onboard';

export interface ProvisionInput {
  nodeId: NodeId;
  vmid: number;
  /** ADDR/PREFIX */
  ip: string;
  gateway: string | null;
  nameserver: string | null;
  cores: number;
  memoryMiB: number;
  diskGiB: number;
  cpu: string;
  image: string;
  storage: string;
  bridge: string;
  /** the Proxmox node the VM is created on */
  pveNode: string;
  /** authorized_keys lines for the VM (the CA host's public key, so onboarding can log in) */
  sshKeys: string[];
  ciuser: string;
  sshPort: number;
  /** how long the started VM may take until its ssh port answers, s */
  sshDeadlineS: number;
}

export const PROVISION_STEPS = [
  { id: 'checkVmid', title: 'check the VMID' },
  { id: 'createVm', title: 'create the VM' },
  { id: 'resizeDisk', title: 'grow the disk' },
  { id: 'startVm', title: 'start the VM' },
  { id: 'waitForSshPort', title: 'wait for its ssh port' },
] as const;

export type ProvisionStepId = (typeof PROVISION_STEPS)[number]['id'];

/** A step as the CLI and the UI show it: the same shape as onboarding's. */
export type StepLine = StepProgress<string>;

export interface ProvisionProgress {
  nodeId: NodeId;
  steps: StepLine[];
  /** set once this run created the VM (or recognised its own create after a retried request) */
  createdVmid: number | null;
}

export interface ProvisionResult {
  nodeId: NodeId;
  vmid: number;
  address: string;
  steps: StepLine[];
  totalMs: number;
  waitedMs: number;
}

/** What provisioning's activities return (a step's summary, its waiting) plus what they learnt. */
export interface ProvisionStepResult extends StepResult {
  vmid?: number;
  /** createVm: true when this run created it (a rerun of the activity finds its own VM: still true) */
  created?: boolean;
}

/** What removing a VM after a failure did. */
export interface RemoveVmResult {
  removed: boolean;
  summary: string;
}

export const provisionProgressQuery = defineQuery<ProvisionProgress>('provisionProgress');

export interface AddNodeInput {
  nodeId: NodeId;
  /** absent with --onboard-only */
  provision: ProvisionInput | null;
  /** absent with --provision-only */
  onboard: OnboardInput | null;
}

export interface AddNodeResult {
  nodeId: NodeId;
  provision: ProvisionResult | null;
  onboard: OnboardResult | null;
  totalMs: number;
}

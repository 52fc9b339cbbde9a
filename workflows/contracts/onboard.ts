/** Contract of the onboardNode workflow (`onboard/<node>`): its input, steps, progress query and result. */
import { defineQuery } from '@temporalio/workflow';
import type { OperatorBins } from '../../lib/engines/registry';
import type { NodeId } from '../../lib/types';

/** The release artefact onboarding installs (a file on the CA host, where the llmgw-ca worker reads it). */
export interface ArtefactRef {
  /** absolute path on the CA host */
  path: string;
  sha256: string;
  /** llmgw-<version>-<platform> */
  name: string;
  version: string;
  /** linux-x64 or linux-arm64 */
  platform: string;
}

export interface OnboardInput {
  nodeId: NodeId;
  /** where the CA host reaches the node over ssh */
  addr: string;
  sshPort: number;
  sshUser: string;
  /** the private key on the CA host (absolute path) */
  sshKeyPath: string;
  /** the control plane URL the agent uses */
  server: string;
  /** where engines on the node are reached (default: addr) */
  advertiseHost: string;
  /**
   * false (`--no-door`): the agent serves no node door and engines listen on advertiseHost. Absent or true: the
   * agent serves its door at `<advertiseHost>:7460` and engines listen on 127.0.0.1 (absent in onboardings started
   * before the door was the default: they get it when run again)
   */
  door?: boolean;
  fabrics: string[];
  nvidiaSmi?: string;
  noGpu: boolean;
  ibRoot?: string;
  /** the operator's engine binaries on the node, by engine (`--llamacpp-bin`, …) */
  bins: OperatorBins;
  artefact: ArtefactRef;
  /** how long to wait for ssh to answer, s (default 600) */
  sshDeadlineS: number;
  /** how long to wait for the started agent to register, s (default 120) */
  registerTimeoutS: number;
  /** how long to wait for the node's engines to be installed and probed, s (default 1800: a pip install of vLLM) */
  enginesTimeoutS?: number;
}

/** The steps, in order; each is one activity on llmgw-ca. */
export const ONBOARD_STEPS = [
  { id: 'waitForSsh', title: 'wait for ssh' },
  { id: 'learnHostKey', title: 'learn the host key' },
  { id: 'issueCertificate', title: 'issue the certificate' },
  { id: 'install', title: 'install' },
  { id: 'probeEngines', title: 'probe the engines' },
  { id: 'startAgent', title: 'start the agent' },
  { id: 'waitRegistered', title: 'wait for registration' },
  { id: 'waitEngines', title: 'install and probe its engines' },
] as const;

/** How long onboarding waits for the node's engines by default, s: installing vLLM from PyPI takes minutes. */
export const DEFAULT_ENGINES_TIMEOUT_S = 1800;

export type StepId = (typeof ONBOARD_STEPS)[number]['id'];

/** What every step's activity returns. */
export interface StepResult {
  /** one line for the terminal and the UI */
  summary: string;
  /** of the step's time, how much was spent waiting on the node (ssh coming up, its commands, the agent) */
  waitedMs: number;
  /** whether the step changed anything on the node or in the records */
  changed: boolean;
}

/** A step as the CLI and the UI show it (provisioning's steps have the same shape, with their own ids). */
export interface StepProgress<Id extends string = StepId> {
  id: Id;
  title: string;
  state: 'pending' | 'running' | 'done' | 'failed';
  summary: string | null;
  /** the step's wall time, as the workflow saw it */
  ms: number | null;
  waitedMs: number | null;
  error: string | null;
}

export interface OnboardProgress {
  nodeId: NodeId;
  steps: StepProgress[];
}

export interface OnboardResult {
  nodeId: NodeId;
  steps: StepProgress[];
  totalMs: number;
  /** of totalMs, waiting on the node; the rest is llmgw's own work (and Temporal's scheduling) */
  waitedMs: number;
  /** false when the node already was as onboarding leaves it (a rerun) */
  changed: boolean;
}

/** What a step's activity heartbeats: shown by the CLI and in the Temporal UI's pending activity. */
export interface OnboardHeartbeat {
  step: StepId;
  waitingFor: string;
}

export const onboardProgressQuery = defineQuery<OnboardProgress>('onboardProgress');

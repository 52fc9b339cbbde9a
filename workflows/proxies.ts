/**
 * Every activity proxy the workflows use, by name, with its task queue, timeouts and retries: the one place to
 * read or tune them. Proxies whose queue or deadline depends on a workflow's input are small factories.
 */
import { ActivityCancellationType, proxyActivities } from '@temporalio/workflow';
import type { CaOperations } from '../activities/ca';
import type { OffboardActivities } from '../activities/ca/offboard';
import type { OnboardActivities } from '../activities/ca/onboard';
import type { ControlActivities } from '../activities/control';
import type { NodeActivities } from '../activities/node';
import type { WeightsActivities } from '../activities/node/weights';
import type { ProxmoxActivities } from '../activities/proxmox';
import { SHARD_HEARTBEAT_TIMEOUT_S, SHARD_PICKUP_S } from '../lib/liveness';
import { QUEUES, nodeQueue } from '../lib/names';

/**
 * MySQL and placement work on llmgw-control: each call is short, and retried through a brief outage of either. The
 * waits below are on llmgw-control-wait (QUEUES.controlWait), so they never hold these calls' slots.
 */
export const control = proxyActivities<ControlActivities>({
  startToCloseTimeout: '30s',
  retry: { maximumAttempts: 10, initialInterval: '500ms', maximumInterval: '10s' },
});

/**
 * waitServing: an engine may take many minutes to load real weights, so its deadline is the model's start timeout
 * (the catalog's startTimeoutS); the heartbeat shows the poll alive. A failure — the timeout included — is the
 * replica's to handle as an engine failure, so no retry.
 */
export function serving(startTimeoutS: number): ControlActivities {
  return proxyActivities<ControlActivities>({
    taskQueue: QUEUES.controlWait,
    startToCloseTimeout: `${startTimeoutS}s`,
    heartbeatTimeout: '30s',
    retry: { maximumAttempts: 1 },
  });
}

/**
 * waitInflight: a stopping replica waits until no gateway has a request on it, up to its drain grace (server.yaml
 * drain.graceS, at most a day). The heartbeat says it is alive and what it waits for; the deadline is the replica's
 * `stopping` row in MySQL, so a retry after a lost control worker resumes the same wait.
 */
export const inflightWait = proxyActivities<ControlActivities>({
  taskQueue: QUEUES.controlWait,
  startToCloseTimeout: '25h',
  heartbeatTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

/**
 * retireModel: waits until every replica of a model removed from the catalog has stopped (each first waits for its
 * requests in flight, up to its drain grace), then forgets the model. Heartbeats while it waits.
 */
export const retirement = proxyActivities<ControlActivities>({
  taskQueue: QUEUES.controlWait,
  startToCloseTimeout: '25h',
  heartbeatTimeout: '30s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

/** moveStatus: long-polls a move's progress; heartbeats while it waits. */
export const moveWatch = proxyActivities<ControlActivities>({
  taskQueue: QUEUES.controlWait,
  startToCloseTimeout: '60s',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '1s', maximumInterval: '10s' },
});

/**
 * A renewal is waited for by the agent's HTTP request: give up within a minute (the agent retries a failed
 * renewal every minute, with its old certificate still valid). Refusals (a bad CSR, a revoked serial) fail at once.
 */
export const caSigning = proxyActivities<CaOperations>({
  taskQueue: QUEUES.ca,
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '1m',
  retry: { initialInterval: '1s', maximumInterval: '5s' },
});

/** A CRL after a revocation: worth retrying until the CA worker is back (the revocation itself is already in MySQL). */
export const crlPublishing = proxyActivities<CaOperations>({
  taskQueue: QUEUES.ca,
  startToCloseTimeout: '20s',
  scheduleToCloseTimeout: '1d',
  retry: { initialInterval: '1s', maximumInterval: '1m' },
});

/** A wait's deadline past the input's own: the activity must outlive the wait it reports on. */
const WAIT_MARGIN_S = 120;

/**
 * Each onboarding step on llmgw-ca: a dropped connection or a CA worker that died (heartbeat timeout) is retried;
 * the steps' own failures are final (non-retryable).
 */
function onboardStep(startToCloseS: number): OnboardActivities {
  return proxyActivities<OnboardActivities>({
    taskQueue: QUEUES.ca,
    startToCloseTimeout: `${startToCloseS}s`,
    heartbeatTimeout: '30s',
    retry: { initialInterval: '2s', maximumInterval: '10s', maximumAttempts: 4 },
  });
}

/** Onboarding's proxies: 10 minutes a step; the three waits get their own deadlines plus a margin. */
export function onboardProxies(input: { sshDeadlineS: number; registerTimeoutS: number; enginesTimeoutS: number }): {
  steps: OnboardActivities;
  sshWait: OnboardActivities;
  registerWait: OnboardActivities;
  enginesWait: OnboardActivities;
} {
  return {
    steps: onboardStep(600),
    sshWait: onboardStep(input.sshDeadlineS + WAIT_MARGIN_S),
    registerWait: onboardStep(input.registerTimeoutS + WAIT_MARGIN_S),
    enginesWait: onboardStep(input.enginesTimeoutS + WAIT_MARGIN_S),
  };
}

/** Each provisioning step on llmgw-proxmox, with the deadline that step needs. */
function proxmoxStep(startToCloseS: number): ProxmoxActivities {
  return proxyActivities<ProxmoxActivities>({
    taskQueue: QUEUES.proxmox,
    startToCloseTimeout: `${startToCloseS}s`,
    heartbeatTimeout: '60s',
    // A lost connection to Proxmox or a proxmox worker that died; Proxmox's own refusals are non-retryable.
    retry: { initialInterval: '2s', maximumInterval: '20s', maximumAttempts: 5 },
  });
}

/** Provisioning's proxies: 15 minutes a step, the ssh wait its own deadline plus a margin, the removal of its VM after a failure 10 minutes. */
export function provisionProxies(input: { sshDeadlineS: number }): {
  steps: ProxmoxActivities;
  sshWait: ProxmoxActivities;
  removal: ProxmoxActivities;
} {
  return {
    steps: proxmoxStep(900),
    sshWait: proxmoxStep(input.sshDeadlineS + WAIT_MARGIN_S),
    removal: proxmoxStep(600),
  };
}

/** ensureEngines on a node's own queue: installs take long, the heartbeat is what says they are alive. */
export function nodeEngines(nodeId: string): NodeActivities {
  return proxyActivities<NodeActivities>({
    taskQueue: nodeQueue(nodeId),
    // A pip install of vLLM with its dependencies takes minutes; the heartbeat (every 2 s) says it is alive.
    startToCloseTimeout: '2h',
    heartbeatTimeout: '1m',
    retry: { maximumAttempts: 3, initialInterval: '5s' },
  });
}

/** fetchWeights on a node: resumable, so retries are cheap; it heartbeats every second with bytes and rate. */
export function nodeWeights(nodeId: string): WeightsActivities {
  return proxyActivities<WeightsActivities>({
    taskQueue: nodeQueue(nodeId),
    scheduleToStartTimeout: '60s',
    // A large model over a slow link; progress is the heartbeat, not this.
    startToCloseTimeout: '24h',
    heartbeatTimeout: '30s',
    // A wrong sha256, a missing path and HTTP 4xx come back non-retryable.
    retry: { initialInterval: '2s', backoffCoefficient: 2, maximumInterval: '1m', maximumAttempts: 6 },
  });
}

/**
 * A shard runs for as long as the replica does. Its heartbeat (every SHARD_HEARTBEAT_S) and heartbeat timeout are a
 * backstop (lib/liveness.ts): a lost node is reported to the replica by the control plane within seconds, and a
 * dead engine fails the shard at once. The replica stops it with stopShard (nodeStop below), which completes it,
 * and a cancel beside it; either way it ends only once the agent has its engine gone (WAIT_CANCELLATION_COMPLETED),
 * so 'stopped' (and a rebuild's new placement) never overlaps a live engine.
 */
export function nodeShards(nodeId: string): NodeActivities {
  return proxyActivities<NodeActivities>({
    taskQueue: nodeQueue(nodeId),
    startToCloseTimeout: '3650 days',
    scheduleToStartTimeout: `${SHARD_PICKUP_S}s`,
    heartbeatTimeout: `${SHARD_HEARTBEAT_TIMEOUT_S}s`,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 1 },
  });
}

/**
 * stopShard on a node: its agent stops the shard's engine (SIGTERM, then SIGKILL after the agent's stop grace,
 * 15 s) and answers once it is gone. Not retried, and not waited for: the replica waits for the runShard to end,
 * which its cancel also brings about, a heartbeat later, where the agent is down or too old to know stopShard.
 */
export function nodeStop(nodeId: string): NodeActivities {
  return proxyActivities<NodeActivities>({
    taskQueue: nodeQueue(nodeId),
    scheduleToStartTimeout: `${SHARD_PICKUP_S}s`,
    startToCloseTimeout: '2m',
    retry: { maximumAttempts: 1 },
  });
}

/**
 * waitListening on a worker rank's node: bounded by the model's start timeout (an engine may take that long to come
 * up); the heartbeat says it is alive, and a worker that exited fails it at once with its output.
 */
export function nodeListen(nodeId: string, startTimeoutS: number): NodeActivities {
  return proxyActivities<NodeActivities>({
    taskQueue: nodeQueue(nodeId),
    scheduleToStartTimeout: `${SHARD_PICKUP_S}s`,
    startToCloseTimeout: `${startTimeoutS + 60}s`,
    heartbeatTimeout: '30s',
    retry: { initialInterval: '1s', maximumAttempts: 3 },
  });
}

/**
 * Removing a node (remove-node/<node>): stopping its agent over ssh and revoking its certificates on llmgw-ca, its
 * VM on llmgw-proxmox. A worker that is down is waited for (no schedule-to-start limit); its failures are retried.
 */
export const removal = {
  ca: proxyActivities<OffboardActivities & CaOperations>({
    taskQueue: QUEUES.ca,
    startToCloseTimeout: '5m',
    heartbeatTimeout: '1m',
    retry: { initialInterval: '2s', maximumInterval: '30s', maximumAttempts: 10 },
  }),
  proxmox: proxmoxStep(900),
};

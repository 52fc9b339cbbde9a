/**
 * Every timer that decides whether a replica is alive, in one place, with why it is what it is. llmgw rebuilds a
 * replica only on evidence that its engine is gone: the agent saw it exit, or its node is gone by every signal
 * (no agent heartbeat, no Temporal call through the door, and its engines' ports refuse a connection). Silence
 * of llmgw's own path — a control plane, the door, Temporal or MySQL down, a starved CPU — is never evidence.
 * Chosen for a saturated 2-core host; docs/operations.md ("Timers") tells operators the same.
 */

/**
 * How often an agent heartbeats the control plane: two of them fit in NODE_SILENT_MS. A beat is an HTTPS request
 * the control plane answers on its one event loop, so at 1,000 nodes beats are its largest steady cost: every
 * second before (1,000 requests a second, ~135 ms of its event loop a second in a profile), now every 2 s. Silence
 * alone is not evidence (the door's calls and the engines' ports are asked too), so two missed beats are a suspect,
 * not a rebuild; and a lost node is still judged within NODE_SILENT_MS of its last beat (2-4 s after it died, not 3-4).
 */
export const AGENT_HEARTBEAT_MS = 2000;

/**
 * A node whose agent has been silent this long — counted only while the judging control plane was itself up
 * and reading MySQL — is a suspect; it is lost only if the door saw no call from it either and none of its
 * engines' ports accepts a connection. Two missed heartbeats: a starved agent is late by milliseconds, not
 * seconds, and an agent restarting (systemd's RestartSec plus its start) leaves its engines answering.
 */
export const NODE_SILENT_MS = 4000;

/**
 * An agent silent this long while its engines still answer is not coming back (systemd restarts one within a
 * second or two, an upgrade within seconds): nothing supervises those engines, so their replicas are rebuilt.
 */
export const AGENT_LOST_MS = 30_000;

/**
 * How often a control plane writes a node's heartbeat (`last_seen`) to MySQL while the node beats it steadily. It
 * keeps each beat in memory and judges the nodes that beat it from there (NODE_SILENT_MS); MySQL's copy is for other
 * control planes, a restarted one, `ctl nodes` elsewhere and onboarding. Every beat written cost ~60 UPDATEs a
 * minute per node (at 10 nodes most of the control plane's MySQL load); now 4. Written at once besides: at
 * registration, a node's first beat at this process, a beat after a gap (NODE_BEAT_GAP_MS), or after a failed write.
 */
export const NODE_SEEN_WRITE_MS = 15_000;

/** A beat this long after the node's previous one here is written at once: the node is back (or moved here). */
export const NODE_BEAT_GAP_MS = 3000;

/**
 * How old `last_seen` in MySQL may be before the node counts as silent to a reader that did not hear its beats
 * itself (another control plane's liveness, onboarding's "seen" check): one write interval (NODE_SEEN_WRITE_MS)
 * plus a NODE_SILENT_MS margin for a write late by a slow MySQL or a starved control plane. The price: a node
 * that dies together with the control plane it beats to is judged by another one after up to ~19 s, not 4 s.
 */
export const NODE_SEEN_STALE_MS = NODE_SEEN_WRITE_MS + NODE_SILENT_MS;

/** How often the control plane looks for silent nodes. */
export const NODE_SWEEP_MS = 1000;

/**
 * How long a connection to an engine's port may take before it counts as refused: the kernel accepts a
 * connection to a listening socket without waiting for the engine's process to run, so a starved engine
 * still answers at once, while a node that is gone (powered off, network down) never does.
 */
export const ENGINE_PROBE_MS = 1000;

/**
 * How often a running shard heartbeats Temporal. Each heartbeat is a Temporal action (a persistence write, through
 * the door), paid per shard for as long as it runs, so it is rare: nothing waits on it. An engine's death fails the
 * shard at once (the agent sees the exit), a lost node is the control plane's to find (above), and a stop reaches the
 * shard by the `stopShard` activity on its node's queue, not in a heartbeat's answer. Every second before issue 24
 * (so that a cancel arrived within a second): one Temporal action a second per shard at rest; now one per 30 s.
 */
export const SHARD_HEARTBEAT_S = 30;

/**
 * A shard's Temporal heartbeat timeout: a backstop only. A lost node is found by the control plane in seconds
 * (above) and its replicas told at once; this fires only when a node's worker stopped reporting while its agent
 * and engines look alive (a wedged worker), and must outlast a Temporal or control-plane restart (a 30 s outage,
 * then reconnection backoff) so such a restart times out no shard. Five heartbeats: four in a row may be lost (an
 * outage of 90-120 s, as long as the 89 s the 90 s timeout allowed when shards heartbeat every second).
 */
export const SHARD_HEARTBEAT_TIMEOUT_S = 5 * SHARD_HEARTBEAT_S;

/**
 * How long a shard scheduled again (after its agent stopped or its heartbeat timed out) may wait for an agent to
 * take it: an agent restarting under systemd is back within seconds, an upgrade's may take a minute.
 */
export const SHARD_PICKUP_S = 60;

/** A model's start timeout when the catalog names none: loading real weights (tens to hundreds of GB) takes minutes. */
export const DEFAULT_START_TIMEOUT_S = 1800;

/** Contract of the drainNode workflow: input, progress, result, and the move status its activity reports. */
import { defineQuery, defineSignal } from '@temporalio/workflow';
import type { NodeId, ReplicaId } from '../../lib/types';

export interface DrainInput {
  nodeId: NodeId;
  /** Give up (the node stays cordoned) after this long; null waits for as long as it takes. */
  timeoutS: number | null;
  /**
   * A replica whose replacement no node can take while the original holds what it needs may move stop-first:
   * the original drains and stops, then the replacement is placed (the drain reports the downtime).
   */
  allowDowntime?: boolean;
  /**
   * remove-node --force: a replica whose replacement fits nowhere is stopped anyway (stop-first), and its move counts
   * as done once it left the node; its replacement waits for room elsewhere
   */
  force?: boolean;
}

/** The original of a move, out of routing, waiting for the requests the gateways still have in flight on it. */
export interface DrainingOriginal {
  inFlight: number;
  /** live gateways that still route it or carry one of its requests */
  gateways: number;
  graceLeftS: number;
}

/** One stop-first move: how long the replica was out of routing (original leaving → replacement serving). */
export interface MoveDowntime {
  replicaId: ReplicaId;
  replacement: ReplicaId;
  downMs: number | null;
}

/** The replica moving now, its replacement, what the replacement is doing, and what the drain waits for. */
export interface CurrentMove {
  replicaId: ReplicaId;
  replacement: ReplicaId | null;
  state: string | null;
  reason: string | null;
  draining?: DrainingOriginal | null;
  /** moved stop-first (--allow-downtime) */
  stopFirst?: boolean;
  /** what the operator can do about a wait, or what the drain decided */
  hint?: string | null;
}

export interface DrainProgress {
  nodeId: NodeId;
  phase: 'cordoning' | 'moving' | 'done' | 'timed-out' | 'cancelled';
  /** Replicas moved off so far, and how many there were in all (grows if one lands there meanwhile). */
  moved: number;
  total: number;
  current: CurrentMove | null;
  /** stop-first moves so far, with their downtime */
  downtime?: MoveDowntime[];
  /** after a cancel: what became of the move in progress */
  note?: string | null;
}

export interface DrainResult {
  nodeId: NodeId;
  moved: ReplicaId[];
  downtime?: MoveDowntime[];
}

/** What a drain learns about one replica it is moving off a node (the moveStatus activity). */
export type MoveStatus =
  /** Off the node: moved by the drain, or (leftByItself) rebuilt elsewhere first, `replacement` then unneeded */
  | { kind: 'moved'; leftByItself?: boolean; replacement?: ReplicaId | null }
  | {
      kind: 'moving';
      replacement: ReplicaId | null;
      state: string | null;
      reason: string | null;
      draining?: DrainingOriginal | null;
      /** stop-first: the original is gone, its replacement not serving yet */
      originalGone?: boolean;
    };

/** What counts as a change of a move: anything but the grace ticking down (which would wake the drain every second). */
export function moveKey(s: MoveStatus): string {
  return JSON.stringify(s.kind === 'moving' && s.draining ? { ...s, draining: { ...s.draining, graceLeftS: 0 } } : s);
}

/** `1h02m`, `9m12s`, `41s`: a duration for a progress line. */
export function shortDuration(s: number): string {
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = Math.round(s % 60);
  return h ? `${h}h${String(m).padStart(2, '0')}m` : m ? `${m}m${String(sec).padStart(2, '0')}s` : `${sec}s`;
}

/** One line saying where a drain is: the CLI prints it, the workflow shows it in the Temporal UI. */
export function formatDrainProgress(p: DrainProgress): string {
  const c = p.current;
  let now = '';
  if (c) {
    now = `; moving ${c.replicaId}${c.stopFirst ? ' stop-first' : ''} → ${c.replacement ?? '(starting a replacement)'}${c.state ? ` ${c.state}` : ''}${c.reason ? ` — ${c.reason}` : ''}`;
    const d = c.draining;
    if (d)
      now += `; waiting for ${d.inFlight} request${d.inFlight === 1 ? '' : 's'} in flight on ${c.replicaId}${d.inFlight === 0 && d.gateways ? ` (${d.gateways} gateway${d.gateways === 1 ? '' : 's'} still routing it)` : ''} (grace ${shortDuration(d.graceLeftS)} left)`;
    if (c.hint) now += ` [${c.hint}]`;
  }
  return `${p.nodeId}: ${p.phase}, moved ${p.moved} of ${p.total}${now}${downtimeText(p.downtime)}${p.note ? `; ${p.note}` : ''}`;
}

/** `; sim-large-1 was out of routing 4.2s (moved stop-first to sim-large-2)` for each stop-first move. */
export function downtimeText(d: MoveDowntime[] | undefined): string {
  return (d ?? [])
    .map(
      (x) =>
        `; ${x.replicaId} was out of routing ${x.downMs === null ? 'for an unknown time' : `${(x.downMs / 1000).toFixed(1)}s`} (moved stop-first to ${x.replacement})`,
    )
    .join('');
}

export const drainProgressQuery = defineQuery<DrainProgress>('drainProgress');
/** A running drain may move stop-first from now on (`ctl drain NODE --allow-downtime` joining it). */
export const allowDowntimeSignal = defineSignal('allowDowntime');

/**
 * Agent heartbeats held in the control plane's memory: when this process last heard each node, and when it last
 * wrote that to MySQL. A beat is written (`last_seen`) only when another reader needs it: at registration, at the
 * node's first beat here, after a gap, after a failed write, and otherwise every NODE_SEEN_WRITE_MS, so other
 * control planes and a restarted one still see the node; the rest stay in memory, where this process's node
 * liveness reads them (lib/liveness.ts says why each timer is what it is).
 */
import { NODE_BEAT_GAP_MS, NODE_SEEN_WRITE_MS } from '../../lib/liveness';

/** What this process heard of a node: its last beat here and its last write to MySQL (ms since the epoch). */
export interface NodeHeard {
  beatAt: number;
  /** When this process's last write of the node's `last_seen` completed; null: never, or the last one failed. */
  writtenAt: number | null;
}

/** Each node's last beat at this control plane, and the policy deciding which beats go to MySQL. */
export class NodeBeats {
  /** Besides what `of` tells: the beat last written (its arrival), which the write interval counts from. */
  private readonly heard = new Map<string, NodeHeard & { wroteBeatAt: number }>();

  /** Records a beat received at `now`; true when it is to be written to MySQL (then say `written` or `failed`). */
  beat(nodeId: string, now = Date.now()): boolean {
    const h = this.heard.get(nodeId);
    this.heard.set(nodeId, { beatAt: now, writtenAt: h?.writtenAt ?? null, wroteBeatAt: h?.wroteBeatAt ?? now });
    return !h || h.writtenAt === null || now - h.beatAt > NODE_BEAT_GAP_MS || now - h.wroteBeatAt >= NODE_SEEN_WRITE_MS;
  }

  /** The node registered here (which wrote its `last_seen`), the write completing at `now`. */
  registered(nodeId: string, now = Date.now()): void {
    this.heard.set(nodeId, { beatAt: now, writtenAt: now, wroteBeatAt: now });
  }

  /** The beat `beat` asked for was written, the write completing at `now`. */
  written(nodeId: string, now = Date.now()): void {
    const h = this.heard.get(nodeId);
    if (h) Object.assign(h, { writtenAt: now, wroteBeatAt: h.beatAt });
  }

  /** Writing the node's beat failed: its next beat is written. */
  failed(nodeId: string): void {
    const h = this.heard.get(nodeId);
    if (h) h.writtenAt = null;
  }

  /** The node is not registered (any more): nothing of it is kept. */
  forget(nodeId: string): void {
    this.heard.delete(nodeId);
  }

  /** What this process heard of the node, if anything. */
  of(nodeId: string): NodeHeard | undefined {
    const h = this.heard.get(nodeId);
    return h && { beatAt: h.beatAt, writtenAt: h.writtenAt };
  }
}

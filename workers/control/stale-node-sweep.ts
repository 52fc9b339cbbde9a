/** The stale-node sweep: a node whose agent has not heartbeated for a while is marked down, with a node.down event. */
import type { Store } from '../../lib/store/store';

/** How often the sweep looks for stale nodes. */
const SWEEP_EVERY_MS = 2000;

/** What the sweep reads and writes, and after how long without a heartbeat a node is down. */
export interface StaleNodeSweepOptions {
  store: Pick<Store, 'markStaleNodesDown' | 'event'>;
  downAfterMs: number;
}

/** Marks nodes unseen for `downAfterMs` down every 2 s, logging a node.down event for each. */
export class StaleNodeSweep {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: StaleNodeSweepOptions) {}

  /** Starts sweeping (the timer does not keep the process alive). */
  start(): void {
    const { store, downAfterMs: downAfter } = this.o;
    this.timer = setInterval(() => {
      void store.markStaleNodesDown(downAfter).then(async (ids) => {
        for (const id of ids) await store.event({ kind: 'node.down', nodeId: id, message: `no heartbeat for ${downAfter / 1000}s` });
      }).catch(() => undefined);
    }, SWEEP_EVERY_MS);
    this.timer.unref();
  }

  /** Stops sweeping; a sweep in flight finishes. */
  stop(): void {
    clearInterval(this.timer);
  }
}

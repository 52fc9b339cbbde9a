/**
 * Node liveness: the control plane's judgement that a node is gone, made only on evidence. A node is lost when
 * its agent has been silent for NODE_SILENT_MS while this control plane was itself up and reading MySQL, the door
 * saw no call from it either, and none of its engines' ports accepts a connection — or when its agent has been
 * silent for AGENT_LOST_MS although its engines answer (nothing supervises them). Then it is marked down (one
 * control plane wins the conditional update, and a beat written meanwhile wins over all) and every replica placed
 * on it is told to rebuild elsewhere now. A node beating at this control plane is judged from the beats in its
 * memory; one beating elsewhere from MySQL's `last_seen`, which its control plane writes only every
 * NODE_SEEN_WRITE_MS, so it is silent only past NODE_SEEN_STALE_MS. Silence of llmgw's own path — this process
 * restarting, MySQL unreachable — restarts the count instead.
 */
import { connect } from 'node:net';
import { AGENT_LOST_MS, ENGINE_PROBE_MS, NODE_SEEN_STALE_MS, NODE_SILENT_MS, NODE_SWEEP_MS } from '../../lib/liveness';
import type { NodeHeard } from '../../gateway/control/node-beats';
import type { Store } from '../../lib/store/store';
import type { NodeId } from '../../lib/types';

/** What the service reads, writes and asks. */
export interface NodeLivenessOptions {
  store: Pick<Store, 'silentNodes' | 'markNodeDownIfSeen' | 'event'>;
  /** What this process heard of the node's agent (its heartbeats here: gateway/control/node-beats.ts), if anything. */
  heard: (nodeId: string) => NodeHeard | undefined;
  /** When this process's door last saw a call from the node (ms since the epoch), if ever. */
  lastDoorCall: (nodeId: string) => number | undefined;
  /** Tells the replicas on a lost node (signalNodeLost); returns the replicas told. */
  nodeLost: (nodeId: NodeId, why: string) => Promise<string[]>;
  log: (msg: string, fields: Record<string, unknown>) => void;
  /** Overrides of lib/liveness.ts's timers (tests). */
  silentMs?: number;
  staleMs?: number;
  agentLostMs?: number;
  everyMs?: number;
  probeMs?: number;
}

/** True when something accepts a TCP connection at host:port within `ms`. */
export function portAnswers(host: string, port: number, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), ms);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/** Finds lost nodes every NODE_SWEEP_MS and reports each once. */
export class NodeLiveness {
  private timer: NodeJS.Timeout | undefined;
  /** Since when this control plane has been up and reading MySQL without a failure: silence before it is not evidence. */
  private healthySince = Date.now();
  private running = false;
  /** Nodes last seen silent but with engines answering, so the log says it once per episode. */
  private readonly enginesAnswer = new Set<string>();
  private readonly silentMs: number;
  private readonly staleMs: number;
  private readonly agentLostMs: number;

  constructor(private readonly o: NodeLivenessOptions) {
    this.silentMs = o.silentMs ?? NODE_SILENT_MS;
    this.staleMs = o.staleMs ?? NODE_SEEN_STALE_MS;
    this.agentLostMs = o.agentLostMs ?? AGENT_LOST_MS;
  }

  /** Starts judging (the timer does not keep the process alive). */
  start(): void {
    this.healthySince = Date.now();
    this.timer = setInterval(() => void this.sweep(), this.o.everyMs ?? NODE_SWEEP_MS);
    this.timer.unref();
  }

  /** Stops judging; a sweep in flight finishes. */
  stop(): void {
    clearInterval(this.timer);
  }

  /** One pass: the silent nodes, each judged by the door and its engines' ports. */
  async sweep(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const asked = Date.now();
      // Every node beating here is among these (its last_seen is written every NODE_SEEN_WRITE_MS at most).
      const suspects = await this.o.store.silentNodes(this.silentMs);
      const now = Date.now();
      // A control plane that has not itself been listening for the whole window cannot tell silence from its own absence.
      if (now - this.healthySince < this.silentMs) return;
      const still = new Set<string>();
      for (const n of suspects) {
        const silent = this.silence(n, asked, now);
        if (silent === null) continue;
        const door = this.o.lastDoorCall(n.id);
        if (door !== undefined && now - door < this.silentMs) continue;
        // Silence counts only while this control plane could hear it.
        const silentFor = Math.min(silent, now - this.healthySince);
        const answering = await this.anyAnswers(n.host, n.ports);
        let why: string;
        if (answering === null) {
          why = `node lost: no agent heartbeat for ${Math.round(silentFor / 1000)}s, no call through the door, ${n.ports.length ? `its door and engine ports ${n.ports.join(',')} on ${n.host} refuse connections` : 'no engines'}`;
        } else if (silentFor >= this.agentLostMs) {
          why = `agent lost: no heartbeat for ${Math.round(silentFor / 1000)}s while its engines answer (${answering}); nothing supervises them`;
        } else {
          still.add(n.id);
          if (!this.enginesAnswer.has(n.id))
            this.o.log('node agent silent, but its engines answer: not lost (agent restarting?)', {
              nodeId: n.id,
              silentForMs: silentFor,
              engine: answering,
            });
          continue;
        }
        if (!(await this.o.store.markNodeDownIfSeen(n.id, n.seen))) continue;
        const replicas = await this.o.nodeLost(n.id, why);
        await this.o.store.event({
          kind: 'node.down',
          nodeId: n.id,
          message: `${why}${replicas.length ? `; rebuilding ${replicas.join(', ')} elsewhere` : ''}`,
        });
        this.o.log('node lost', { level: 'warn', nodeId: n.id, replicas, why });
      }
      this.enginesAnswer.clear();
      for (const id of still) this.enginesAnswer.add(id);
    } catch (err) {
      // MySQL (or Temporal, for the signals) is not answering: what follows it must be judged anew.
      this.healthySince = Date.now();
      this.o.log('node liveness: cannot judge nodes now; the silence window starts again', {
        level: 'warn',
        error: (err as Error).message,
      });
    } finally {
      this.running = false;
    }
  }

  /**
   * How long the node has been silent, if long enough to be a suspect (else null). A node beats here when this
   * process wrote its last_seen and MySQL holds none later (another control plane's): then the beats in memory
   * say, against NODE_SILENT_MS. Otherwise MySQL's last_seen says, against NODE_SEEN_STALE_MS. MySQL counted its
   * silence at some moment after `asked`, so a last_seen no later than this process's write reads as at least
   * `asked - writtenAt` old (less 10 ms for MySQL's truncation to whole ms and clock reads).
   */
  private silence(n: { id: string; silentMs: number }, asked: number, now: number): number | null {
    const h = this.o.heard(n.id);
    if (h && h.writtenAt !== null && n.silentMs + 10 >= asked - h.writtenAt) {
      const silent = now - h.beatAt;
      return silent >= this.silentMs ? silent : null;
    }
    return n.silentMs >= this.staleMs ? n.silentMs : null;
  }

  /** The first `host:port` of a node's engines that accepts a connection, or null when none does. */
  private async anyAnswers(host: string, ports: number[]): Promise<string | null> {
    if (!host) return null;
    const ms = this.o.probeMs ?? ENGINE_PROBE_MS;
    const answers = await Promise.all(ports.map((p) => portAnswers(host, p, ms)));
    const i = answers.indexOf(true);
    return i < 0 ? null : `${host}:${ports[i]}`;
  }
}

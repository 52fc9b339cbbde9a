/**
 * Activity tasks Temporal handed to a node's poll after the node had left that poll (its deadline passed while the
 * answer was on its way, its connection dropped, its worker restarted). Temporal counts such a task as started the
 * moment it answers the poll, so without the door it would sit unseen until its heartbeat timeout (a shard: 150 s).
 * The door keeps the answer and gives it to the same node's next poll — a node's worker polls again at once — and,
 * if none comes within the hold, fails the task back to Temporal (LLMGW_TASK_UNDELIVERED) so its workflow hears of
 * it now. Seen at 500 nodes on saturated cores: 20 of 2,500 shard starts waited out that 150 s.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';

/** One poll answer with a task in it, as Temporal sent it. */
export interface HeldTask {
  /** the answer's headers (status and content type), passed on as they came */
  headers: OutgoingHttpHeaders;
  /** the gRPC frames, as read */
  body: Buffer;
  trailers: OutgoingHttpHeaders;
  token: Uint8Array;
  heldAt: number;
}

/** Per node, the tasks waiting for its next poll, oldest first; each leaves by `take` or, after `holdMs`, `expired`. */
export class HeldTasks {
  private readonly byCn = new Map<string, { task: HeldTask; timer: NodeJS.Timeout }[]>();

  constructor(
    private readonly holdMs: number,
    private readonly expired: (cn: string, task: HeldTask) => void,
  ) {}

  hold(cn: string, task: HeldTask): void {
    const list = this.byCn.get(cn) ?? [];
    const entry = {
      task,
      timer: setTimeout(() => {
        this.remove(cn, entry);
        this.expired(cn, task);
      }, this.holdMs),
    };
    entry.timer.unref();
    list.push(entry);
    this.byCn.set(cn, list);
  }

  /** The oldest task held for `cn`, now no longer held; undefined when there is none. */
  take(cn: string): HeldTask | undefined {
    const entry = this.byCn.get(cn)?.[0];
    if (!entry) return undefined;
    clearTimeout(entry.timer);
    this.remove(cn, entry);
    return entry.task;
  }

  /** Every task still held, each removed and passed to `expired` now (the door closing). */
  flush(): void {
    for (const [cn, list] of [...this.byCn])
      for (const { task, timer } of list) {
        clearTimeout(timer);
        this.expired(cn, task);
      }
    this.byCn.clear();
  }

  private remove(cn: string, entry: { task: HeldTask; timer: NodeJS.Timeout }): void {
    const list = (this.byCn.get(cn) ?? []).filter((e) => e !== entry);
    if (list.length) this.byCn.set(cn, list);
    else this.byCn.delete(cn);
  }
}

/** The response headers of an answer to keep: those a gRPC client reads (status, content type, encoding). */
export function answerHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = { ':status': 200 };
  for (const k of ['content-type', 'grpc-encoding'] as const) if (h[k] !== undefined) out[k] = h[k];
  return out;
}

/**
 * Node liveness's judgement with a fake store: a node beating at this control plane is judged from the beats in
 * memory (NODE_SILENT_MS), any other from MySQL's last_seen (NODE_SEEN_STALE_MS), and a node is marked down only
 * if its last_seen is still the one read. Timers scaled down: silent 400 ms, stale 1900 ms.
 */
import type { NodeHeard } from '../../gateway/control/node-beats';
import type { NodeId } from '../../lib/types';
import { NodeLiveness } from '../../workers/control/node-liveness';

const SILENT = 400;
const STALE = 1900;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Row {
  id: NodeId;
  host: string;
  ports: number[];
  silentMs: number;
  seen: string;
}

/** A liveness over `rows` (what silentNodes reads) and `heard` (this process's beats); what it did. */
async function judge(
  rows: Omit<Row, 'host' | 'ports'>[],
  heard: Record<string, () => NodeHeard>,
  lastSeenNow: Record<string, string> = {},
): Promise<{ down: string[]; asked: { id: string; seen: string }[]; lost: string[]; events: string[] }> {
  const asked: { id: string; seen: string }[] = [];
  const lost: string[] = [];
  const events: string[] = [];
  const liveness = new NodeLiveness({
    store: {
      silentNodes: async (ms) => rows.filter((r) => r.silentMs > ms).map((r) => ({ ...r, host: '', ports: [] })),
      markNodeDownIfSeen: async (id, seen) => {
        asked.push({ id, seen });
        // last_seen as MySQL holds it now: another control plane may have written a beat since it was read.
        return (lastSeenNow[id] ?? rows.find((r) => r.id === id)?.seen) === seen;
      },
      event: async (e) => void events.push(`${e.kind} ${e.nodeId}`),
    },
    heard: (id) => heard[id]?.(),
    lastDoorCall: () => undefined,
    nodeLost: async (id) => {
      lost.push(id);
      return [];
    },
    log: () => undefined,
    silentMs: SILENT,
    staleMs: STALE,
  });
  await sleep(SILENT + 50); // the judge itself must have been up for the whole window
  await liveness.sweep();
  return { down: asked.map((a) => a.id), asked, lost, events };
}

const row = (
  id: string,
  silentMs: number,
  seen = `2026-12-06 02:00:00.${id.slice(-1)}00`,
): Omit<Row, 'host' | 'ports'> => ({
  id: id as NodeId,
  silentMs,
  seen,
});

describe('node liveness: memory for the nodes beating here, MySQL for the rest', () => {
  test('a node beating here is judged from memory: silent past NODE_SILENT_MS is lost, whatever MySQL says', async () => {
    // This process wrote each last_seen (MySQL holds nothing later), then kept the beats in memory.
    const beating = (beatAgo: number, wroteAgo: number) => (): NodeHeard => ({
      beatAt: Date.now() - beatAgo,
      writtenAt: Date.now() - wroteAgo,
    });
    const r = await judge([row('a1', 1000), row('a2', 1000), row('a3', 5000)], {
      a1: beating(50, 800),
      a2: beating(SILENT + 200, 800),
      a3: beating(50, 4800), // MySQL's copy past NODE_SEEN_STALE_MS, yet it beats here
    });
    expect(r.asked).toEqual([{ id: 'a2', seen: row('a2', 0).seen }]);
    expect(r.lost).toEqual(['a2']);
    expect(r.events).toEqual(['node.down a2']);
  });

  test('a node not beating here is judged from MySQL: lost only once last_seen is older than NODE_SEEN_STALE_MS', async () => {
    const r = await judge([row('b1', SILENT + 100), row('b2', STALE - 100), row('b3', STALE + 100)], {});
    expect(r.down).toEqual(['b3']);
    expect(r.lost).toEqual(['b3']);
  });

  test('a node that beat here once but whose last_seen another control plane wrote since is judged from MySQL', async () => {
    // This process last heard and wrote c1 10 s ago; MySQL says 1 s: another control plane hears it now.
    const t = Date.now();
    const r = await judge([row('c1', 1000)], { c1: () => ({ beatAt: t - 10_000, writtenAt: t - 10_000 }) });
    expect(r.down).toEqual([]);
  });

  test('the mark-down is conditional on the last_seen read: a beat written meanwhile by another control plane wins', async () => {
    const r = await judge([row('d1', STALE + 100), row('d2', STALE + 100)], {}, { d1: '2026-12-06 02:00:19.500' });
    expect(r.asked.map((a) => a.id)).toEqual(['d1', 'd2']); // both tried, with what was read
    expect(r.asked[0]?.seen).toBe(row('d1', 0).seen);
    expect(r.lost).toEqual(['d2']); // d1's update found another last_seen: not lost, not reported
    expect(r.events).toEqual(['node.down d2']);
  });
});

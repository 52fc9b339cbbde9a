/** The heartbeat write policy: which of a node's beats the control plane writes to MySQL. */
import { NodeBeats } from '../../gateway/control/node-beats';
import { NODE_BEAT_GAP_MS, NODE_SEEN_STALE_MS, NODE_SEEN_WRITE_MS, NODE_SILENT_MS } from '../../lib/liveness';

/** Beats every `everyMs` from `from` to `to` (exclusive), each written when asked; returns the times written. */
function beatSteadily(b: NodeBeats, id: string, from: number, to: number, everyMs = 1000): number[] {
  const written: number[] = [];
  for (let t = from; t < to; t += everyMs)
    if (b.beat(id, t)) {
      b.written(id, t + 5);
      written.push(t);
    }
  return written;
}

describe('node beats: the write policy', () => {
  test('a node beating every second is written at its first beat here, then every 15 s: 4 writes a minute', () => {
    const b = new NodeBeats();
    const written = beatSteadily(b, 'n1', 0, 60_000);
    expect(written).toEqual([0, 15_000, 30_000, 45_000]);
    expect(b.of('n1')).toEqual({ beatAt: 59_000, writtenAt: 45_005 });
  });

  test('registration counts as a write: the beats after it stay in memory', () => {
    const b = new NodeBeats();
    b.registered('n1', 0);
    expect(beatSteadily(b, 'n1', 1000, 20_000)).toEqual([15_000]);
  });

  test('a beat after a gap of more than 3 s is written at once (the node is back, or moved here)', () => {
    const b = new NodeBeats();
    expect(beatSteadily(b, 'n1', 0, 5000)).toEqual([0]);
    expect(b.beat('n1', 4000 + NODE_BEAT_GAP_MS)).toBe(false); // exactly the gap: not more
    expect(b.beat('n1', 7000 + NODE_BEAT_GAP_MS + 1)).toBe(true);
  });

  test('a failed write is tried again at the next beat, and until one succeeds', () => {
    const b = new NodeBeats();
    expect(b.beat('n1', 0)).toBe(true);
    b.failed('n1');
    expect(b.beat('n1', 1000)).toBe(true);
    b.failed('n1');
    expect(b.of('n1')).toEqual({ beatAt: 1000, writtenAt: null });
    expect(b.beat('n1', 2000)).toBe(true);
    b.written('n1', 2010);
    expect(b.beat('n1', 3000)).toBe(false);
  });

  test('a node forgotten (not registered) is written at its next beat; nodes are kept apart', () => {
    const b = new NodeBeats();
    b.registered('n1', 0);
    b.registered('n2', 0);
    b.forget('n1');
    expect(b.of('n1')).toBeUndefined();
    expect(b.beat('n1', 1000)).toBe(true);
    expect(b.beat('n2', 1000)).toBe(false);
  });

  test('the staleness others judge MySQL by outlasts a write interval by the silence a node is judged by', () => {
    expect(NODE_SEEN_STALE_MS).toBe(NODE_SEEN_WRITE_MS + NODE_SILENT_MS);
    expect(NODE_SEEN_STALE_MS).toBe(19_000);
  });
});

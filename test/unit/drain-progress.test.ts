/** What `ctl drain` prints while it follows a drain (the same line is the workflow's details in the Temporal UI). */
import type { NodeId, ReplicaId } from '../../lib/types';
import {
  formatDrainProgress,
  moveKey,
  shortDuration,
  type DrainProgress,
  type MoveStatus,
} from '../../workflows/contracts/drain';

const base: DrainProgress = { nodeId: 'sim-a' as NodeId, phase: 'moving', moved: 0, total: 2, current: null };
const id = (s: string): ReplicaId => s as ReplicaId;

describe('formatDrainProgress', () => {
  test('says how many requests the original still has in flight and how much grace is left', () => {
    expect(
      formatDrainProgress({
        ...base,
        current: {
          replicaId: id('sim-small-0'),
          replacement: id('sim-small-2'),
          state: 'ready',
          reason: null,
          draining: { inFlight: 3, gateways: 2, graceLeftS: 552 },
        },
      }),
    ).toBe(
      'sim-a: moving, moved 0 of 2; moving sim-small-0 → sim-small-2 ready; waiting for 3 requests in flight on sim-small-0 (grace 9m12s left)',
    );
  });

  test('with none in flight, names the gateways that have not yet dropped it from their tables', () => {
    expect(
      formatDrainProgress({
        ...base,
        current: {
          replicaId: id('sim-small-0'),
          replacement: id('sim-small-2'),
          state: 'ready',
          reason: null,
          draining: { inFlight: 0, gateways: 1, graceLeftS: 600 },
        },
      }),
    ).toMatch(/waiting for 0 requests in flight on sim-small-0 \(1 gateway still routing it\) \(grace 10m00s left\)$/);
  });

  test('a replacement nothing can take shows its reason and the hint', () => {
    expect(
      formatDrainProgress({
        ...base,
        current: {
          replicaId: id('sim-large-0'),
          replacement: id('sim-large-1'),
          state: 'waiting',
          reason: 'no placement for sim-large/tp2',
          hint: 'it fits once sim-large-0 is gone: llmgw ctl drain sim-a --allow-downtime moves it stop-first',
        },
      }),
    ).toBe(
      'sim-a: moving, moved 0 of 2; moving sim-large-0 → sim-large-1 waiting — no placement for sim-large/tp2 [it fits once sim-large-0 is gone: llmgw ctl drain sim-a --allow-downtime moves it stop-first]',
    );
  });

  test('a stop-first move says so, and its downtime once it is done; a cancel says what became of the move', () => {
    expect(
      formatDrainProgress({
        ...base,
        phase: 'done',
        moved: 1,
        total: 1,
        downtime: [{ replicaId: id('sim-large-0'), replacement: id('sim-large-1'), downMs: 4230 }],
      }),
    ).toBe('sim-a: done, moved 1 of 1; sim-large-0 was out of routing 4.2s (moved stop-first to sim-large-1)');
    expect(
      formatDrainProgress({
        ...base,
        current: {
          replicaId: id('sim-large-0'),
          replacement: id('sim-large-1'),
          state: 'starting',
          reason: null,
          stopFirst: true,
        },
      }),
    ).toBe('sim-a: moving, moved 0 of 2; moving sim-large-0 stop-first → sim-large-1 starting');
    expect(
      formatDrainProgress({
        ...base,
        phase: 'cancelled',
        note: 'its replacement sim-large-1 stopped: sim-large-0 keeps serving',
      }),
    ).toBe('sim-a: cancelled, moved 0 of 2; its replacement sim-large-1 stopped: sim-large-0 keeps serving');
  });
});

describe('moveKey', () => {
  test('the grace ticking down is no change (the drain is not woken every second); the count in flight is', () => {
    const s = (inFlight: number, graceLeftS: number): MoveStatus => ({
      kind: 'moving',
      replacement: id('r-1'),
      state: 'ready',
      reason: null,
      draining: { inFlight, gateways: 1, graceLeftS },
    });
    expect(moveKey(s(3, 500))).toBe(moveKey(s(3, 499)));
    expect(moveKey(s(3, 500))).not.toBe(moveKey(s(2, 500)));
  });
});

test('shortDuration', () => {
  expect([shortDuration(41), shortDuration(552), shortDuration(3720), shortDuration(0)]).toEqual([
    '41s',
    '9m12s',
    '1h02m',
    '0s',
  ]);
});

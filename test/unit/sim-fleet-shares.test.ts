import { fleetShares } from '../../cli/sim-fleet-procs';

describe('llmgw sim-fleet --fleet-proc: the shares of the nodes', () => {
  test('every node in exactly one share, in order from --first, the first shares one larger', () => {
    expect(fleetShares(10, 0, 3)).toEqual([
      [0, 4],
      [4, 3],
      [7, 3],
    ]);
    expect(fleetShares(199, 1, 2)).toEqual([
      [1, 100],
      [101, 99],
    ]);
    expect(fleetShares(2, 5, 2)).toEqual([
      [5, 1],
      [6, 1],
    ]);
  });
});

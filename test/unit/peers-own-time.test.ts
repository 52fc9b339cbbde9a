/**
 * bench:peers reads llmgw's own added-latency histogram before and after its rounds: the requests between the two
 * reads, their mean, and the median interpolated within its bucket.
 */
import { ownTime, readHistogram } from '../bench/peers-report';

const page = (counts: number[], sum: number): string =>
  [
    '# HELP llmgw_gateway_added_latency_seconds x',
    '# TYPE llmgw_gateway_added_latency_seconds histogram',
    ...['0.0001', '0.0002', '0.0005', '+Inf'].map(
      (le, i) => `llmgw_gateway_added_latency_seconds_bucket{le="${le}"} ${counts[i]}`,
    ),
    `llmgw_gateway_added_latency_seconds_sum ${sum}`,
    `llmgw_gateway_added_latency_seconds_count ${counts[3]}`,
    '# TYPE other_requests_total counter',
    'other_requests_total 99',
  ].join('\n');

test('the rounds between two reads: count, mean and the median within its bucket', () => {
  const before = readHistogram(page([10, 10, 10, 10], 0.001), 'llmgw_gateway_added_latency_seconds');
  expect(before.buckets).toEqual([
    [0.0001, 10],
    [0.0002, 10],
    [0.0005, 10],
    [Infinity, 10],
  ]);
  // 100 more: 20 up to 0.1 ms, 60 in (0.1, 0.2], 20 in (0.2, 0.5]; their sum 16 ms.
  const after = readHistogram(page([30, 90, 110, 110], 0.017), 'llmgw_gateway_added_latency_seconds');
  const own = ownTime(before, after);
  expect(own?.n).toBe(100);
  expect(own?.mean).toBeCloseTo(0.16, 6);
  // The 50th of 100 lies 30 into the 60 of (0.1, 0.2] ms: 0.15 ms.
  expect(own?.p50).toBeCloseTo(0.15, 6);
});

test('nothing between the reads is no figure', () => {
  const h = readHistogram(page([1, 2, 3, 3], 0.001), 'llmgw_gateway_added_latency_seconds');
  expect(ownTime(h, h)).toBeNull();
});

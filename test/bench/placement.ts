/**
 * `npm run bench:placement`: how long one placement takes as the cluster grows — 1,000 / 10,000 nodes of 8 GPUs,
 * in fabrics of 100 (and 10 % islands), half their GPUs held by other replicas, for a single-node and a 4-node
 * profile, and a profile nothing can take (the refusal names why). Median and worst of 20 calls each, after a warm-up.
 * Placement is a pure function (lib/placement.ts) run by the control worker: its time is the control plane's CPU.
 *
 *   npm run bench:placement [-- --nodes 1000,10000]
 */
import '../helpers/bench-help'; // --help: the comment above
import { parseArgs } from 'node:util';
import { place } from '../../lib/placement';
import { parseNodeId, type NodeRecord, type Profile } from '../../lib/types';

function cluster(n: number): { nodes: NodeRecord[]; held: Record<string, number[]> } {
  const nodes: NodeRecord[] = [];
  const held: Record<string, number[]> = {};
  for (let i = 0; i < n; i++) {
    const id = `n${String(i).padStart(5, '0')}`;
    const island = i % 10 === 9;
    nodes.push({
      id: parseNodeId(id),
      state: i % 50 === 7 ? 'cordoned' : 'ready',
      inventory: {
        gpus: Array.from({ length: 8 }, (_, index) => ({
          index,
          name: 'NVIDIA H100 80GB HBM3',
          memoryMiB: 81559,
          uuid: `GPU-${id}-${index}`,
        })),
        adapters: [],
        fabrics: island ? {} : { [`ib-${Math.floor(i / 100)}`]: ['mlx5_0'] },
        cpuFlags: ['avx2'],
        engines: ['sim', 'vllm'],
        host: '10.0.0.1',
      },
      lastSeen: new Date(0),
      registeredAt: new Date(0),
    });
    held[id] = Array.from({ length: (i * 7) % 9 }, (_, g) => g).slice(0, 8);
  }
  return { nodes, held };
}

const PROFILES: Record<string, Profile> = {
  'single node, 2 GPUs': { name: 'tp2', engine: 'vllm', nodes: 1, gpusPerNode: 2, args: [] },
  '4 nodes × 8 GPUs on one fabric': { name: 'pp4', engine: 'vllm', nodes: 4, gpusPerNode: 8, args: [] },
  'unplaceable (sglang on no node)': { name: 'x', engine: 'sglang', nodes: 1, gpusPerNode: 1, args: [] },
};

function main(): void {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '1000,10000' } } });
  const sizes = String(values.nodes)
    .split(',')
    .map((s) => Number(s));
  const rows: string[] = ['| nodes | profile | result | median ms | worst ms |', '|---|---|---|---|---|'];
  for (const n of sizes) {
    const { nodes, held } = cluster(n);
    for (const [label, profile] of Object.entries(PROFILES)) {
      const input = { nodes, profile, heldGpus: held, model: 'm' };
      let result = place(input);
      const times: number[] = [];
      for (let i = 0; i < 20; i++) {
        const t = process.hrtime.bigint();
        result = place(input);
        times.push(Number(process.hrtime.bigint() - t) / 1e6);
      }
      times.sort((a, b) => a - b);
      const what =
        result.kind === 'placed' ? `placed on ${result.nodes.length}` : `refused (${result.reason.length} chars)`;
      rows.push(
        `| ${n.toLocaleString('en-US')} | ${label} | ${what} | ${times[10]?.toFixed(2)} | ${times[19]?.toFixed(2)} |`,
      );
    }
  }
  process.stdout.write(`${rows.join('\n')}\n`);
}

main();

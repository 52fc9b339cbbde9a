/**
 * A node's door alone in a process, as the agent runs it, for test/bench/node-door.ts: reads NODE_DOOR_BENCH (JSON:
 * the node certificate, the CA, the replica's engine port), prints `{"ready":port}`, serves until stdin closes.
 */
import { startNodeDoor } from '../../gateway/node-door/door';

async function main(): Promise<void> {
  const s = JSON.parse(process.env.NODE_DOOR_BENCH ?? '{}') as {
    tls: { certPem: string; keyPem: string; caPem: string };
    enginePort: number;
  };
  const door = await startNodeDoor({
    nodeId: 'bench-node',
    tls: s.tls,
    host: '127.0.0.1',
    port: 0,
    replicaPort: (id) => (id === 'm-0' ? s.enginePort : null),
    replicas: () => ['m-0'],
  });
  process.stdout.write(`${JSON.stringify({ ready: door.port })}\n`);
  process.stdin.resume();
  process.stdin.once('end', () => void door.close().then(() => process.exit(0)));
}

void main();

/**
 * `llmgw node-door` (hidden; the agent starts it): the node's door in a process of its own, so an agent restart or
 * crash fails no request through the node (workers/node-door). Stops on SIGTERM after answering what is in flight.
 */
import { parseArgs } from 'node:util';
import { parseNodeId } from '../lib/types';
import { doorVersion } from '../workers/node-door/files';
import { startDoorProcess } from '../workers/node-door';
import { makeLog } from './log';

const USAGE =
  'usage: llmgw node-door --node ID --state-dir DIR --listen HOST:PORT [--server URL …] [--listen-fd 3]\n' +
  '(started by `llmgw agent --door HOST:PORT`; not run by hand)\n';

/** Runs the door until SIGTERM/SIGINT or a control call that stops or replaces it. */
export async function nodeDoorMain(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      node: { type: 'string' },
      'state-dir': { type: 'string' },
      listen: { type: 'string' },
      'listen-fd': { type: 'string' },
      server: { type: 'string', multiple: true },
    },
  });
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(values.listen ?? '');
  if (!values.node || !values['state-dir'] || !m) {
    process.stderr.write(USAGE);
    process.exit(2);
  }
  const nodeId = parseNodeId(values.node);
  const log = makeLog(`node-door ${nodeId}`);
  const fd = values['listen-fd'] === undefined ? undefined : Number(values['listen-fd']);
  const flags = argv.filter((_, i) => argv[i] !== '--listen-fd' && argv[i - 1] !== '--listen-fd');
  let door;
  try {
    door = await startDoorProcess({
      nodeId,
      stateDir: values['state-dir'],
      listen: { host: (m[1] ?? m[2]) as string, port: Number(m[3]), ...(fd !== undefined ? { fd } : {}) },
      servers: values.server ?? [],
      version: doorVersion(),
      flags,
      log,
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    log('node door could not start', { level: 'error', ...(e.code ? { code: e.code } : {}), error: e.message });
    process.exit(1);
  }
  const stop = (): void => void door.drain().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await door.done;
  process.exit(0);
}

if (require.main === module) void nodeDoorMain(process.argv.slice(2));

/** `llmgw cluster`: the local cluster on one machine, on embedded defaults. */
import { resolve } from 'node:path';
import { parse, intOption } from '../args';
import { startCluster } from './run';

const USAGE = `
llmgw cluster [--state-dir DIR] [--base-port N] [--mysql-url URL] [--reset] [--no-door]

Brings up a whole llmgw cluster on this machine: the Temporal dev server with its UI,
the control plane and control worker, the gateway, and three simulated nodes
(sim-a and sim-b on fabric ib-a with fake GPUs, sim-c an island), then deploys the
example catalog (sim-small: 2 single-node replicas; sim-large: 1 replica over sim-a+sim-b).
When this machine has built llama.cpp (set-up starts the build in the background, about
6 min of two idle cores, once per machine), the nodes also offer it and the catalog adds tiny-llama: a real llama-server on a
tiny generated model (CPU, no GPU), served through the same gateway.
Every node serves its node door (llmgw agent --door, one port each: sim-a 7460, sim-b 7461,
sim-c 7462): the gateway reaches every replica through it with the gateway certificate the
cluster issues from its CA, and the engines listen on 127.0.0.1 behind it.
Ctrl-C stops every process it started; running it again reuses the state. It checks its ports
before it starts anything, and refuses (naming the process) when one is held.

  --state-dir DIR   Temporal history, generated server.yaml and logs (default .llmgw/)
  --base-port N     move every port: Temporal N, UI N+1, control plane N+2, gateway N+3, Temporal's door
                    N+4, metrics N+5 to N+9, the node doors N+10 to N+12, engines from N+13; the nodes' metrics
                    on free ports (default: 7233, 8233, 7443, 8080, 7444, 9464, 7460, 20000, nodes 9470)
  --mysql-url URL   (default mysql://root@127.0.0.1:3306/llmgw, the local MariaDB)
  --reset           start from empty state: drop --mysql-url's database and remove what llmgw cluster
                    wrote in --state-dir (Temporal history, CA, certificates, logs, engines, weights),
                    each named first; nothing else is touched
  --no-door         run the agents without a node door: the gateway reaches each engine on its own port
                    (as before the door was the cluster's default)
`;

/** Entry for `llmgw cluster`. */
export async function clusterCommand(argv: string[]): Promise<void> {
  const { values } = parse(argv, {
    usage: USAGE,
    options: {
      'state-dir': { type: 'string' },
      'base-port': { type: 'string' },
      'mysql-url': { type: 'string' },
      reset: { type: 'boolean' },
      'no-door': { type: 'boolean' },
    },
  });
  const started = Date.now();
  const say = (l: string): void => void process.stdout.write(`${l}\n`);
  const cluster = await startCluster({
    stateDir: resolve(values['state-dir'] ?? '.llmgw'),
    basePort: values['base-port'] === undefined ? null : intOption(values['base-port'], '--base-port', 0),
    mysqlUrl: values['mysql-url'] ?? 'mysql://root@127.0.0.1:3306/llmgw',
    progress: say,
    reset: values.reset ?? false,
    door: !(values['no-door'] ?? false),
  });
  const doors = Object.entries(cluster.doors);
  say(`
llmgw local cluster is up (${((Date.now() - started) / 1000).toFixed(1)}s).

  OpenAI base URL   ${cluster.gatewayUrl}/v1      (models: ${cluster.config.catalog.map((m) => m.name).join(', ')})
  API key           ${cluster.apiKey}      (made at this start; more: llmgw ctl keys create NAME)
  Temporal UI       ${cluster.uiUrl}
  control plane     ${cluster.controlUrl}
  cluster page      ${cluster.pageUrl}   (a self-signed CA: accept the browser's warning)
                    sign in with ${cluster.pageKey ?? `the key of: npx llmgw ctl page-key create NAME --config ${cluster.configFile}`}
  node doors        ${
    doors.length
      ? `${doors.map(([id, at]) => `${id} https://${at}`).join(', ')}
                    (every replica is routed through its node's door; engines on 127.0.0.1)`
      : 'none (--no-door): the gateway reaches each engine on its own port'
  }
  config            ${cluster.configFile}
  metrics           ${Object.entries(cluster.metricsUrls)
    .map(([role, url]) => `${role} ${url}`)
    .join('\n                    ')}

  try:  curl -N ${cluster.gatewayUrl}/v1/chat/completions -H 'content-type: application/json' \\
          -H 'authorization: Bearer ${cluster.apiKey}' \\
          -d '{"model":"sim-large","stream":true,"messages":[{"role":"user","content":"hello"}]}'
        npx llmgw ctl nodes --config ${cluster.configFile}

Ctrl-C stops everything.`);
  await new Promise<void>((done) => {
    const stop = (): void => {
      say('stopping…');
      void cluster.close().then(done);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

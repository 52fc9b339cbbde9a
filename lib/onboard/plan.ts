/**
 * What onboarding puts on a node, as data: the paths, the agent's configuration (a start script holding its
 * flags), the systemd unit or the start script used where there is no systemd, and each engine's probe.
 * Pure: the llmgw-ca activities (activities/ca/onboard.ts) carry it out over ssh.
 */
import { ENGINE_SPECS, INSTALLED_ENGINES, type OperatorBins } from '../engines/registry';
import { ENGINES, type EngineName } from '../types';
import { agentUnit } from '../deploy/units';
import { nodeDoorListen } from '../node-door';

/** Quotes one word for a POSIX shell. */
export function shQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Where everything lives on a node. */
export const NODE_PATHS = {
  releases: '/opt/llmgw/releases',
  /** a symlink to the release in use */
  current: '/opt/llmgw/current',
  /** on PATH, for the operator on the node (`llmgw doctor`) */
  bin: '/usr/local/bin/llmgw',
  etc: '/etc/llmgw',
  cert: '/etc/llmgw/node.crt',
  key: '/etc/llmgw/node.key',
  /** the agent's configuration: its command line */
  agentScript: '/etc/llmgw/agent.sh',
  /** the start script used where there is no systemd */
  service: '/etc/llmgw/agent-service',
  unit: '/etc/systemd/system/llmgw-agent.service',
  unitName: 'llmgw-agent',
  stateDir: '/var/lib/llmgw/engines',
  /** the node door's record in stateDir (workers/node-door/files.ts: doorPaths(stateDir).record): its pid */
  doorRecord: '/var/lib/llmgw/engines/door/door.json',
  log: '/var/log/llmgw/agent.log',
  pidFile: '/run/llmgw-agent.pid',
} as const;

/** The llmgw program of the release in use. */
export const NODE_LLMGW = `${NODE_PATHS.current}/bin/llmgw`;

/** How the agent on a node is configured (the onboarding flags that concern it). */
export interface AgentConfig {
  nodeId: string;
  /** the control plane, https://… */
  server: string;
  /** where engines on the node are reached (default: the address onboarding reached it at) */
  advertiseHost: string;
  /**
   * Serve the node's door at `<advertiseHost>:7460` (`--door`): engines then listen on 127.0.0.1 and every gateway
   * needs a gateway certificate (`tls.gatewayCert`). false: no door, engines on `advertiseHost` (`--no-door`)
   */
  door: boolean;
  fabrics: string[];
  nvidiaSmi?: string;
  noGpu: boolean;
  ibRoot?: string;
  /** engines the operator installed, by path on the node */
  bins: OperatorBins;
  /** where the CA root is (the trust plan's path) */
  caPath: string;
}

/** The agent's command line. */
export function agentArgv(c: AgentConfig): string[] {
  return [
    NODE_LLMGW,
    'agent',
    '--node',
    c.nodeId,
    '--server',
    c.server,
    '--cert',
    NODE_PATHS.cert,
    '--key',
    NODE_PATHS.key,
    '--ca',
    c.caPath,
    '--advertise-host',
    c.advertiseHost,
    ...(c.door ? ['--door', nodeDoorListen(c.advertiseHost)] : []),
    '--state-dir',
    NODE_PATHS.stateDir,
    // The engines the operator installed; which engines the node offers is the control plane's to say (server.yaml).
    ...INSTALLED_ENGINES.flatMap((e) => (c.bins[e] ? [ENGINE_SPECS[e].install.operator.flag, c.bins[e]] : [])),
    ...c.fabrics.flatMap((f) => ['--fabric', f]),
    ...(c.noGpu ? ['--no-gpu'] : c.nvidiaSmi ? ['--nvidia-smi', c.nvidiaSmi] : []),
    ...(c.ibRoot ? ['--ib-root', c.ibRoot] : []),
  ];
}

/** /etc/llmgw/agent.sh: the agent's configuration, run by the systemd unit or the start script. */
export function agentScript(c: AgentConfig, env: Record<string, string>): string {
  return [
    '#!/bin/sh',
    `# The llmgw agent of ${c.nodeId}, written by llmgw onboard-node: onboarding the node again rewrites it.`,
    'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    ...Object.entries(env).map(([k, v]) => `export ${k}=${shQuote(v)}`),
    `exec ${agentArgv(c).map(shQuote).join(' ')}`,
    '',
  ].join('\n');
}

/** The systemd unit (the hardened agent unit of lib/deploy/units.ts); `unitLines` go into [Service] (the trust plan's NODE_EXTRA_CA_CERTS). */
export function systemdUnit(nodeId: string, unitLines: string[]): string {
  return agentUnit({
    description: `llmgw node agent of ${nodeId} (written by llmgw onboard-node)`,
    unitLines,
    script: NODE_PATHS.agentScript,
  });
}

/**
 * /etc/llmgw/agent-service: start | stop | restart | status of the agent where there is no systemd (a
 * container, the test hosts). The agent runs in a session of its own (setsid, nohup) with its pid in
 * /run/llmgw-agent.pid and its output in /var/log/llmgw/agent.log; start is a no-op while it runs. Nothing
 * restarts it if it dies, and nothing starts it at boot: prefer systemd wherever there is one.
 */
export function fallbackServiceScript(): string {
  const p = NODE_PATHS;
  return `#!/bin/sh
# The llmgw agent without systemd, written by llmgw onboard-node: ${p.service} start|stop|restart|status
pidfile=${p.pidFile}
log=${p.log}
running() {
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\\0' ' ' < "/proc/$pid/cmdline" | grep -q ' agent '
}
start() {
  if running; then echo "running $pid"; return 0; fi
  mkdir -p "$(dirname "$log")"
  # In a non-interactive shell a background job leads no process group, so setsid execs without forking
  # and $! is the agent's own pid (agent.sh execs it too).
  setsid nohup ${p.agentScript} >>"$log" 2>&1 </dev/null &
  echo "$!" > "$pidfile"
  echo "started $!"
}
stop() {
  if running; then
    kill "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
    kill -9 "$pid" 2>/dev/null
    echo "stopped $pid"
  fi
  rm -f "$pidfile"
}
case "$1" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running; then echo "running $pid"; else echo "stopped"; exit 3; fi ;;
  *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
`;
}

/** One engine's check on the node: a command that exits 0 when the engine can start. */
export interface EngineProbe {
  engine: EngineName;
  /** the shell command run over ssh */
  command: string;
  /** the flag that named it, for the failure's advice */
  flag: string;
}

/**
 * Each configured engine's probe: a built-in engine (sim) really started by the release's llmgw; an installed
 * one's own program run with its version arguments, where the operator named its binary.
 */
export function engineProbes(c: Pick<AgentConfig, 'bins'>): EngineProbe[] {
  return ENGINES.flatMap((engine): EngineProbe[] => {
    const { install, versionArgs } = ENGINE_SPECS[engine];
    if (install.kind === 'builtin')
      return [{ engine, command: [NODE_LLMGW, ...install.probeArgs].map(shQuote).join(' '), flag: '--binary' }];
    const bin = c.bins[engine];
    return bin ? [{ engine, command: [bin, ...versionArgs].map(shQuote).join(' '), flag: install.operator.flag }] : [];
  });
}

/** A release artefact's file name: llmgw-<version>-<platform>.tar.gz. */
export function parseArtefactName(file: string): { name: string; version: string; platform: string } | null {
  const m = /(?:^|\/)(llmgw-(\d+\.\d+\.\d+[^/]*?)-(linux-(?:x64|arm64)))\.tar\.gz$/.exec(file);
  return m ? { name: m[1]!, version: m[2]!, platform: m[3]! } : null;
}

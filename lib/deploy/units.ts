/**
 * The hardened systemd units of every role (control plane, gateway, CA worker, Proxmox worker, agent) and the
 * sysusers.d file that makes their users, as text. The release artefact ships them under share/ (scripts/release.ts);
 * onboarding writes the agent's (lib/onboard/plan.ts). docs/deploying.md says where each runs and why.
 */

/** The roles that run as services, by their `llmgw` command. */
export const SERVICE_ROLES = ['control-plane', 'gateway', 'ca-worker', 'proxmox-worker', 'agent'] as const;
export type ServiceRole = (typeof SERVICE_ROLES)[number];

/** Where a host keeps llmgw; tests point these into a temporary tree so `systemd-analyze verify` finds the files. */
export interface UnitPaths {
  /** the release in use (holds bin/llmgw) */
  current: string;
  /** configuration: server.yaml of each role, certificates, the agent's script */
  etc: string;
  /** the CA worker's state (the CA directory, its ssh key) */
  caState: string;
  /** the agent's state (engines, installs, weights) */
  agentState: string;
}

/** The paths of a real host. */
export const HOST_PATHS: UnitPaths = {
  current: '/opt/llmgw/current',
  etc: '/etc/llmgw',
  caState: '/var/lib/llmgw-ca',
  agentState: '/var/lib/llmgw',
};

/** The user each server role runs as (the agent runs as root: see agentUnit). */
export const ROLE_USERS: Record<Exclude<ServiceRole, 'agent'>, string> = {
  'control-plane': 'llmgw-control',
  gateway: 'llmgw-gateway',
  'ca-worker': 'llmgw-ca',
  'proxmox-worker': 'llmgw-proxmox',
};

/** A role's server.yaml on its host (what `llmgw init ROLE` writes by default). */
export function roleConfigPath(role: Exclude<ServiceRole, 'agent'>, paths: UnitPaths = HOST_PATHS): string {
  return `${paths.etc}/${role}.yaml`;
}

/** The unit's file name: llmgw-<role>.service. */
export function unitName(role: ServiceRole): string {
  return `llmgw-${role}.service`;
}

const DESCRIPTIONS: Record<ServiceRole, string> = {
  'control-plane': 'llmgw control plane (control API, Temporal door for nodes, llmgw-control worker)',
  gateway: 'llmgw inference gateway (OpenAI-compatible API)',
  'ca-worker': 'llmgw CA worker (llmgw-ca queue: certificates, CRL, onboarding over ssh)',
  'proxmox-worker': 'llmgw Proxmox worker (llmgw-proxmox queue: creates VMs)',
  agent: 'llmgw node agent',
};

/** Sandboxing every server role shares: it reads its files and talks to the network, nothing else. */
const SERVER_SANDBOX = [
  'NoNewPrivileges=yes',
  'ProtectSystem=strict',
  'ProtectHome=yes',
  'PrivateTmp=yes',
  'PrivateDevices=yes',
  'ProtectKernelTunables=yes',
  'ProtectKernelModules=yes',
  'ProtectKernelLogs=yes',
  'ProtectControlGroups=yes',
  'ProtectClock=yes',
  'ProtectHostname=yes',
  'RestrictNamespaces=yes',
  'RestrictRealtime=yes',
  'RestrictSUIDSGID=yes',
  'LockPersonality=yes',
  'RemoveIPC=yes',
  'SystemCallArchitectures=native',
  // A call outside the set fails with EPERM rather than killing the process (libuv falls back where it probes).
  'SystemCallFilter=@system-service',
  'SystemCallErrorNumber=EPERM',
  // AF_NETLINK: Node's os.networkInterfaces() (getifaddrs).
  'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK',
  // No capability at all: every listener is on a port above 1024. To serve the gateway on 443, add
  // AmbientCapabilities=CAP_NET_BIND_SERVICE and the same in CapabilityBoundingSet (systemctl edit).
  'CapabilityBoundingSet=',
  'AmbientCapabilities=',
  'UMask=0077',
];

/** What each server role may write, and why; [] means nothing on disk (logs go to the journal, /tmp is private). */
function writable(role: Exclude<ServiceRole, 'agent'>, p: UnitPaths): { lines: string[]; why: string } {
  switch (role) {
    case 'ca-worker':
      return {
        // StateDirectory makes /var/lib/llmgw-ca (owned by the user) before the sandbox is set up; ReadWritePaths names it.
        lines: ['StateDirectory=llmgw-ca', `ReadWritePaths=${p.caState}`],
        why: `the CA directory (${p.caState}/ca: serial numbers, the CRL it re-issues) and its ssh key (${p.caState}/.ssh)`,
      };
    case 'control-plane':
    case 'gateway':
    case 'proxmox-worker':
      return { lines: [], why: 'none: it keeps no state on disk (MySQL and Temporal hold it), logs go to the journal' };
    default: {
      const never: never = role;
      return never;
    }
  }
}

/** The command line each server role runs with. */
function execStart(role: Exclude<ServiceRole, 'agent'>, p: UnitPaths): string {
  const base = `${p.current}/bin/llmgw ${role} --config ${roleConfigPath(role, p)}`;
  return role === 'ca-worker' ? `${base} --ca-dir ${p.caState}/ca` : base;
}

/** The hardened unit of a server role (everything but the agent). */
export function serverUnit(role: Exclude<ServiceRole, 'agent'>, p: UnitPaths = HOST_PATHS): string {
  const user = ROLE_USERS[role];
  const w = writable(role, p);
  return [
    `# ${unitName(role)}: written by llmgw's release (share/systemd/). Its user comes from share/sysusers.d/llmgw.conf.`,
    '[Unit]',
    `Description=${DESCRIPTIONS[role]}`,
    'After=network-online.target',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=exec',
    `User=${user}`,
    `Group=${user}`,
    ...(role === 'ca-worker' ? [`Environment=HOME=${p.caState}`] : []),
    `ExecStart=${execStart(role, p)}`,
    // Back in 5 s: at most two starts in systemd's 10 s window, so a role waiting for Temporal or MySQL keeps trying.
    'Restart=on-failure',
    'RestartSec=5',
    // A role finishes its requests within 30 s of SIGTERM and then exits by itself (cli/role-process.ts).
    'TimeoutStopSec=45',
    ...SERVER_SANDBOX,
    `# Writable: ${w.why}.`,
    ...w.lines,
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
}

/**
 * The agent's unit. `unitLines` go into [Service] (the trust plan's NODE_EXTRA_CA_CERTS); `script` is the start
 * script onboarding writes (/etc/llmgw/agent.sh).
 */
export function agentUnit(o: { description: string; unitLines: string[]; script: string; paths?: UnitPaths }): string {
  const p = o.paths ?? HOST_PATHS;
  return [
    '[Unit]',
    `Description=${o.description}`,
    // Never give up restarting (systemd's default limit, 5 starts in 10 s, would at RestartSec=1).
    'StartLimitIntervalSec=0',
    'After=network-online.target',
    'Wants=network-online.target',
    '',
    '[Service]',
    'Type=exec',
    `ExecStart=${o.script}`,
    ...o.unitLines,
    // always, not on-failure: an agent that exits cleanly (stopped by hand, or by a bug) leaves its engines
    // unsupervised; there is no state in which a node wants its agent gone and its unit still enabled.
    'Restart=always',
    // Back within a second or two: the engines serve on meanwhile (the control plane sees them answer and waits),
    // but nothing supervises them until the agent is back.
    'RestartSec=1',
    // Engines run under the agent's shims and outlive it (a restarted agent adopts them): stopping the
    // agent must not kill the rest of its cgroup.
    'KillMode=process',
    // The agent runs as root, unlike the other roles: sminfo opens /dev/infiniband/umad* (root's alone), engines
    // need the GPU and InfiniBand devices and pinned memory, and a renewal rewrites /etc/llmgw/node.key. Root's
    // capabilities are cut to three: CAP_IPC_LOCK (NCCL over InfiniBand registers pinned memory), CAP_SYS_NICE
    // (engines pin threads and raise their priority) and CAP_NET_ADMIN (the rank fence's nftables rules, which keep
    // multi-node ranks' ports to their replica's nodes: lib/rank-fence.ts). No PrivateDevices (the GPUs), no PrivateTmp (engines outlive
    // the agent, and a private /tmp goes when its unit stops), no system-call or address-family filter (CUDA,
    // RDMA's netlink and the engines' Python use more than a network service does).
    'NoNewPrivileges=yes',
    'ProtectSystem=strict',
    // Read-only rather than hidden: an operator's own engine binary (--vllm-bin …) may live under /home.
    'ProtectHome=read-only',
    'ProtectKernelModules=yes',
    'ProtectKernelLogs=yes',
    'ProtectControlGroups=yes',
    'RestrictSUIDSGID=yes',
    'LockPersonality=yes',
    'CapabilityBoundingSet=CAP_IPC_LOCK CAP_SYS_NICE CAP_NET_ADMIN',
    'LimitMEMLOCK=infinity',
    // pip's and the engines' caches (Hugging Face, Triton) under the agent's state, not /root.
    `Environment=HOME=${p.agentState}/home`,
    // Writable: engines' records, installs and weights; the certificate a renewal writes; the engines' /tmp. An
    // agent given --state-dir, --engines-dir or --weights-dir elsewhere needs that path here (systemctl edit).
    // StateDirectory makes /var/lib/llmgw before the sandbox is set up (onboarding does not).
    'StateDirectory=llmgw',
    `ReadWritePaths=${p.agentState} ${p.etc} -/var/log/llmgw /tmp /var/tmp`,
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
}

/** Every role's unit for a host (the agent's as shipped, before onboarding adds the node's name and trust line). */
export function roleUnits(p: UnitPaths = HOST_PATHS): Record<ServiceRole, string> {
  return {
    'control-plane': serverUnit('control-plane', p),
    gateway: serverUnit('gateway', p),
    'ca-worker': serverUnit('ca-worker', p),
    'proxmox-worker': serverUnit('proxmox-worker', p),
    agent: agentUnit({
      description: `${DESCRIPTIONS.agent} (llmgw onboard-node writes this with the node's name and CA)`,
      unitLines: [],
      script: `${p.etc}/agent.sh`,
      paths: p,
    }),
  };
}

/** share/sysusers.d/llmgw.conf: the system users of the server roles (systemd-sysusers makes them). */
export function sysusersConf(p: UnitPaths = HOST_PATHS): string {
  const home = (role: Exclude<ServiceRole, 'agent'>): string => (role === 'ca-worker' ? p.caState : '-');
  return [
    '# llmgw system users, one per role (the agent runs as root). Install as /etc/sysusers.d/llmgw.conf,',
    '# then: systemd-sysusers',
    ...(Object.keys(ROLE_USERS) as Exclude<ServiceRole, 'agent'>[]).map(
      (role) => `u ${ROLE_USERS[role]} - "llmgw ${role}" ${home(role)} -`,
    ),
    '',
  ].join('\n');
}

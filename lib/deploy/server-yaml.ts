/**
 * `llmgw init ROLE`'s server.yaml, cut from config/server.example.yaml: only the sections (and keys) that role reads,
 * with the example's own comments, so the two never say different things. Values a deployment sets differently from
 * the local-cluster defaults are replaced and marked with where they come from; values only the operator knows
 * (Temporal's address, the MySQL URL, the Proxmox API) are written as null marked REQUIRED, which the loader refuses,
 * naming the key, until they are filled in (or given as flags).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { release } from '../release';
import { HOST_PATHS, roleConfigPath } from './units';

/** The roles `llmgw init` writes a server.yaml for (the agent reads none: its flags are in /etc/llmgw/agent.sh). */
export const INIT_ROLES = ['control-plane', 'gateway', 'ca-worker', 'proxmox-worker'] as const;
export type InitRole = (typeof INIT_ROLES)[number];

/** Values init can be given on its command line; the flag that gives each. */
export interface InitValues {
  temporal?: string;
  mysql?: string;
  proxmox?: string;
}

/** Which top-level sections, and which keys of them ('all': the whole section), each role reads. */
export const ROLE_READS: Record<InitRole, Record<string, readonly string[] | 'all'>> = {
  'control-plane': {
    temporal: 'all',
    mysql: 'all',
    // The gateway listener is the gateway's; the control plane serves the API and the door.
    listeners: ['controlPlane', 'temporalDoor'],
    metrics: ['controlPlane'],
    // clientCert and clientKey are llmgw ctl's; the gateway certificate asks a starting replica behind its node's
    // door for /health.
    tls: ['ca', 'serverCert', 'serverKey', 'gatewayCert', 'gatewayKey'],
    engines: 'all',
    enginePorts: 'all',
    // It tells replicas how long a gateway may take to see them go.
    gateway: ['refreshMs'],
    drain: 'all',
    catalog: 'all',
  },
  // tls: the gateway certificate it presents at the nodes' doors (and to the control plane, for pushed routes).
  gateway: {
    mysql: 'all',
    listeners: ['gateway'],
    metrics: ['gateway'],
    tls: ['ca', 'gatewayCert', 'gatewayKey'],
    gateway: 'all',
  },
  'ca-worker': { temporal: 'all', mysql: 'all', metrics: ['caWorker'] },
  'proxmox-worker': { temporal: 'all', metrics: ['proxmoxWorker'], proxmox: 'all' },
};

/** Which flag fills which REQUIRED value. */
const REQUIRED_FLAGS = {
  temporal: { section: 'temporal', path: ['address'], flag: '--temporal HOST:PORT' },
  mysql: { section: 'mysql', path: ['url'], flag: '--mysql URL' },
  proxmox: { section: 'proxmox', path: ['url'], flag: '--proxmox https://HOST:8006' },
} as const;

/** The flags a role takes (those filling a section it reads). */
export function roleFlags(role: InitRole): (keyof InitValues)[] {
  return (Object.keys(REQUIRED_FLAGS) as (keyof InitValues)[]).filter(
    (k) => ROLE_READS[role][REQUIRED_FLAGS[k].section] !== undefined,
  );
}

/** A value init sets for a deployment, and the note saying where it comes from. */
interface Setting {
  section: string;
  path: string[];
  value: string | number | boolean | null;
  note: string;
}

/** What a deployment sets apart from the local-cluster defaults, per role. */
function deploymentSettings(role: InitRole): Setting[] {
  const etc = `${HOST_PATHS.etc}/${role}`;
  const ca: Setting = {
    section: 'tls',
    path: ['ca'],
    value: `${etc}/ca.crt`,
    note: "llmgw init: a copy of the CA host's ca.crt (llmgw ca init made it)",
  };
  // The nodes' doors take only a gateway certificate (onboarding serves every node's door by default).
  const gatewayCert: Setting[] = [
    {
      section: 'tls',
      path: ['gatewayCert'],
      value: `${etc}/gateway.crt`,
      note: 'llmgw init: from llmgw ca issue --gateway NAME on the CA host, copied here',
    },
    {
      section: 'tls',
      path: ['gatewayKey'],
      value: `${etc}/gateway.key`,
      note: `llmgw init: beside gatewayCert; owned by ${role === 'gateway' ? 'llmgw-gateway' : 'llmgw-control'}, mode 0600`,
    },
  ];
  const migrate: Setting = {
    section: 'mysql',
    path: ['autoMigrate'],
    value: false,
    note: 'llmgw init: upgrades run llmgw db migrate first, once (docs/deploying.md, Upgrades)',
  };
  switch (role) {
    case 'control-plane':
      return [
        migrate,
        ...(['controlPlane', 'temporalDoor'] as const).map((l): Setting => ({
          section: 'listeners',
          path: [l, 'host'],
          value: '0.0.0.0',
          note: 'llmgw init: agents reach it through the load balancer; narrow it to the address the balancer uses',
        })),
        ca,
        {
          section: 'tls',
          path: ['serverCert'],
          value: `${etc}/server.crt`,
          note: 'llmgw init: from llmgw ca issue-server on the CA host, copied here',
        },
        {
          section: 'tls',
          path: ['serverKey'],
          value: `${etc}/server.key`,
          note: 'llmgw init: beside serverCert; owned by llmgw-control, mode 0600',
        },
        ...gatewayCert,
      ];
    case 'gateway':
      return [
        migrate,
        {
          section: 'listeners',
          path: ['gateway', 'host'],
          value: '0.0.0.0',
          note: 'llmgw init: clients reach it through the load balancer; narrow it to the address the balancer uses',
        },
        ca,
        ...gatewayCert,
      ];
    case 'ca-worker':
      return [migrate];
    case 'proxmox-worker':
      return [
        {
          section: 'proxmox',
          path: ['tokenSecretFile'],
          value: `${etc}/token`,
          note: 'llmgw init: the API token secret, owned by llmgw-proxmox, mode 0600',
        },
        {
          section: 'proxmox',
          path: ['ca'],
          value: `${etc}/pve-root-ca.pem`,
          note: "llmgw init: a copy of the Proxmox host's /etc/pve/pve-root-ca.pem",
        },
      ];
    default: {
      const never: never = role;
      return never;
    }
  }
}

/** config/server.example.yaml's text: beside the program in a release, in config/ of a checkout or a build. */
export function exampleText(): string {
  const r = release();
  const file = r
    ? join(dirname(r.program), 'server.example.yaml')
    : join(__dirname, '../../config/server.example.yaml');
  return readFileSync(file, 'utf8');
}

/** One top-level section of the example: its comment lines, its key line and its body. */
interface Section {
  key: string;
  lines: string[];
}

/** The example split into its header and its sections (the example separates each with one blank line). */
export function splitSections(text: string): { header: string[]; sections: Section[] } {
  const chunks = text.replace(/\n+$/, '').split(/\n\s*\n/);
  const [header = '', ...rest] = chunks;
  const sections = rest.map((chunk): Section => {
    const lines = chunk.split('\n');
    const keyLine = lines.find((l) => /^[A-Za-z]\w*:/.test(l));
    if (!keyLine) throw new Error(`server.example.yaml: a block without a top-level key:\n${chunk}`);
    return { key: keyLine.slice(0, keyLine.indexOf(':')), lines };
  });
  return { header: header.split('\n'), sections };
}

/**
 * A section's keys at indent 2, each with the comment lines above it and, after it, its deeper lines and its
 * commented-out alternatives (`  # gateway: { … }`). Lines before the first key stay with the section's head.
 */
function subgroups(body: string[]): { head: string[]; groups: { key: string; lines: string[] }[] } {
  const head: string[] = [];
  const groups: { key: string; lines: string[] }[] = [];
  let pending: string[] = [];
  for (const line of body) {
    const key = /^ {2}([A-Za-z]\w*):/.exec(line);
    const alternative = /^ {2}# [a-z]\w*: /.test(line);
    const last = groups[groups.length - 1];
    if (key) {
      groups.push({ key: key[1]!, lines: [...pending, line] });
      pending = [];
    } else if (alternative && last && pending.length === 0) last.lines.push(line);
    else if (/^ {2}#/.test(line)) pending.push(line);
    else if (last) last.lines.push(...pending.splice(0), line);
    else head.push(...pending.splice(0), line);
  }
  if (pending.length) (groups[groups.length - 1]?.lines ?? head).push(...pending);
  return { head, groups };
}

/** A YAML scalar as server.yaml writes it: plain where that reads back the same, else double-quoted. */
function scalar(v: string | number | boolean | null): string {
  if (typeof v !== 'string') return String(v);
  return /^[A-Za-z0-9_./@:-]+$/.test(v) && !/^(null|true|false|yes|no|on|off|~|[\d.+-]+)$/i.test(v)
    ? v
    : JSON.stringify(v);
}

/** Replaces the value of `path` (keys under the section, one indent level each) and notes where it comes from. */
function setIn(lines: string[], path: string[], value: string, note: string, where: string): void {
  let from = 0;
  let to = lines.length;
  path.forEach((key, depth) => {
    const indent = ' '.repeat(2 * (depth + 1));
    const at = lines.findIndex((l, i) => i >= from && i < to && l.startsWith(`${indent}${key}:`));
    if (at < 0) throw new Error(`server.example.yaml has no ${where}`);
    let end = at + 1;
    while (end < to && (lines[end]!.startsWith(`${indent} `) || lines[end]!.trim() === '')) end++;
    if (depth === path.length - 1) lines[at] = `${indent}${key}: ${value} # ${note}`;
    from = at + 1;
    to = end;
  });
}

/** Turns the example's commented-out `proxmox:` block into the section itself (the example's default is null). */
function uncommentProxmox(s: Section): Section {
  const at = s.lines.indexOf('proxmox: null');
  if (at < 0) return s;
  const after = s.lines.slice(at + 1);
  if (!after.every((l) => l.startsWith('#'))) throw new Error('server.example.yaml: proxmox block not as expected');
  return { key: s.key, lines: [...s.lines.slice(0, at), ...after.map((l) => l.replace(/^# ?/, ''))] };
}

/** The server.yaml `llmgw init ROLE` writes. */
export function renderRoleConfig(role: InitRole, values: InitValues = {}, example: string = exampleText()): string {
  const reads = ROLE_READS[role];
  const { sections } = splitSections(example);
  const settings = deploymentSettings(role);
  for (const k of roleFlags(role)) {
    const r = REQUIRED_FLAGS[k];
    const given = values[k];
    settings.push({
      section: r.section,
      path: [...r.path],
      value: given ?? null,
      note:
        given === undefined
          ? `REQUIRED: fill in, or run llmgw init ${role} ${r.flag}`
          : `llmgw init ${r.flag.split(' ')[0]}`,
    });
  }
  const out: string[] = [
    `# server.yaml of llmgw's ${role} role, written by llmgw init ${role}. It runs as:`,
    `#   llmgw ${role} --config ${roleConfigPath(role)}   (share/systemd/llmgw-${role}.service)`,
    '# Only the sections and keys this role reads are here; every other key keeps its built-in default. The comments',
    '# are config/server.example.yaml\'s, which has every key. A value marked "# llmgw init: …" is set for a',
    '# deployment, and says where it comes from; one marked "# REQUIRED" is null until you fill it in (the role',
    '# refuses to start until then, naming the key); unmarked values are the built-in defaults.',
    `# Check what this host reaches with the file as it is: llmgw init ${role} --check FILE`,
  ];
  for (const section of sections) {
    const keep = reads[section.key];
    if (keep === undefined) continue;
    const s = section.key === 'proxmox' ? uncommentProxmox(section) : section;
    const keyAt = s.lines.findIndex((l) => l.startsWith(`${s.key}:`));
    let lines = s.lines.slice(keyAt + 1);
    if (keep !== 'all') {
      const { head, groups } = subgroups(lines);
      const missing = keep.filter((k) => !groups.some((g) => g.key === k));
      if (missing.length) throw new Error(`server.example.yaml: ${s.key} has no ${missing.join(', ')}`);
      lines = [...head, ...groups.filter((g) => keep.includes(g.key)).flatMap((g) => g.lines)];
    }
    for (const set of settings.filter((x) => x.section === s.key))
      setIn(lines, set.path, scalar(set.value), set.note, [s.key, ...set.path].join('.'));
    out.push('', ...s.lines.slice(0, keyAt + 1), ...lines);
  }
  return `${out.join('\n')}\n`;
}

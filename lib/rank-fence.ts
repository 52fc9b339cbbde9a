/**
 * The rank fence: the ports a multi-node replica's ranks reach each other on (llama.cpp's ggml-rpc-server,
 * vLLM's master port, SGLang's dist-init port; each engine's `rankPorts`) accept only that replica's own nodes.
 * One nftables table, `inet llmgw`: its input chain sends TCP to a fenced port through the map `rank_ports`
 * (port -> `jump rank-<shard key>`) into one chain per shard, which accepts the shard's peers and resets the rest.
 * Every change is one `nft -f -` transaction (all of it or none), read back with `nft -j list table` before it
 * counts. docs/identity.md says what it fences and what it cannot.
 */
import { spawn } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { LlmgwError } from './errors';

export const FENCE_TABLE = 'llmgw';
const MAP = 'rank_ports';
const CHAIN_PREFIX = 'rank-';
/** A shard key (lib/engine-state.ts shardKey) is also an nft identifier once prefixed: letters, digits, '.', '_', '-'. */
const KEY_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** One shard's fence: its key, the ports other ranks reach it on, and the addresses allowed in (IP literals). */
export interface ShardFence {
  key: string;
  ports: number[];
  peers: string[];
}

/** What the table holds, as read back from `nft -j list table inet llmgw`. */
export interface FenceTable {
  /** the table, its map and its input chain with both rules are there */
  base: boolean;
  /** each shard chain's key -> the addresses its rules accept */
  chains: Map<string, string[]>;
  /** each fenced port -> the key of the chain it jumps to */
  ports: Map<number, string>;
}

export const emptyTable = (): FenceTable => ({ base: false, chains: new Map(), ports: new Map() });

/** The nft chain of a shard key. */
export function chainOf(key: string): string {
  if (!KEY_RE.test(key) || key.includes('..')) throw new Error(`"${key}" is not a shard key`);
  return `${CHAIN_PREFIX}${key}`;
}

function checkFence(f: ShardFence): void {
  chainOf(f.key);
  for (const p of f.ports)
    if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error(`rank fence of ${f.key}: port ${p} is not a port`);
  for (const a of f.peers)
    if (!isIP(a)) throw new Error(`rank fence of ${f.key}: peer "${a}" is not an IP address (resolve it first)`);
}

/** The table, its map and its input chain, declared idempotently (`add` of what exists is no error). */
function baseScript(): string[] {
  const t = `inet ${FENCE_TABLE}`;
  return [
    `add table ${t}`,
    `add map ${t} ${MAP} { type inet_service : verdict ; }`,
    // Before a distribution's own filter (priority 0): a peer's packet still meets any drop of the host's firewall.
    `add chain ${t} input { type filter hook input priority filter - 10 ; policy accept ; }`,
    `flush chain ${t} input`,
    // The node's own processes (the agent's waitListening, a local health check) reach its ranks over lo.
    `add rule ${t} input iif lo accept`,
    `add rule ${t} input tcp dport vmap @${MAP}`,
  ];
}

/**
 * The `nft -f -` script that fences one shard, given what the table holds now: its chain (re)written with its
 * peers, its ports pointed at it, and ports it held before but no longer names released. Idempotent.
 */
export function installScript(f: ShardFence, now: FenceTable): string {
  checkFence(f);
  const t = `inet ${FENCE_TABLE}`;
  const chain = chainOf(f.key);
  const v4 = f.peers.filter((a) => isIP(a) === 4);
  const v6 = f.peers.filter((a) => isIP(a) === 6);
  const lines = [...baseScript(), `add chain ${t} ${chain}`, `flush chain ${t} ${chain}`];
  if (v4.length) lines.push(`add rule ${t} ${chain} ip saddr { ${v4.join(', ')} } accept`);
  if (v6.length) lines.push(`add rule ${t} ${chain} ip6 saddr { ${v6.join(', ')} } accept`);
  // A reset rather than a silent drop: a rank dialling a port not meant for it fails at once, not at a timeout.
  lines.push(`add rule ${t} ${chain} reject with tcp reset`);
  const mine = new Set(f.ports);
  const taken = [...now.ports].filter(([p, k]) => mine.has(p) || k === f.key).map(([p]) => p);
  // A port another (stale) shard's chain held is taken over: leases hand a port to one shard of a host at a time.
  if (taken.length) lines.push(`delete element ${t} ${MAP} { ${taken.join(', ')} }`);
  if (f.ports.length)
    lines.push(`add element ${t} ${MAP} { ${f.ports.map((p) => `${p} : jump ${chain}`).join(', ')} }`);
  return `${lines.join('\n')}\n`;
}

/** The script that removes a shard's fence (its ports, then its chain), or null when the table has none of it. */
export function removeScript(key: string, now: FenceTable): string | null {
  const t = `inet ${FENCE_TABLE}`;
  const chain = chainOf(key);
  const ports = [...now.ports].filter(([, k]) => k === key).map(([p]) => p);
  const lines: string[] = [];
  if (ports.length) lines.push(`delete element ${t} ${MAP} { ${ports.join(', ')} }`);
  if (now.chains.has(key)) lines.push(`delete chain ${t} ${chain}`);
  return lines.length ? `${lines.join('\n')}\n` : null;
}

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | null => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Json) : null);

/** The addresses a rule `ip saddr {…} accept` / `ip6 saddr X accept` accepts ([] for any other rule). */
function acceptedAddresses(expr: unknown): string[] {
  if (!Array.isArray(expr) || !expr.some((e) => obj(e) && 'accept' in (e as Json))) return [];
  const out: string[] = [];
  for (const e of expr) {
    const m = obj(obj(e)?.match);
    const field = obj(obj(m?.left)?.payload)?.field;
    if (!m || field !== 'saddr') continue;
    const right = m.right;
    const set = obj(right)?.set;
    for (const a of Array.isArray(set) ? set : [right]) if (typeof a === 'string') out.push(a);
  }
  return out;
}

/** Reads `nft -j list table inet llmgw` output (or '' for no table) into what the fence holds. */
export function parseTable(json: string): FenceTable {
  const out = emptyTable();
  if (!json.trim()) return out;
  const doc = obj(JSON.parse(json));
  const items = doc?.nftables;
  if (!Array.isArray(items)) throw new Error('nft -j output has no "nftables" array');
  let map = false;
  let input = false;
  const inputRules = { lo: false, vmap: false };
  for (const item of items) {
    const o = obj(item);
    const chain = obj(o?.chain);
    if (chain && chain.table === FENCE_TABLE) {
      const name = String(chain.name);
      if (name === 'input') input = chain.hook === 'input';
      else if (name.startsWith(CHAIN_PREFIX)) out.chains.set(name.slice(CHAIN_PREFIX.length), []);
    }
    const m = obj(o?.map);
    if (m && m.table === FENCE_TABLE && m.name === MAP) {
      map = true;
      for (const el of Array.isArray(m.elem) ? m.elem : []) {
        if (!Array.isArray(el)) continue;
        const target = obj(obj(el[1])?.jump)?.target;
        if (typeof el[0] === 'number' && typeof target === 'string' && target.startsWith(CHAIN_PREFIX))
          out.ports.set(el[0], target.slice(CHAIN_PREFIX.length));
      }
    }
    const rule = obj(o?.rule);
    if (rule && rule.table === FENCE_TABLE) {
      const name = String(rule.chain);
      if (name === 'input') {
        const text = JSON.stringify(rule.expr);
        if (text.includes('"iif"') && text.includes('"lo"')) inputRules.lo = true;
        if (text.includes(`"@${MAP}"`)) inputRules.vmap = true;
      } else if (name.startsWith(CHAIN_PREFIX)) {
        const key = name.slice(CHAIN_PREFIX.length);
        out.chains.set(key, [...(out.chains.get(key) ?? []), ...acceptedAddresses(rule.expr)]);
      }
    }
  }
  out.base = map && input && inputRules.lo && inputRules.vmap;
  return out;
}

/** Runs nft: `args`, with `stdin` as its input; resolves with its stdout, rejects with its stderr. */
export type NftRunner = (args: string[], stdin?: string) => Promise<string>;

/** nft as a process: `argv` is its command (`['nft']`, or `['ip', 'netns', 'exec', NS, 'nft']` in tests). */
export function nftProcess(argv: readonly string[] = ['nft']): NftRunner {
  return (args, stdin) =>
    new Promise((resolve, reject) => {
      const [bin, ...pre] = argv;
      // stdin only for a script: a `list` exits without reading it, and a write to it would fail with EPIPE.
      const p = spawn(bin as string, [...pre, ...args], {
        stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      p.stdout?.on('data', (d: Buffer) => (out += d.toString()));
      p.stderr?.on('data', (d: Buffer) => (err += d.toString()));
      p.on('error', reject);
      p.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`nft ${args.join(' ')}: ${err.trim() || `exit ${code}`}`)),
      );
      if (p.stdin) {
        // nft failing early closes its stdin: its exit code and stderr say why, not this EPIPE.
        p.stdin.on('error', () => undefined);
        p.stdin.end(stdin);
      }
    });
}

/** Each host's addresses (an IP literal as it is; a name resolved to all of its addresses), deduplicated. */
export async function peerAddresses(hosts: readonly string[]): Promise<string[]> {
  const out = new Set<string>();
  for (const h of hosts) {
    if (isIP(h)) out.add(h);
    else for (const a of await lookup(h, { all: true })) out.add(a.address);
  }
  return [...out];
}

function fenceError(message: string, fields: Record<string, unknown>): LlmgwError {
  return new LlmgwError('LLMGW_RANK_FENCE_FAILED', message, fields);
}

/**
 * The fence of one node: installs and removes shards' chains, one change at a time (each reads the table, applies
 * one transaction and reads it back). Idempotent; a new agent adopts what the table holds (install rewrites a
 * shard's chain in place) and `sweep` removes what no live engine wants.
 */
export class RankFence {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly nft: NftRunner) {}

  /** What the table holds now. */
  async read(): Promise<FenceTable> {
    try {
      return parseTable(await this.nft(['-j', 'list', 'table', 'inet', FENCE_TABLE]));
    } catch (err) {
      // No table yet: nft says "No such file or directory".
      if (/No such file or directory/.test((err as Error).message)) return emptyTable();
      throw err;
    }
  }

  /** Fences a shard's ports to its peers (replacing any fence it had); resolves once the table reads back so. */
  install(fence: ShardFence): Promise<void> {
    const f = { ...fence, peers: [...new Set(fence.peers)], ports: [...new Set(fence.ports)] };
    return this.serial(async () => {
      await this.apply(installScript(f, await this.read()));
      const now = await this.read();
      const peers = now.chains.get(f.key);
      const wrong = f.ports.filter((p) => now.ports.get(p) !== f.key);
      if (!now.base || !peers || wrong.length || [...f.peers].sort().join() !== [...peers].sort().join())
        throw fenceError(`rank fence of ${f.key}: the table does not read back as installed`, {
          key: f.key,
          ports: f.ports,
          missing: wrong,
        });
    });
  }

  /** Removes a shard's fence (nothing to do when it has none); resolves once the table reads back without it. */
  remove(key: string): Promise<void> {
    return this.serial(async () => {
      const script = removeScript(key, await this.read());
      if (!script) return;
      await this.apply(script);
      const now = await this.read();
      if (now.chains.has(key) || [...now.ports.values()].includes(key))
        throw fenceError(`rank fence of ${key}: still in the table after its removal`, { key });
    });
  }

  /** Removes every shard's fence `keep` says no; returns the keys removed. */
  async sweep(keep: (key: string) => boolean): Promise<string[]> {
    const now = await this.serial(() => this.read());
    const stale = [...new Set([...now.chains.keys(), ...now.ports.values()])].filter((k) => !keep(k));
    for (const k of stale) await this.remove(k);
    return stale;
  }

  private async apply(script: string): Promise<void> {
    await this.nft(['-f', '-'], script);
  }

  private serial<T>(f: () => Promise<T>): Promise<T> {
    const run = this.queue.then(f, f);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

/** Whether this process can fence: root, nft on PATH, and nft allowed to read the ruleset (CAP_NET_ADMIN). */
export async function fenceAvailable(
  nft: NftRunner,
  uid: number | undefined = process.getuid?.(),
): Promise<{ ok: true } | { ok: false; reason: string }> {
  if (uid !== 0) return { ok: false, reason: `the agent is not root (uid ${uid}), and only root may change nftables` };
  try {
    await nft(['list', 'tables']);
    return { ok: true };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ENOENT') return { ok: false, reason: 'nft is not installed (apt-get install nftables)' };
    return {
      ok: false,
      reason: `nft cannot read the ruleset (${e.message}); the agent's unit needs CAP_NET_ADMIN in CapabilityBoundingSet`,
    };
  }
}

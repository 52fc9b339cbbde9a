/**
 * Test hosts: machines on a network of the test's own, each a real OpenSSH sshd in a network namespace with
 * its own address, hostname (a UTS namespace: `uname -n` is the node id, the real machine's hostname untouched)
 * and filesystem view — /etc, /opt, /usr and /var are copy-on-write overlays of this machine's, /run is its own,
 * and the working tree is hidden, so what onboarding installs lands in the test host alone and nothing there
 * can lean on the checkout. No systemd runs in them (onboarding uses its start script). Needs root.
 *
 *   const lan = await startTestNetwork();           // a bridge, 10.254.X.1/24 on this machine
 *   const host = await lan.startHost({ nodeId: 'node-a', authorizedKeys: [pub] });
 *   await host.exec('uname -n');                    // a root shell "on the machine"
 *   await host.stop(); await lan.close();
 *
 * A run killed before its close leaves a network behind: the next startTestNetwork removes those whose owner
 * is gone (a lock directory per network under /tmp/llmgw-testnet names the owner's pid).
 */
import { execFile, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { waitFor } from './wait';

const run = promisify(execFile);
const LOCKS = '/tmp/llmgw-testnet';
/** The checkout: hidden inside test hosts. */
const ROOT = resolve(__dirname, '../..');
const SSHD = '/usr/sbin/sshd';

export type HostKeyType = 'ed25519' | 'ecdsa' | 'rsa';

export interface TestHostOptions {
  /** its hostname */
  nodeId: string;
  /** authorized_keys lines for root */
  authorizedKeys: string[];
  /** default: the network's next free address */
  address?: string;
  /** host key files to use (a machine that keeps its keys across a restart); default: new keys of `hostKeyTypes` */
  hostKeyFiles?: string[];
  /** default ['ed25519'] */
  hostKeyTypes?: HostKeyType[];
  /** sshd starts only this long after the machine (its address answers with refusals meanwhile) */
  sshdAfterMs?: number;
  /** sshd starts only when the test calls `startSshd()` (the address answers with refusals until then) */
  sshdHeld?: boolean;
  /** files removed from the machine's view, e.g. a library it "lacks" */
  remove?: string[];
  /** what /proc/cpuinfo reads inside the machine (a file bind-mounted over it), e.g. a VM's CPU model; default: this machine's */
  cpuinfo?: string;
}

export interface TestHost {
  nodeId: string;
  address: string;
  /** its host key files (private; `.pub` beside each) */
  hostKeyFiles: string[];
  /** `SHA256:…` of each host key, as ssh-keygen prints it */
  fingerprints: string[];
  /** Runs a shell command as root inside the machine (its namespaces), not over ssh. */
  exec(command: string, o?: { stdin?: string }): Promise<{ code: number; stdout: string; stderr: string }>;
  /** sshd's log */
  sshdLog(): string;
  /** Lets a held sshd (`sshdHeld`) start. */
  startSshd(): void;
  /** Kills every process of the machine and removes it (its address is free again). */
  stop(): Promise<void>;
}

/**
 * A lighter test host for llmgw's own roles: a network namespace alone (address, routes), no sshd, no overlays, the
 * checkout visible — processes are started in it with `spawn` (ip netns exec), as a role's unit would on its host.
 */
export interface RoleHost {
  name: string;
  address: string;
  /** the netns name (`ip netns exec NS …`) */
  ns: string;
  /** Spawns `command ARGS…` inside the host's network namespace (the pid is the command's: ip netns exec execs). */
  spawn(command: string, args: string[], o?: SpawnOptions): ChildProcess;
  /** Runs a shell command inside the host's network namespace. */
  exec(command: string): Promise<{ code: number; stdout: string; stderr: string }>;
  /**
   * The host's firewall: from then on it answers, on its network interface, only `sources` (addresses); anything
   * else sent to it is refused by policy routing (`ip rule … prohibit`: no route back, so no ARP answer and no
   * handshake, and the sender's connect fails with EHOSTUNREACH). Loopback inside the host is untouched.
   */
  allowOnly(sources: string[]): Promise<void>;
  /** Kills every process in the namespace and removes it. */
  stop(): Promise<void>;
}

export interface TestNetwork {
  /** this machine's address on the network: what test hosts reach it at */
  gateway: string;
  startHost(o: TestHostOptions): Promise<TestHost>;
  startRoleHost(name: string): Promise<RoleHost>;
  close(): Promise<void>;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function ip(...args: string[]): Promise<string> {
  return (await run('ip', args)).stdout;
}

/** Every process in netns `ns` killed (TERM, then KILL), then the netns deleted. */
async function removeNetns(ns: string): Promise<void> {
  const pids = async (): Promise<number[]> =>
    (await ip('netns', 'pids', ns).catch(() => '')).split('\n').filter(Boolean).map(Number);
  for (const sig of ['SIGTERM', 'SIGKILL'] as const) {
    for (const pid of await pids())
      try {
        process.kill(pid, sig);
      } catch {
        /* gone */
      }
    for (let i = 0; i < 30 && (await pids()).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
  }
  await ip('netns', 'del', ns).catch(() => undefined);
}

/** Removes what a dead owner left: its netns, its bridge, its lock. */
async function reclaim(x: number): Promise<void> {
  for (const line of (await ip('netns', 'list')).split('\n')) {
    const ns = line.split(' ')[0] ?? '';
    if (ns.startsWith(`llmgw-t${x}-`)) await removeNetns(ns);
  }
  await ip('link', 'del', `lgb${x}`).catch(() => undefined);
  rmSync(join(LOCKS, String(x)), { recursive: true, force: true });
}

/** Takes a free /24 (10.254.X.0) under a lock directory of this process's. */
async function takeSubnet(): Promise<number> {
  mkdirSync(LOCKS, { recursive: true });
  for (const d of readdirSync(LOCKS)) {
    const owner = Number(readFileSync(join(LOCKS, d, 'pid'), 'utf8').trim() || 0);
    if (!alive(owner)) await reclaim(Number(d));
  }
  for (let tries = 0; tries < 100; tries++) {
    const x = 1 + Math.floor(Math.random() * 250);
    try {
      mkdirSync(join(LOCKS, String(x)));
    } catch {
      continue;
    }
    writeFileSync(join(LOCKS, String(x), 'pid'), String(process.pid));
    return x;
  }
  throw new Error(`no free test subnet under ${LOCKS}`);
}

async function keygen(dir: string, type: HostKeyType): Promise<string> {
  const file = join(dir, `ssh_host_${type}_key`);
  await run('ssh-keygen', ['-q', '-t', type, '-N', '', '-C', `test host ${type}`, '-f', file]);
  return file;
}

async function fingerprintOf(file: string): Promise<string> {
  return (await run('ssh-keygen', ['-l', '-E', 'sha256', '-f', `${file}.pub`])).stdout.split(' ')[1] ?? '';
}

/** Makes a network of this test's own: a bridge with 10.254.X.1/24. */
export async function startTestNetwork(): Promise<TestNetwork> {
  if (process.getuid?.() !== 0) throw new Error('test hosts need root (network namespaces, overlays)');
  if (!existsSync(SSHD)) throw new Error(`${SSHD} is missing: run bash scripts/setup.sh (it installs openssh-server)`);
  const x = await takeSubnet();
  const bridge = `lgb${x}`;
  const gateway = `10.254.${x}.1`;
  await ip('link', 'add', bridge, 'type', 'bridge');
  await ip('addr', 'add', `${gateway}/24`, 'dev', bridge);
  await ip('link', 'set', bridge, 'up');
  let next = 2;
  let n = 0;
  const hosts = new Set<{ stop(): Promise<void> }>();
  /** A new netns `llmgw-tX-I` with eth0 on the bridge at `address` (default route via this machine). */
  const plug = async (i: number, address: string): Promise<string> => {
    const ns = `llmgw-t${x}-${i}`;
    const veth = `lgv${x}h${i}`;
    await ip('netns', 'add', ns);
    await ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', `lgv${x}n${i}`);
    await ip('link', 'set', veth, 'master', bridge, 'up');
    await ip('link', 'set', `lgv${x}n${i}`, 'netns', ns);
    await ip('-n', ns, 'link', 'set', `lgv${x}n${i}`, 'name', 'eth0');
    await ip('-n', ns, 'link', 'set', 'lo', 'up');
    await ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
    await ip('-n', ns, 'link', 'set', 'eth0', 'up');
    await ip('-n', ns, 'route', 'add', 'default', 'via', gateway);
    // A machine started again at an address another one had: this side must not keep sending to the old one's MAC.
    await ip('neigh', 'flush', 'to', address, 'dev', bridge).catch(() => undefined);
    return ns;
  };

  return {
    gateway,
    async startHost(o: TestHostOptions): Promise<TestHost> {
      const i = ++n;
      const address = o.address ?? `10.254.${x}.${next++}`;
      const ns = `llmgw-t${x}-${i}`;
      const dir = mkdtempSync(join(tmpdir(), `llmgw-testhost-${o.nodeId}-`));
      const keys = o.hostKeyFiles ?? (await Promise.all((o.hostKeyTypes ?? ['ed25519']).map((t) => keygen(dir, t))));
      // sshd reads authorized_keys as the user logging in (root, or another account a test makes).
      chmodSync(dir, 0o755);
      writeFileSync(join(dir, 'authorized_keys'), `${o.authorizedKeys.join('\n')}\n`, { mode: 0o644 });
      writeFileSync(
        join(dir, 'sshd_config'),
        [
          `ListenAddress ${address}`,
          'Port 22',
          ...keys.map((k) => `HostKey ${k}`),
          `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
          `PidFile ${join(dir, 'sshd.pid')}`,
          'UsePAM no',
          'StrictModes no',
          'PasswordAuthentication no',
          'KbdInteractiveAuthentication no',
          'PermitRootLogin prohibit-password',
          'UseDNS no',
          'Subsystem sftp internal-sftp',
          'MaxStartups 100',
          '',
        ].join('\n'),
      );
      if (o.cpuinfo !== undefined) writeFileSync(join(dir, 'cpuinfo'), o.cpuinfo, { mode: 0o444 });
      for (const d of ['etc', 'opt', 'usr', 'var'])
        for (const layer of ['up', 'work']) mkdirSync(join(dir, layer, d), { recursive: true });
      const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;
      writeFileSync(
        join(dir, 'boot.sh'),
        [
          'set -e',
          `hostname ${q(o.nodeId)}`,
          // Copy-on-write views of this machine: what is installed there stays in dir/up.
          ...['etc', 'opt', 'usr', 'var'].map(
            (d) => `mount -t overlay overlay -o lowerdir=/${d},upperdir=${dir}/up/${d},workdir=${dir}/work/${d} /${d}`,
          ),
          // As cloud-init writes it: the machine resolves its own name (sudo looks it up, and there is no DNS here).
          `printf '127.0.1.1 %s\\n' ${q(o.nodeId)} >> /etc/hosts`,
          'mount -t tmpfs tmpfs /run',
          `mount -t tmpfs tmpfs ${q(ROOT)}`,
          'mkdir -p /run/sshd',
          ...(o.cpuinfo !== undefined ? [`mount --bind ${q(join(dir, 'cpuinfo'))} /proc/cpuinfo`] : []),
          ...(o.remove ?? []).map((f) => `rm -f ${q(f)}`),
          'echo "machine booted"',
          `${o.sshdAfterMs ? `sleep ${o.sshdAfterMs / 1000}` : 'true'}`,
          o.sshdHeld ? `while [ ! -e ${q(join(dir, 'sshd.go'))} ]; do sleep 0.05; done` : 'true',
          `exec ${SSHD} -D -e -f ${dir}/sshd_config`,
          '',
        ].join('\n'),
      );

      await plug(i, address);

      const log = join(dir, 'sshd.log');
      const out = openSync(log, 'a');
      // ip netns exec and unshare exec (no fork), and boot.sh ends in exec: this pid is the machine's first process.
      const machine = spawn(
        'ip',
        ['netns', 'exec', ns, 'unshare', '--uts', '--mount', '--propagation', 'private', 'sh', join(dir, 'boot.sh')],
        { stdio: ['ignore', out, out], detached: true },
      );
      machine.unref();
      closeSync(out);
      const pid = machine.pid!;
      const host: TestHost = {
        nodeId: o.nodeId,
        address,
        hostKeyFiles: keys,
        fingerprints: await Promise.all(keys.map(fingerprintOf)),
        exec: (command, eo = {}) =>
          new Promise((res) => {
            const c = spawn('nsenter', ['-t', String(pid), '-m', '-u', '-n', '--', 'sh', '-c', command], {
              stdio: ['pipe', 'pipe', 'pipe'],
            });
            let stdout = '';
            let stderr = '';
            c.stdout.on('data', (b: Buffer) => void (stdout += b));
            c.stderr.on('data', (b: Buffer) => void (stderr += b));
            c.on('close', (code) => res({ code: code ?? -1, stdout, stderr }));
            c.stdin.on('error', () => undefined); // a command that does not read its input
            c.stdin.end(eo.stdin ?? '');
          }),
        sshdLog: () => (existsSync(log) ? readFileSync(log, 'utf8') : ''),
        startSshd: () => writeFileSync(join(dir, 'sshd.go'), ''),
        async stop() {
          hosts.delete(host);
          await removeNetns(ns);
          rmSync(dir, { recursive: true, force: true });
        },
      };
      hosts.add(host);
      // The namespaces are made at once; sshd listens now, or after sshdAfterMs.
      await waitFor(() => /machine booted/.test(host.sshdLog()), {
        timeoutMs: 10_000,
        intervalMs: 50,
        what: `test host ${o.nodeId} to boot (${log}: ${host.sshdLog()})`,
      });
      if (!o.sshdAfterMs && !o.sshdHeld)
        await waitFor(() => /Server listening/.test(host.sshdLog()), {
          timeoutMs: 10_000,
          intervalMs: 50,
          what: `sshd of ${o.nodeId} to listen (log: ${host.sshdLog()})`,
        });
      return host;
    },
    async startRoleHost(name: string): Promise<RoleHost> {
      const address = `10.254.${x}.${next++}`;
      const ns = await plug(++n, address);
      const inNs = (command: string, args: string[]): [string, string[]] => [
        'ip',
        ['netns', 'exec', ns, command, ...args],
      ];
      const host: RoleHost = {
        name,
        address,
        ns,
        spawn: (command, args, o = {}) => spawn(...inNs(command, args), o),
        exec: async (command) => {
          const r = await run(...inNs('sh', ['-c', command])).catch(
            (e: { code?: number; stdout?: string; stderr?: string }) => ({ ...e, failed: true }),
          );
          return {
            code: 'failed' in r ? (typeof r.code === 'number' ? r.code : 1) : 0,
            stdout: r.stdout ?? '',
            stderr: r.stderr ?? '',
          };
        },
        async allowOnly(sources) {
          // The local table moves behind the rules (its pref 0 would answer every address first).
          const rules = [
            'ip rule add pref 100 lookup local',
            'ip rule del pref 0',
            ...sources.map((a, k) => `ip rule add pref ${10 + k} iif eth0 from ${a} lookup local`),
            'ip rule add pref 99 iif eth0 prohibit',
          ];
          const r = await host.exec(rules.join(' && '));
          if (r.code !== 0) throw new Error(`the firewall of ${name} (${ns}) was not set: ${r.stderr}`);
        },
        async stop() {
          hosts.delete(host);
          await removeNetns(ns);
        },
      };
      hosts.add(host);
      return host;
    },
    async close() {
      for (const h of [...hosts]) await h.stop();
      await ip('link', 'del', bridge).catch(() => undefined);
      rmSync(join(LOCKS, String(x)), { recursive: true, force: true });
    },
  };
}

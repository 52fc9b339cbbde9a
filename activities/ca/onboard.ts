/**
 * Onboarding's steps, each an activity on llmgw-ca (the host with the CA key and the ssh key): wait for ssh,
 * learn the host key (accept-new), issue the certificate, install, probe the engines, start the agent, wait
 * for its registration. Each heartbeats what it waits for and ends in a typed failure saying what to do.
 * Every step is idempotent: a rerun on a finished node changes nothing.
 */
import { createHash, createPublicKey, X509Certificate } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ErrorCode } from '../../lib/errors';
import {
  agentScript,
  engineProbes,
  fallbackServiceScript,
  NODE_PATHS,
  shQuote,
  systemdUnit,
  type AgentConfig,
} from '../../lib/onboard/plan';
import { caPaths, certificateInfo, makeNodeCsr, NODE_CA_PATH, renewAt, trustInstallPlan } from '../../lib/pki';
import { platformOfMachine } from '../../lib/release';
import { NODE_SEEN_STALE_MS } from '../../lib/liveness';
import { openSsh, SshConnectError, type SshSession } from '../../lib/ssh/client';
import { decideHostKey, preferredHostKeyAlgorithms } from '../../lib/ssh/host-key';
import type { HostKeyStore } from '../../lib/store/host-keys';
import type { Store } from '../../lib/store/store';
import type { OnboardHeartbeat, OnboardInput, StepId, StepResult } from '../../workflows/contracts/onboard';
import type { CaOperations } from './index';
import { knownHostSsh } from './connect';
import { createEnginesWait } from './engines-wait';
import type { Remote } from './remote';

export interface OnboardDeps {
  /** the CA directory: its ca.crt is the root the node trusts */
  caDir: string;
  store: Pick<Store, 'certificateBySerial'>;
  hostKeys: HostKeyStore;
  ca: Pick<CaOperations, 'signNodeCsr'>;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** default: the activity's heartbeat */
  heartbeat?: (details: OnboardHeartbeat) => void;
}

/** A failure no retry fixes: the workflow reports it with its step. */
const fail = (type: ErrorCode, message: string): ApplicationFailure =>
  ApplicationFailure.create({ type, message, nonRetryable: true });

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
const tail = (s: string, lines = 20): string => s.trim().split('\n').slice(-lines).join('\n');
const sha256File = (file: string): Promise<string> =>
  new Promise((res, rej) => {
    const h = createHash('sha256');
    createReadStream(file)
      .on('data', (b) => h.update(b))
      .on('end', () => res(h.digest('hex')))
      .on('error', rej);
  });
const spki = (k: ReturnType<typeof createPublicKey>): string =>
  k.export({ type: 'spki', format: 'der' }).toString('base64');

/** The agent's configuration from onboarding's input. */
function agentConfig(input: OnboardInput): AgentConfig {
  return {
    nodeId: input.nodeId,
    server: input.server,
    advertiseHost: input.advertiseHost,
    door: input.door !== false,
    fabrics: input.fabrics,
    nvidiaSmi: input.nvidiaSmi,
    noGpu: input.noGpu,
    ibRoot: input.ibRoot,
    bins: input.bins,
    caPath: NODE_CA_PATH,
  };
}

/** Builds the onboarding activities. */
export function createOnboardActivities(deps: OnboardDeps) {
  const log = deps.log ?? ((): void => undefined);
  const beat = deps.heartbeat ?? ((d: OnboardHeartbeat): void => Context.current().heartbeat(d));

  /** Heartbeats `waitingFor` now and every 5 s while `fn` runs (long commands, uploads). */
  const waitingFor = async <T>(step: StepId, what: () => string, fn: () => Promise<T>): Promise<T> => {
    beat({ step, waitingFor: what() });
    const t = setInterval(() => beat({ step, waitingFor: what() }), 5000);
    try {
      return await fn();
    } finally {
      clearInterval(t);
    }
  };

  const { privateKey, changedKey, connect } = knownHostSsh(deps.hostKeys);

  /** Runs `command` on the node; a non-zero exit fails the step with its output and `fix`. */
  const must = async (r: Remote, command: string, fix: string, timeoutMs = 120_000): Promise<string> => {
    const res = await r.sh(command, { timeoutMs });
    if (res.code !== 0)
      throw fail(
        'LLMGW_ONBOARD_FAILED',
        `\`${command}\` failed on the node (exit ${res.code ?? res.signal}):\n${tail(`${res.stdout}\n${res.stderr}`)}\n${fix}`,
      );
    return res.stdout;
  };

  const hasSystemd = async (r: Remote): Promise<boolean> => (await r.sh('test -d /run/systemd/system')).code === 0;

  return {
    ...createEnginesWait(deps),

    /** Waits until ssh answers and lets the CA host's key in, through a new machine's refusals and resets. */
    async waitForSsh(input: OnboardInput): Promise<StepResult> {
      const key = privateKey(input);
      const started = Date.now();
      const deadline = started + input.sshDeadlineS * 1000;
      let delay = 1000;
      let attempts = 0;
      let last = '';
      let authRefusedSince: number | null = null;
      for (;;) {
        attempts++;
        const at = Date.now();
        beat({
          step: 'waitForSsh',
          waitingFor: `ssh ${input.sshUser}@${input.addr}:${input.sshPort}, attempt ${attempts}${last ? ` (last: ${last})` : ''}`,
        });
        try {
          // Any host key will do here: the next step judges it, on a connection of its own.
          const s: SshSession = await openSsh({
            host: input.addr,
            port: input.sshPort,
            username: input.sshUser,
            privateKey: key,
            verify: () => true,
            readyTimeoutMs: 15_000,
          });
          s.close();
          return {
            summary: `ssh answered${attempts > 1 ? ` after ${attempts} attempts, ${secs(at - started)} of waiting` : ''}`,
            waitedMs: at - started,
            changed: false,
          };
        } catch (err) {
          if (!(err instanceof SshConnectError))
            throw fail('LLMGW_SSH_REFUSED', `cannot use the ssh key ${input.sshKeyPath}: ${(err as Error).message}`);
          last = `${err.kind}: ${err.message.replace(/^[^ ]+: /, '')}`;
          if (err.kind === 'auth') {
            // A new machine may not have its authorized_keys yet; a minute of refusals is an answer.
            authRefusedSince ??= Date.now();
            if (Date.now() - authRefusedSince > 60_000) {
              throw fail(
                'LLMGW_SSH_REFUSED',
                `${input.sshUser}@${input.addr} refuses the CA host's key ${input.sshKeyPath} (for over a minute): add its public key to ${input.sshUser}'s authorized_keys on the node, or pass --ssh-user / --ssh-key`,
              );
            }
          } else authRefusedSince = null;
        }
        if (Date.now() + delay > deadline) {
          throw fail(
            'LLMGW_SSH_UNREACHABLE',
            `no ssh at ${input.addr}:${input.sshPort} after ${secs(Date.now() - started)} (${attempts} attempts; last: ${last}): ` +
              'is the machine up, is this its address, may the CA host reach its port? Onboarding again waits anew (--ssh-timeout S waits longer)',
          );
        }
        await sleep(delay * (0.8 + Math.random() * 0.4));
        delay = Math.min(delay * 2, 10_000);
      }
    },

    /** accept-new: learns the host key of a node never seen, accepts a known one, refuses a changed one. */
    async learnHostKey(input: OnboardInput): Promise<StepResult> {
      const known = await deps.hostKeys.list(input.nodeId);
      beat({ step: 'learnHostKey', waitingFor: `the host key of ${input.addr}` });
      let s: SshSession;
      try {
        s = await openSsh({
          host: input.addr,
          port: input.sshPort,
          username: input.sshUser,
          privateKey: privateKey(input),
          verify: (k) => decideHostKey(known, k).kind !== 'changed',
          hostKeyAlgorithms: preferredHostKeyAlgorithms(known),
        });
      } catch (err) {
        if (err instanceof SshConnectError && err.kind === 'host-key' && err.presented)
          throw changedKey(input, err.presented, known);
        throw err;
      }
      s.close();
      // Stored only now, after `ready`: the server has proved it holds the key it presented.
      const k = s.presented;
      if (decideHostKey(known, k).kind === 'known')
        return { summary: `known host key ${k.type} ${k.fingerprint}`, waitedMs: 0, changed: false };
      await deps.hostKeys.learn(input.nodeId, k, input.addr);
      log('host key learned', { nodeId: input.nodeId, addr: input.addr, type: k.type, fingerprint: k.fingerprint });
      return { summary: `learned host key ${k.type} ${k.fingerprint}`, waitedMs: 0, changed: true };
    },

    /**
     * Checks the machine calls itself the node id, then gives it a certificate (CN = node id): the key is made on
     * the CA host and goes straight to the node over ssh (never into an activity result, so never into Temporal's
     * history). A certificate already there that this CA issued to this node, unrevoked and before its renewal
     * point, with its key beside it, is kept.
     */
    async issueCertificate(input: OnboardInput): Promise<StepResult> {
      const r = await connect(input);
      try {
        beat({ step: 'issueCertificate', waitingFor: `the hostname of ${input.addr}` });
        const hostname = (await must(r, 'uname -n', 'uname is part of coreutils: is this a Linux machine?')).trim();
        if (hostname !== input.nodeId) {
          throw fail(
            'LLMGW_HOSTNAME_MISMATCH',
            `the machine at ${input.addr} calls itself "${hostname}", not "${input.nodeId}": its certificate would name a machine it does not claim to be. ` +
              `Set its hostname (hostnamectl set-hostname ${input.nodeId}) or onboard it as ${hostname}: the VM name, the hostname, the node id and the certificate's CN are one string`,
          );
        }
        const caPem = readFileSync(caPaths(deps.caDir).cert, 'utf8');
        const [crt, key] = [await r.read(NODE_PATHS.cert), await r.read(NODE_PATHS.key)];
        if (crt && key) {
          const kept = await reusable(crt.toString(), key.toString(), caPem);
          if (kept)
            return {
              summary: `kept certificate ${kept.serial} (valid until ${kept.notAfter.toISOString().slice(0, 10)})`,
              waitedMs: r.waitedMs(),
              changed: false,
            };
        }
        beat({ step: 'issueCertificate', waitingFor: `signing a certificate for ${input.nodeId}` });
        const { csrPem, keyPem } = makeNodeCsr(input.nodeId);
        const cert = await deps.ca.signNodeCsr({ csrPem, identity: input.nodeId });
        await must(
          r,
          `mkdir -p ${NODE_PATHS.etc} && chmod 755 ${NODE_PATHS.etc}`,
          "the node's /etc must be writable by root",
        );
        // The key first: a failure between the two leaves a pair that does not match, which the next run replaces.
        await r.ensureFile(NODE_PATHS.key, keyPem, 0o600);
        await r.ensureFile(NODE_PATHS.cert, cert.certPem, 0o644);
        log('node certificate installed', { nodeId: input.nodeId, serial: cert.serial, notAfter: cert.notAfter });
        return {
          summary: `issued certificate ${cert.serial} (CN ${input.nodeId}, valid until ${cert.notAfter.slice(0, 10)})`,
          waitedMs: r.waitedMs(),
          changed: true,
        };
      } finally {
        r.close();
      }

      /** The certificate on the node when it can stay, else null. */
      async function reusable(
        certPem: string,
        keyPem: string,
        ca: string,
      ): Promise<{ serial: string; notAfter: Date } | null> {
        try {
          const info = certificateInfo(certPem);
          if (info.cn !== input.nodeId || !info.issuerMatches(ca)) return null;
          if (Date.now() >= renewAt(info.notBefore, info.notAfter).getTime()) return null;
          const rec = await deps.store.certificateBySerial(info.serial);
          if (!rec || rec.revokedAt || rec.cn !== input.nodeId) return null;
          if (spki(createPublicKey(keyPem)) !== spki(new X509Certificate(certPem).publicKey)) return null;
          return { serial: info.serial, notAfter: info.notAfter };
        } catch {
          return null;
        }
      }
    },

    /** Installs the release artefact, the CA root (trusted system-wide), the agent's configuration and its service. */
    async install(input: OnboardInput): Promise<StepResult> {
      const a = input.artefact;
      const sha = await sha256File(a.path).catch((err: Error) => {
        throw fail(
          'LLMGW_ARTEFACT_INVALID',
          `cannot read the release artefact ${a.path} on the CA host (${err.message}): pass --binary with an existing file`,
        );
      });
      if (sha !== a.sha256)
        throw fail(
          'LLMGW_ARTEFACT_INVALID',
          `${a.path} changed since onboarding started (sha256 ${sha}, was ${a.sha256}): run onboarding again with the artefact you mean`,
        );
      const r = await connect(input);
      const changed: string[] = [];
      let uploaded = '';
      try {
        const machine = (await must(r, 'uname -m', 'uname is part of coreutils: is this a Linux machine?')).trim();
        if (platformOfMachine(machine) !== a.platform) {
          throw fail(
            'LLMGW_ARTEFACT_INVALID',
            `${input.nodeId} is ${machine}${platformOfMachine(machine) ? ` (${platformOfMachine(machine)})` : ''}, but --binary ${a.name} is for ${a.platform}: pass the ${platformOfMachine(machine) ?? machine} artefact`,
          );
        }
        const dir = `${NODE_PATHS.releases}/${a.name}-${a.sha256.slice(0, 12)}`;
        if ((await r.read(`${dir}/.sha256`))?.toString().trim() !== a.sha256) {
          const tgz = `${dir}.tar.gz`;
          let sent = 0;
          let total = 0;
          const t = Date.now();
          await waitingFor(
            'install',
            () => `uploading ${a.name} (${(sent / 1e6).toFixed(0)} of ${(total / 1e6).toFixed(0)} MB)`,
            () => r.put(a.path, tgz, 0o644, (s, n) => void ((sent = s), (total = n))),
          );
          uploaded = `${a.name} uploaded (${(total / 1e6).toFixed(0)} MB in ${secs(Date.now() - t)})`;
          await waitingFor(
            'install',
            () => `unpacking ${a.name} on the node`,
            () =>
              must(
                r,
                `rm -rf ${dir}.tmp && mkdir -p ${dir}.tmp && tar -xzf ${tgz} -C ${dir}.tmp --strip-components=1 && echo ${a.sha256} > ${dir}.tmp/.sha256 && rm -rf ${dir} && mv ${dir}.tmp ${dir} && rm -f ${tgz}`,
                'the node needs tar and gzip, and room under /opt',
              ),
          );
          changed.push(dir);
        }
        const version = await r.sh(`${dir}/bin/llmgw version`, { timeoutMs: 60_000 });
        if (version.code !== 0)
          throw fail(
            'LLMGW_ARTEFACT_INVALID',
            `${a.name} does not run on ${input.nodeId} (\`llmgw version\` exited ${version.code ?? version.signal}):\n${tail(`${version.stdout}\n${version.stderr}`)}`,
          );
        for (const [link, target] of [
          [NODE_PATHS.current, dir],
          [NODE_PATHS.bin, `${NODE_PATHS.current}/bin/llmgw`],
        ] as const) {
          if ((await r.sh(`readlink ${link}`)).stdout.trim() === target) continue;
          await must(
            r,
            `mkdir -p $(dirname ${link}) && ln -sfn ${target} ${link}.tmp && mv -Tf ${link}.tmp ${link}`,
            'the node needs coreutils ln and mv',
          );
          changed.push(link);
        }

        const trust = trustInstallPlan(readFileSync(caPaths(deps.caDir).cert, 'utf8'));
        let trustChanged = false;
        for (const f of trust.files) if (await r.ensureFile(f.path, f.content, f.mode)) trustChanged = true;
        // update-ca-certificates links llmgw-ca.crt as /etc/ssl/certs/llmgw-ca.pem: its absence means it never ran.
        if (trustChanged || (await r.sh('test -e /etc/ssl/certs/llmgw-ca.pem')).code !== 0) {
          for (const argv of trust.commands) {
            await waitingFor(
              'install',
              () => `${argv.join(' ')} on the node`,
              () =>
                must(
                  r,
                  argv.map(shQuote).join(' '),
                  'install the ca-certificates package on the node (apt-get install ca-certificates)',
                ),
            );
          }
          changed.push(NODE_CA_PATH);
        }

        const config = agentConfig(input);
        const env = Object.fromEntries(
          trust.unitLines
            .map((l) => /^Environment=([^=]+)=(.*)$/.exec(l))
            .filter((m): m is RegExpExecArray => !!m)
            .map((m) => [m[1]!, m[2]!]),
        );
        const files: [string, string, number][] = [[NODE_PATHS.agentScript, agentScript(config, env), 0o755]];
        files.push(
          (await hasSystemd(r))
            ? [NODE_PATHS.unit, systemdUnit(input.nodeId, trust.unitLines), 0o644]
            : [NODE_PATHS.service, fallbackServiceScript(), 0o755],
        );
        for (const [path, content, mode] of files) if (await r.ensureFile(path, content, mode)) changed.push(path);
        const summary =
          changed.length === 0
            ? `nothing to change (${a.name} installed, CA trusted, agent configured)`
            : `${uploaded ? `${uploaded}; ` : ''}changed ${changed.join(', ')}`;
        return { summary, waitedMs: r.waitedMs(), changed: changed.length > 0 };
      } finally {
        r.close();
      }
    },

    /**
     * Runs every engine configured for the node there (before the agent starts, so a node never offers an engine
     * that cannot start); one that fails ends onboarding with the engine's own output.
     */
    async probeEngines(input: OnboardInput): Promise<StepResult> {
      const r = await connect(input);
      try {
        const done: string[] = [];
        for (const p of engineProbes(agentConfig(input))) {
          const res = await waitingFor(
            'probeEngines',
            () => `engine ${p.engine}: ${p.command}`,
            () => r.sh(p.command, { timeoutMs: 120_000 }),
          );
          if (res.code !== 0) {
            const out = tail(`${res.stderr}\n${res.stdout}`);
            const lib = /error while loading shared libraries: ([^:\s]+)/.exec(out)?.[1];
            const fix = lib
              ? `the node lacks ${lib}: install the package that has it (${lib.startsWith('libgomp') ? 'apt-get install libgomp1' : `apt-file search ${lib}`}), or point ${p.flag} at a build that does not need it`
              : `fix the engine on the node (its output above says why), or point ${p.flag} at one that runs`;
            throw fail(
              'LLMGW_ENGINE_PROBE_FAILED',
              `engine ${p.engine} cannot start on ${input.nodeId}: \`${p.command}\` exited ${res.code ?? `on ${res.signal}`}:\n${out}\n${fix}; then onboard again`,
            );
          }
          done.push(`${p.engine} (${secs(res.ms)})`);
        }
        return { summary: `engines run: ${done.join(', ')}`, waitedMs: r.waitedMs(), changed: false };
      } finally {
        r.close();
      }
    },

    /**
     * Starts the agent (systemd, or the start script where there is none), restarting it when `restart` (its
     * files changed); returns the database time before the (re)start as `since`, or null when it was left running.
     */
    async startAgent(input: OnboardInput & { restart: boolean }): Promise<StepResult & { since: string | null }> {
      const r = await connect(input);
      try {
        beat({ step: 'startAgent', waitingFor: `the agent on ${input.nodeId}` });
        const unit = NODE_PATHS.unitName;
        if (await hasSystemd(r)) {
          await must(
            r,
            `systemctl daemon-reload && systemctl enable ${unit} >/dev/null 2>&1`,
            `see systemctl status ${unit} on the node`,
          );
          const active = (await r.sh(`systemctl is-active --quiet ${unit}`)).code === 0;
          if (active && !input.restart)
            return {
              summary: `agent already running (systemd unit ${unit})`,
              waitedMs: r.waitedMs(),
              changed: false,
              since: null,
            };
          const since = (await deps.hostKeys.now()).toISOString();
          await must(r, `systemctl restart ${unit}`, `see journalctl -u ${unit} on the node`);
          return {
            summary: `agent ${active ? 're' : ''}started (systemd unit ${unit})`,
            waitedMs: r.waitedMs(),
            changed: true,
            since,
          };
        }
        const running = (await r.sh(`${NODE_PATHS.service} status`)).code === 0;
        if (running && !input.restart)
          return {
            summary: `agent already running (no systemd: ${NODE_PATHS.service})`,
            waitedMs: r.waitedMs(),
            changed: false,
            since: null,
          };
        const since = (await deps.hostKeys.now()).toISOString();
        const out = await must(
          r,
          `${NODE_PATHS.service} ${running ? 'restart' : 'start'}`,
          `see ${NODE_PATHS.log} on the node`,
        );
        return {
          summary: `agent ${running ? 're' : ''}started without systemd (${NODE_PATHS.service}: ${out.trim().split('\n').pop()})`,
          waitedMs: r.waitedMs(),
          changed: true,
          since,
        };
      } finally {
        r.close();
      }
    },

    /** Waits (bounded) until the node has registered with the control plane since `since` (or is seen, when the agent was left running). */
    async waitRegistered(input: OnboardInput & { since: string | null }): Promise<StepResult> {
      const started = Date.now();
      const deadline = started + input.registerTimeoutS * 1000;
      const since = input.since ? new Date(input.since) : null;
      for (;;) {
        const reg = await deps.hostKeys.registration(input.nodeId);
        const now = await deps.hostKeys.now();
        const ok =
          reg &&
          (since
            ? reg.registeredAt >= since
            : reg.lastSeen !== null && now.getTime() - reg.lastSeen.getTime() < NODE_SEEN_STALE_MS);
        if (ok)
          return {
            summary: since ? `registered after ${secs(Date.now() - started)}` : 'registered and heartbeating',
            waitedMs: Date.now() - started,
            changed: false,
          };
        if (Date.now() > deadline) break;
        beat({
          step: 'waitRegistered',
          waitingFor: `${input.nodeId} to register with ${input.server} (${secs(Date.now() - started)} so far, up to ${input.registerTimeoutS} s)`,
        });
        await sleep(500);
      }
      const r = await connect(input).catch(() => null);
      let agentLog = '(the node could not be reached for its agent log)';
      if (r) {
        const journal = (await r.sh('test -d /run/systemd/system')).code === 0;
        const res = await r.sh(
          journal ? `journalctl -u ${NODE_PATHS.unitName} -n 25 --no-pager` : `tail -n 25 ${NODE_PATHS.log}`,
        );
        agentLog = tail(`${res.stdout}\n${res.stderr}`, 25);
        r.close();
      }
      throw fail(
        'LLMGW_NODE_NOT_REGISTERED',
        `the agent on ${input.nodeId} did not register with ${input.server} within ${input.registerTimeoutS} s. Its log ends:\n${agentLog}\n` +
          "Common causes: the node cannot reach --server (or the Temporal address the control plane gives agents), or the control plane's certificate does not name the host in --server",
      );
    },
  };
}

/** The onboarding activities' type, for the workflow's proxies. */
export type OnboardActivities = ReturnType<typeof createOnboardActivities>;

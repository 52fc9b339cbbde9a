/**
 * Provisioning's activities, on llmgw-proxmox (the worker that holds the Proxmox API token). Each heartbeats
 * what it waits for; Proxmox's own refusals become the activity's error. Definitive refusals (a VMID held by
 * another VM, a failed import, a bad parameter) are non-retryable; a lost connection is retried by Temporal; a
 * lock timeout is retried here, with backoff, saying so.
 */
import { Socket } from 'node:net';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { ErrorCode } from '../../lib/errors';
import { ProxmoxError, type Proxmox } from '../../lib/proxmox/client';
import {
  createParams,
  describeVm,
  diskSizeGiB,
  isOwnVm,
  LLMGW_TAG,
  parseCidr,
  type VmResource,
} from '../../lib/proxmox/plan';
import type {
  ProvisionInput,
  ProvisionStepId,
  ProvisionStepResult,
  RemoveVmResult,
} from '../../workflows/contracts/provision';

export interface ProxmoxDeps {
  proxmox: Proxmox;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
  /** how often tasks and VM states are polled, ms (default 1000) */
  pollMs?: number;
  /** lock timeouts retried before giving up (default 5) */
  lockRetries?: number;
  /** first backoff after a lock timeout, ms (default 2000; doubles, at most 15 s) */
  lockBackoffMs?: number;
}

/** What a provisioning step heartbeats (the CLI prints `waitingFor`). */
export interface ProvisionHeartbeat {
  step: ProvisionStepId | 'removeVm';
  waitingFor: string;
}

/** Input of the steps after the VMID is known, with the run's tag. */
export type ProvisionStepInput = ProvisionInput & { runTag: string };

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One promise chain per Proxmox node: creates there run one at a time (parallel imports time out on storage locks). */
const createQueues = new Map<string, Promise<unknown>>();
function serialised<T>(key: string, fn: () => Promise<T>): { waiting: boolean; run: Promise<T> } {
  const before = createQueues.get(key);
  const run = (before ?? Promise.resolve()).catch(() => undefined).then(fn);
  const tail = run.catch(() => undefined);
  createQueues.set(key, tail);
  void tail.then(() => {
    if (createQueues.get(key) === tail) createQueues.delete(key);
  });
  return { waiting: before !== undefined, run };
}

/** A ProxmoxError as the activity's failure: definitive kinds are final, a lost connection is retried. */
function asFailure(err: unknown, context: string): never {
  if (err instanceof ApplicationFailure) throw err;
  if (err instanceof ProxmoxError) {
    const message = `${context}: ${err.message}`;
    if (err.call.status === null && err.call.method !== 'TASK')
      throw ApplicationFailure.retryable(message, 'LLMGW_PROXMOX_FAILED' satisfies ErrorCode);
    throw ApplicationFailure.nonRetryable(message, 'LLMGW_PROXMOX_FAILED' satisfies ErrorCode);
  }
  throw err;
}

export function createProxmoxActivities(deps: ProxmoxDeps) {
  const pve = deps.proxmox;
  const log = deps.log ?? ((): void => undefined);
  const pollMs = deps.pollMs ?? 1000;
  const lockRetries = deps.lockRetries ?? 5;
  const lockBackoffMs = deps.lockBackoffMs ?? 2000;
  const beat = (step: ProvisionHeartbeat['step'], waitingFor: string): void =>
    Context.current().heartbeat({ step, waitingFor } satisfies ProvisionHeartbeat);

  /** Runs `fn`, retrying Proxmox lock timeouts (a VM or storage lock another task holds) with backoff. */
  async function withLockRetry<T>(step: ProvisionHeartbeat['step'], what: string, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        const lock = err instanceof ProxmoxError && (err.kind === 'lock-timeout' || err.kind === 'locked');
        if (!lock || attempt >= lockRetries) throw err;
        const wait = Math.min(lockBackoffMs * 2 ** attempt, 15_000);
        log('proxmox lock busy; retrying', {
          what,
          attempt: attempt + 1,
          waitMs: wait,
          reason: (err as ProxmoxError).call.reason,
        });
        beat(
          step,
          `${what}: ${(err as ProxmoxError).call.reason}; retrying in ${(wait / 1000).toFixed(0)} s (lock retry ${attempt + 1} of ${lockRetries})`,
        );
        await sleep(wait);
      }
    }
  }

  const waitTask = (step: ProvisionHeartbeat['step'], upid: string, what: string): Promise<unknown> => {
    const t0 = Date.now();
    return pve.waitTask(upid, {
      pollMs,
      onPoll: (s) =>
        beat(step, `${what} (Proxmox task ${s.type}, ${s.status}, ${((Date.now() - t0) / 1000).toFixed(0)} s)`),
    });
  };

  const findVm = async (vmid: number): Promise<VmResource | undefined> =>
    (await pve.vms()).find((v) => Number(v.vmid) === vmid);

  /** Stops the VM if it runs, then destroys it, following both tasks. */
  async function stopAndDestroy(pveNode: string, vmid: number): Promise<void> {
    const st = await pve.status(pveNode, vmid);
    if (st.status === 'running') {
      const stop = await withLockRetry('removeVm', `stopping VM ${vmid}`, () => pve.stop(pveNode, vmid));
      await waitTask('removeVm', stop, `VM ${vmid} to stop`);
    }
    const upid = await withLockRetry('removeVm', `removing VM ${vmid}`, () => pve.destroy(pveNode, vmid));
    await waitTask('removeVm', upid, `VM ${vmid} to be removed`);
  }

  /**
   * The VM at `vmid` once no create runs on it. Proxmox reserves the VMID with a config holding only `lock: create`
   * and writes name and tags at the create's end, so whose VM it is can be told only then. Undefined: it is gone
   * (a create that failed is removed by Proxmox).
   */
  async function settledVm(step: ProvisionHeartbeat['step'], vmid: number): Promise<VmResource | undefined> {
    for (;;) {
      const vm = await findVm(vmid);
      if (!vm || vm.lock !== 'create') return vm;
      beat(
        step,
        `VM ${vmid} is being created (locked: create); its name and tags show whose it is only when that ends`,
      );
      await sleep(pollMs);
    }
  }

  return {
    /** Refuses a VMID (or node name) another VM holds, naming that VM; never adopts it. */
    async checkVmid(input: ProvisionInput): Promise<ProvisionStepResult> {
      try {
        beat('checkVmid', `asking Proxmox whether VM ${input.vmid} exists`);
        const [free, vms] = await Promise.all([pve.vmidFree(input.vmid), pve.vms()]);
        const holder = vms.find((v) => Number(v.vmid) === input.vmid);
        if (!free || holder) {
          const own = holder && isOwnVm(holder, input.nodeId);
          throw ApplicationFailure.nonRetryable(
            `VMID ${input.vmid} is taken: ${holder ? describeVm(holder) : `VM ${input.vmid} exists`}. ` +
              (own
                ? `It is llmgw's ${input.nodeId} from an earlier provisioning: onboard it with llmgw add-node --onboard-only, or remove it on the Proxmox host (qm destroy ${input.vmid}) and run this again`
                : 'llmgw never adopts or replaces a VM it did not create: pass another --vmid N, or remove that VM yourself if it is a leftover'),
            'LLMGW_VMID_TAKEN' satisfies ErrorCode,
            { vmid: input.vmid, holder: holder ?? null },
          );
        }
        const named = vms.find((v) => v.name === input.nodeId);
        if (named) {
          throw ApplicationFailure.nonRetryable(
            `a VM named ${input.nodeId} already exists: ${describeVm(named)}. A node id names one machine: pick another --name, or use that VM (llmgw add-node --onboard-only)`,
            'LLMGW_VMID_TAKEN' satisfies ErrorCode,
            { vmid: Number(named.vmid) },
          );
        }
        return { summary: `VM ${input.vmid} is free on ${pve.url}`, waitedMs: 0, changed: false, vmid: input.vmid };
      } catch (err) {
        return asFailure(err, `checking VMID ${input.vmid}`);
      }
    },

    /**
     * Creates the VM from the cloud image with cloud-init, one create at a time per Proxmox node, and follows its
     * task to the end. A create answered "already exists" (proxmox-api re-sends a POST whose answer was lost) is
     * recognised as this run's own VM by its name and run tag, and awaited; any other holder is refused.
     */
    async createVm(input: ProvisionStepInput): Promise<ProvisionStepResult> {
      const t0 = Date.now();
      const key = `${pve.url}/${input.pveNode}`;
      let queuedMs = 0;
      const q = serialised(key, async () => {
        const started = Date.now();
        queuedMs = started - t0;
        const existing = await settledVm('createVm', input.vmid);
        if (existing && isOwnVm(existing, input.nodeId, input.runTag)) {
          // A retry of this activity after its create went through: that create has ended, so no second one.
          return {
            summary: `VM ${input.vmid} "${input.nodeId}" was already created by this run (a retry found it)`,
            waitedMs: Date.now() - started,
            changed: true,
            vmid: input.vmid,
            created: true,
          };
        }
        const params = createParams({ ...input, name: input.nodeId, vmid: input.vmid });
        return withLockRetry('createVm', `creating VM ${input.vmid}`, async () => {
          let upid: string | null = null;
          try {
            beat('createVm', `Proxmox to accept the create of VM ${input.vmid} on ${input.pveNode}`);
            upid = await pve.createVm(input.pveNode, params);
          } catch (err) {
            if (!(err instanceof ProxmoxError) || err.kind !== 'exists') throw err;
            // A re-sent create (proxmox-api sends a POST again after a lost answer) meets the first one: whose
            // VM it is shows once that create has ended.
            const holder = await settledVm('createVm', input.vmid);
            if (!holder || !isOwnVm(holder, input.nodeId, input.runTag)) {
              throw ApplicationFailure.nonRetryable(
                `VMID ${input.vmid} was taken between the check and the create: ${holder ? describeVm(holder) : `${err.call.reason}, and then it was gone`}. Pass another --vmid N`,
                'LLMGW_VMID_TAKEN' satisfies ErrorCode,
              );
            }
            log('create answered "already exists" for our own VM (a re-sent request); its first create ended', {
              vmid: input.vmid,
            });
            return {
              summary: `VM ${input.vmid} "${input.nodeId}" created (the create was re-sent and Proxmox's "already exists" was our own first one)`,
              waitedMs: Date.now() - started,
              changed: true,
              vmid: input.vmid,
              created: true,
            };
          }
          await waitTask('createVm', upid, `importing ${input.image} into ${input.storage} for VM ${input.vmid}`);
          return {
            summary: `VM ${input.vmid} "${input.nodeId}" created from ${input.image} (cpu ${input.cpu}, ${input.cores} cores, ${input.memoryMiB} MiB)`,
            waitedMs: Date.now() - started,
            changed: true,
            vmid: input.vmid,
            created: true,
          };
        });
      });
      if (q.waiting)
        beat(
          'createVm',
          `another create on Proxmox node ${input.pveNode} to finish (creates there run one at a time: parallel imports time out on storage locks)`,
        );
      const timer = setInterval(() => Context.current().heartbeat(), 5000);
      try {
        const r = await q.run;
        return q.waiting
          ? {
              ...r,
              summary: `${r.summary}; queued ${(queuedMs / 1000).toFixed(1)} s behind another create on ${input.pveNode}`,
              waitedMs: r.waitedMs + queuedMs,
            }
          : r;
      } catch (err) {
        return asFailure(err, `creating VM ${input.vmid}`);
      } finally {
        clearInterval(timer);
      }
    },

    /** Grows the imported disk to the wanted size (grow only: a larger image is left as is, and said so). */
    async resizeDisk(input: ProvisionStepInput): Promise<ProvisionStepResult> {
      const t0 = Date.now();
      try {
        const cfg = await withLockRetry('resizeDisk', `reading VM ${input.vmid}'s config`, () =>
          pve.vmConfig(input.pveNode, input.vmid),
        );
        const now = diskSizeGiB(String(cfg.scsi0 ?? ''));
        if (now !== null && now >= input.diskGiB) {
          return {
            summary: `scsi0 is ${now} GiB already (at least --disk ${input.diskGiB}G): left as is (Proxmox grows disks only)`,
            waitedMs: 0,
            changed: false,
          };
        }
        const upid = await withLockRetry('resizeDisk', `growing scsi0 of VM ${input.vmid}`, () =>
          pve.resize(input.pveNode, input.vmid, 'scsi0', `${input.diskGiB}G`),
        );
        if (upid) await waitTask('resizeDisk', upid, `growing scsi0 to ${input.diskGiB} GiB`);
        return {
          summary: `scsi0 grown from ${now ?? '?'} to ${input.diskGiB} GiB`,
          waitedMs: Date.now() - t0,
          changed: true,
        };
      } catch (err) {
        return asFailure(err, `growing VM ${input.vmid}'s disk`);
      }
    },

    /** Starts the VM (a running one is left as is) and waits until Proxmox says it runs, unlocked. */
    async startVm(input: ProvisionStepInput): Promise<ProvisionStepResult> {
      const t0 = Date.now();
      try {
        const st = await pve.status(input.pveNode, input.vmid);
        if (st.status === 'running' && !st.lock)
          return { summary: `VM ${input.vmid} already runs`, waitedMs: 0, changed: false };
        const upid = await withLockRetry('startVm', `starting VM ${input.vmid}`, () =>
          pve.start(input.pveNode, input.vmid),
        );
        await waitTask('startVm', upid, `VM ${input.vmid} to start`);
        for (;;) {
          const s = await pve.status(input.pveNode, input.vmid);
          if (s.status === 'running' && !s.lock) break;
          beat('startVm', `VM ${input.vmid} to run (${s.status}${s.lock ? `, locked: ${s.lock}` : ''})`);
          await sleep(pollMs);
        }
        return { summary: `VM ${input.vmid} runs`, waitedMs: Date.now() - t0, changed: true };
      } catch (err) {
        return asFailure(err, `starting VM ${input.vmid}`);
      }
    },

    /** Waits (bounded) until the VM's ssh port answers with an SSH banner: the machine has booted and sshd runs. */
    async waitForSshPort(input: ProvisionStepInput): Promise<ProvisionStepResult> {
      const { address } = parseCidr(input.ip);
      const t0 = Date.now();
      const deadline = t0 + input.sshDeadlineS * 1000;
      let last = 'not tried yet';
      for (let n = 1; ; n++) {
        const r = await sshBanner(address, input.sshPort, 5000);
        if (r.ok)
          return {
            summary: `${address}:${input.sshPort} answers (${r.banner}) after ${((Date.now() - t0) / 1000).toFixed(1)} s`,
            waitedMs: Date.now() - t0,
            changed: false,
          };
        last = r.error;
        if (Date.now() > deadline) {
          throw ApplicationFailure.nonRetryable(
            `${address}:${input.sshPort} did not answer within ${input.sshDeadlineS} s (last: ${last}). Check the VM's console in Proxmox: the address (--ip, --gw), the bridge, and that the image runs sshd`,
            'LLMGW_SSH_UNREACHABLE' satisfies ErrorCode,
          );
        }
        beat('waitForSshPort', `${address}:${input.sshPort} to answer (try ${n}: ${last})`);
        await sleep(Math.min(1000 * n, 5000));
      }
    },

    /** Removes the VM this run created (stopped first); any VM that is not this run's is left alone, and said so. */
    async removeVm(input: ProvisionStepInput): Promise<RemoveVmResult> {
      try {
        const vm = await findVm(input.vmid);
        if (!vm) return { removed: false, summary: `VM ${input.vmid} is not there (nothing to remove)` };
        if (!isOwnVm(vm, input.nodeId, input.runTag))
          return { removed: false, summary: `${describeVm(vm)} is not the VM this run created: left alone` };
        await stopAndDestroy(input.pveNode, input.vmid);
        return { removed: true, summary: `VM ${input.vmid} "${input.nodeId}", created by this run, removed` };
      } catch (err) {
        return asFailure(err, `removing VM ${input.vmid}`);
      }
    },

    /**
     * Removes a removed node's VM (llmgw ctl remove-node --destroy-vm): the one named after the node and tagged
     * llmgw, which only llmgw's provisioning creates. A VM of that name without the tag is left alone, and said so.
     */
    async destroyNodeVm(input: { nodeId: string }): Promise<RemoveVmResult> {
      try {
        beat('removeVm', `asking Proxmox for the VM named ${input.nodeId}`);
        const named = (await pve.vms()).filter((v) => v.name === input.nodeId);
        const own = named.find((v) => isOwnVm(v, input.nodeId));
        if (!own) {
          return {
            removed: false,
            summary: named.length
              ? `${named.map(describeVm).join('; ')}: not created by llmgw (no ${LLMGW_TAG} tag): left alone`
              : `no VM named ${input.nodeId} on ${pve.url}: nothing to remove`,
          };
        }
        await stopAndDestroy(own.node, Number(own.vmid));
        return { removed: true, summary: `VM ${own.vmid} "${input.nodeId}" (tag ${LLMGW_TAG}) on ${own.node} removed` };
      } catch (err) {
        return asFailure(err, `removing the VM of ${input.nodeId}`);
      }
    },
  };
}

export type ProxmoxActivities = ReturnType<typeof createProxmoxActivities>;

/** Connects and reads the first line: an `SSH-2.0-…` banner means sshd answers. */
function sshBanner(
  host: string,
  port: number,
  timeoutMs: number,
): Promise<{ ok: true; banner: string } | { ok: false; error: string }> {
  return new Promise((resolve) => {
    const s = new Socket();
    let buf = '';
    const done = (r: { ok: true; banner: string } | { ok: false; error: string }): void => {
      s.destroy();
      resolve(r);
    };
    s.setTimeout(timeoutMs, () => done({ ok: false, error: 'timed out' }));
    s.once('error', (e: NodeJS.ErrnoException) => done({ ok: false, error: e.code ?? e.message }));
    s.on('data', (b: Buffer) => {
      buf += b.toString('latin1');
      const nl = buf.indexOf('\n');
      if (nl >= 0) {
        const line = buf.slice(0, nl).trim();
        done(
          line.startsWith('SSH-')
            ? { ok: true, banner: line }
            : { ok: false, error: `not an ssh banner: ${JSON.stringify(line.slice(0, 60))}` },
        );
      }
    });
    s.once('end', () => done({ ok: false, error: 'closed before a banner' }));
    s.connect(port, host);
  });
}

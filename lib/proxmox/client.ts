/**
 * The Proxmox VE API as llmgw uses it, through `proxmox-api` with an API token. TLS is verified against the
 * configured Proxmox CA (proxmox-api has no TLS option of its own: it is given a fetch whose undici Agent trusts
 * exactly that CA) — never switched off. Calls fail with LLMGW_PROXMOX_FAILED carrying Proxmox's own text.
 */
import { readFileSync } from 'node:fs';
import proxmoxApi from 'proxmox-api';
import { Agent, fetch as undiciFetch } from 'undici';
import type { ProxmoxConfig } from '../../config/types';
import { LlmgwError } from '../errors';
import { classifyPve, parsePveError, parseUpid, taskSucceeded, type PveCallError, type VmResource } from './plan';

/** A failed call or task, with Proxmox's reason and its kind (exists, lock-timeout, …). */
export class ProxmoxError extends LlmgwError {
  readonly call: PveCallError;
  readonly kind: ReturnType<typeof classifyPve>;
  constructor(message: string, call: PveCallError) {
    super('LLMGW_PROXMOX_FAILED', message, { status: call.status, reason: call.reason });
    this.call = call;
    this.kind = classifyPve(call.reason);
  }
}

export interface TaskStatus {
  status: 'running' | 'stopped';
  exitstatus?: string;
  type: string;
  id: string;
}

export interface VmStatus {
  status: string;
  qmpstatus?: string;
  lock?: string;
  name?: string;
}

export interface ProxmoxConnection {
  url: string;
  tokenId: string;
  tokenSecret: string;
  caPem: string;
  /** one request's limit, ms (proxmox-api re-sends once after a timeout or network error, POST included) */
  queryTimeoutMs?: number;
}

/** Reads the token secret and CA the configuration names; each missing or malformed file is named with the fix. */
export function proxmoxConnection(cfg: ProxmoxConfig): ProxmoxConnection {
  const read = (file: string, what: string, fix: string): string => {
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      throw new LlmgwError(
        'LLMGW_CONFIG_INVALID',
        `proxmox.${what} ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)}): ${fix}`,
      );
    }
  };
  const tokenSecret = read(
    cfg.tokenSecretFile,
    'tokenSecretFile',
    "write the API token's secret (the UUID Proxmox showed once at creation) into it, mode 0600",
  ).trim();
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(tokenSecret)) {
    throw new LlmgwError(
      'LLMGW_CONFIG_INVALID',
      `proxmox.tokenSecretFile ${cfg.tokenSecretFile} does not hold a token secret: it should be the lowercase UUID Proxmox showed when the token was created (nothing else in the file)`,
    );
  }
  const caPem = read(cfg.ca, 'ca', 'copy /etc/pve/pve-root-ca.pem from the Proxmox host there');
  if (!caPem.includes('-----BEGIN CERTIFICATE-----'))
    throw new LlmgwError(
      'LLMGW_CONFIG_INVALID',
      `proxmox.ca ${cfg.ca} holds no PEM certificate: copy /etc/pve/pve-root-ca.pem from the Proxmox host`,
    );
  return { url: cfg.url, tokenId: cfg.tokenId, tokenSecret, caPem };
}

type Params = Record<string, string | number | boolean>;

/** The calls provisioning makes. One instance per connection; `close` ends its TLS sessions. */
export class Proxmox {
  private readonly agent: Agent;
  private readonly api: ReturnType<typeof proxmoxApi>;
  readonly url: string;

  constructor(c: ProxmoxConnection) {
    const u = new URL(c.url);
    this.url = c.url;
    this.agent = new Agent({ connect: { ca: c.caPem } });
    const agent = this.agent;
    const fetch = ((input: unknown, init: Record<string, unknown> = {}) =>
      undiciFetch(input as string, { ...init, dispatcher: agent })) as unknown;
    this.api = proxmoxApi({
      host: u.hostname,
      port: Number(u.port || 8006),
      schema: 'https',
      tokenID: c.tokenId,
      tokenSecret: c.tokenSecret,
      queryTimeout: c.queryTimeoutMs ?? 30_000,
      fetch: fetch as never,
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  /** One call, its failure turned into a ProxmoxError naming the call and Proxmox's reason. */
  private async call<T>(what: string, fn: () => Promise<unknown>): Promise<T> {
    try {
      return (await fn()) as T;
    } catch (err) {
      const call = parsePveError(err);
      const where =
        call.status === null
          ? `cannot reach Proxmox at ${this.url} (${call.reason})`
          : `Proxmox refused ${what}: ${call.status} ${call.reason}`;
      const fix =
        call.status === 401
          ? ' — check proxmox.tokenId and tokenSecretFile, and that the token is not expired'
          : call.status === 403
            ? ' — the token lacks a privilege (docs/provisioning.md lists them)'
            : call.status === null && /certificate|self[- ]signed|CERT/i.test(call.reason)
              ? ` — TLS: the host's certificate is not signed by proxmox.ca (copy /etc/pve/pve-root-ca.pem from that host)`
              : '';
      throw new ProxmoxError(`${where}${fix}`, call);
    }
  }

  version(): Promise<{ version: string; release?: string }> {
    return this.call('GET /version', () => this.api.version.$get());
  }

  /** Every VM of the cluster, as /cluster/resources lists them. */
  vms(): Promise<VmResource[]> {
    return this.call('GET /cluster/resources', () => this.api.cluster.resources.$get({ type: 'vm' }));
  }

  /** True when `vmid` is free (`/cluster/nextid?vmid=N` answers N; a taken one is a 400 "VM N already exists"). */
  async vmidFree(vmid: number): Promise<boolean> {
    try {
      await this.call('GET /cluster/nextid', () => this.api.cluster.nextid.$get({ vmid }));
      return true;
    } catch (err) {
      if (err instanceof ProxmoxError && err.call.status === 400 && err.kind === 'exists') return false;
      throw err;
    }
  }

  /** Creates a VM: the VMID is reserved when this returns; the returned UPID is the import and configuration. */
  createVm(node: string, params: Params): Promise<string> {
    return this.call(`POST /nodes/${node}/qemu (create VM ${params.vmid})`, () =>
      this.api.nodes.$(node).qemu.$post(params as never),
    );
  }

  vmConfig(node: string, vmid: number): Promise<Record<string, string | number>> {
    return this.call(`GET /nodes/${node}/qemu/${vmid}/config`, () => this.api.nodes.$(node).qemu.$(vmid).config.$get());
  }

  /** Grows a disk; newer Proxmox returns a UPID, older ones null. */
  resize(node: string, vmid: number, disk: string, size: string): Promise<string | null> {
    return this.call(`PUT /nodes/${node}/qemu/${vmid}/resize (${disk} to ${size})`, () =>
      this.api.nodes
        .$(node)
        .qemu.$(vmid)
        .resize.$put({ disk: disk as never, size }),
    );
  }

  start(node: string, vmid: number): Promise<string> {
    return this.call(`POST /nodes/${node}/qemu/${vmid}/status/start`, () =>
      this.api.nodes.$(node).qemu.$(vmid).status.start.$post(),
    );
  }

  stop(node: string, vmid: number): Promise<string> {
    return this.call(`POST /nodes/${node}/qemu/${vmid}/status/stop`, () =>
      this.api.nodes.$(node).qemu.$(vmid).status.stop.$post(),
    );
  }

  status(node: string, vmid: number): Promise<VmStatus> {
    return this.call(`GET /nodes/${node}/qemu/${vmid}/status/current`, () =>
      this.api.nodes.$(node).qemu.$(vmid).status.current.$get(),
    );
  }

  destroy(node: string, vmid: number): Promise<string> {
    return this.call(`DELETE /nodes/${node}/qemu/${vmid}`, () =>
      this.api.nodes.$(node).qemu.$(vmid).$delete({ purge: true, 'destroy-unreferenced-disks': true }),
    );
  }

  taskStatus(upid: string): Promise<TaskStatus> {
    const { node } = parseUpid(upid);
    return this.call(`GET task ${upid}`, () => this.api.nodes.$(node).tasks.$(upid).status.$get());
  }

  async taskLog(upid: string, lines = 20): Promise<string[]> {
    const { node } = parseUpid(upid);
    const log = await this.call<{ n: number; t: string }[]>(`GET task log ${upid}`, () =>
      this.api.nodes.$(node).tasks.$(upid).log.$get({ start: 0, limit: 500 }),
    );
    return log.map((l) => l.t).slice(-lines);
  }

  /**
   * Follows a task (UPID) to its end, polling every `pollMs`; `onPoll` sees each status (for heartbeats). A task
   * that ends in anything but OK / WARNINGS throws a ProxmoxError with its exit status and its log's last lines.
   */
  async waitTask(
    upid: string,
    o: { pollMs?: number; onPoll?: (s: TaskStatus) => void; signal?: AbortSignal } = {},
  ): Promise<TaskStatus> {
    for (;;) {
      const s = await this.taskStatus(upid);
      o.onPoll?.(s);
      if (s.status === 'stopped') {
        if (taskSucceeded(s.exitstatus)) return s;
        const tail = await this.taskLog(upid, 8).catch(() => []);
        const text = s.exitstatus ?? 'ended without an exit status';
        throw new ProxmoxError(
          `Proxmox task ${s.type} ${s.id} failed: ${text}${tail.length ? `\n  task log:\n    ${tail.join('\n    ')}` : ''}`,
          { method: 'TASK', url: upid, status: null, reason: text },
        );
      }
      if (o.signal?.aborted) throw new Error(`stopped waiting for Proxmox task ${upid}`);
      await new Promise((r) => setTimeout(r, o.pollMs ?? 500));
    }
  }
}

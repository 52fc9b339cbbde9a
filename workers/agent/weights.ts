/**
 * The agent's weights part: the cache under `--weights-dir`, its mTLS endpoint for peers, the control plane
 * told what the cache holds (all of it at start and after a failed report, each new file as it lands), peers
 * asked of the control plane, and the fetchWeights activity for the node worker.
 */
import { createWeightsActivities, type WeightsActivities } from '../../activities/node/weights';
import { LlmgwError } from '../../lib/errors';
import type { WeightCopyReport } from '../../lib/store/weights';
import type { TlsCredentials } from '../../lib/tls-client';
import { WeightsCache, type HeldFile, type PeerCandidate } from '../../lib/weights/cache';
import { startWeightsServer } from '../../lib/weights/serve';
import type { ControlFetch } from './control-planes';
import { ensureWritableDir } from './writable-dir';

/** What the weights part needs from the agent: the node, its control-plane client and certificate, its flags. */
export interface NodeWeightsOptions {
  nodeId: string;
  /** the agent's control planes (mTLS, failover: control-planes.ts) */
  control: ControlFetch;
  /** the node's certificate (its weights endpoint serves with it, and presents it to peers) */
  tls: TlsCredentials;
  /** the cache directory (`--weights-dir`) */
  dir: string;
  /** where the weights endpoint listens (`--weights-listen`, default 0.0.0.0:0: any free port, reported) */
  listen: { host: string; port: number };
  /** the address other nodes reach this one at (`--advertise-host`) */
  advertiseHost: string;
  /** how often a failed report to the control plane is tried again, ms (default 10 s) */
  resyncMs?: number;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A node's running weights part. */
export interface NodeWeights {
  activities: WeightsActivities;
  cache: WeightsCache;
  /** https://<advertise-host>:<port> */
  endpoint: string;
  /** After a certificate renewal: serve and present the new one. */
  useCredentials(tls: TlsCredentials): void;
  close(): Promise<void>;
}

/** `--weights-listen HOST:PORT` (`[v6]:PORT` too; port 0: any free one). */
export function parseWeightsListen(s: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(s.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535)
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `--weights-listen ${JSON.stringify(s)} is not HOST:PORT; give e.g. 0.0.0.0:0 (any free port, reported to the control plane) or 10.0.0.5:7450`,
    );
  return { host: (m[1] ?? m[2]) as string, port };
}

const toReport = (f: HeldFile): WeightCopyReport => ({
  key: f.key,
  url: f.url,
  size: f.size,
  sha256: f.sha256,
  verified: f.verified,
  storedAt: f.storedAt,
});

/** Starts the weights cache, endpoint and reporting of one node. */
export async function startNodeWeights(o: NodeWeightsOptions): Promise<NodeWeights> {
  ensureWritableDir(
    o.dir,
    '--weights-dir',
    'pass --weights-dir DIR the agent may write to, on a disk with room for the models',
  );
  let creds = o.tls;
  const json = async <T>(path: string, init?: { method: string; body: unknown }): Promise<T> => {
    const res = await o.control.fetch(
      path,
      init
        ? { method: init.method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(init.body) }
        : {},
    );
    const body = (await res.json()) as T & { error?: { message: string } };
    if (res.status !== 200)
      throw new Error(`${path.split('?')[0]} answered ${res.status}: ${body.error?.message ?? JSON.stringify(body)}`);
    return body;
  };
  let endpoint = '';
  let dirty = true;
  const report = async (files: HeldFile[], replace: boolean): Promise<void> => {
    await json('/v1/agent/weights', {
      method: 'POST',
      body: { nodeId: o.nodeId, endpoint, files: files.map(toReport), replace },
    });
  };
  const cache = new WeightsCache({
    dir: o.dir,
    nodeId: o.nodeId,
    peers: async (key) =>
      (
        await json<{ peers: PeerCandidate[] }>(
          `/v1/agent/weights/peers?node=${encodeURIComponent(o.nodeId)}&key=${key}`,
        )
      ).peers,
    peerTls: () => creds,
    onStored: async (f) => {
      await report([f], false).catch((err: Error) => {
        dirty = true;
        throw err;
      });
    },
    log: o.log,
  });
  const server = await startWeightsServer({
    file: (key) => cache.file(key),
    tls: o.tls,
    host: o.listen.host,
    port: o.listen.port,
    allowSerial: async (serial) =>
      (await json<{ honoured: boolean }>(`/v1/agent/certificate-status?serial=${serial}`)).honoured,
    log: o.log,
  });
  endpoint = `https://${o.advertiseHost.includes(':') ? `[${o.advertiseHost}]` : o.advertiseHost}:${server.port}`;

  // The whole cache at start, and again whenever a report failed: the table then matches this node's disk.
  const resync = async (): Promise<void> => {
    if (!dirty) return;
    dirty = false;
    try {
      const held = await cache.held();
      await report(held, true);
      o.log('weights cache reported', { endpoint, files: held.length });
    } catch (err) {
      dirty = true;
      o.log('could not report the weights cache to the control plane; retrying', {
        level: 'warn',
        error: (err as Error).message,
      });
    }
  };
  await resync();
  const timer = setInterval(() => void resync(), o.resyncMs ?? 10_000);
  timer.unref();

  return {
    activities: createWeightsActivities({ nodeId: o.nodeId, cache, log: o.log }),
    cache,
    endpoint,
    useCredentials: (tls) => {
      creds = tls;
      server.useCredentials(tls);
    },
    close: async () => {
      clearInterval(timer);
      await server.close();
    },
  };
}

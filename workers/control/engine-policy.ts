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
  return createHash('sha256')
    .update(JSON.stringify({ engines: config.engines, catalog: config.catalog }))
    .digest('hex')
    .slice(0, 16);
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
 * engines or another catalog. A registration's run replaces a running one: it is checking what is now wanted. The
 * start pass joins a run that checks the same config instead — with several control planes starting together,
 * replacing would have each terminate the others' runs — and replaces only a run of another config.
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
    for (const n of await this.o.store.listNodes())
      if (n.state !== 'down' && n.enginesConfig !== this.configHash) this.ensureEngines(n.id, 'join');
  }

  /** The control API's registration hook: a node that (re)registers checks its engines again. */
  readonly onRegistered = (nodeId: NodeId): void => this.ensureEngines(nodeId, 'replace');

  /** Starts no more ensureEngines workflows; those already started run on in Temporal. */
  stop(): void {
    this.stopped = true;
  }

  /**
   * Starts the node's ensureEngines workflow, replacing a running one — or, with `join`, only one that checks
   * another config (its memo says which; a run without one is of an older llmgw). A failure to start is logged.
   */
  private ensureEngines(nodeId: NodeId, running: 'join' | 'replace'): void {
    if (this.stopped) return;
    // A rolling-upgrade workflow would coordinate here: asked (or holding a node) before a run starts under it.
    const input: EnsureEnginesWorkflowInput = {
      nodeId,
      engines: this.o.config.engines,
      catalog: this.o.config.catalog,
      configHash: this.configHash,
    };
    const workflowId = workflowIds.engines(nodeId);
    const start = (workflowIdConflictPolicy: 'USE_EXISTING' | 'TERMINATE_EXISTING'): Promise<unknown> =>
      this.o.client.workflow.start('ensureEngines', {
        taskQueue: QUEUES.control,
        workflowId,
        args: [input],
        memo: { configHash: this.configHash },
        workflowIdConflictPolicy,
      });
    void (async () => {
      if (running === 'join') {
        const now = await this.o.client.workflow
          .getHandle(workflowId)
          .describe()
          .catch(() => null);
        if (now?.status.name !== 'RUNNING') return start('USE_EXISTING'); // one another control plane starts meanwhile is joined
        if (now.memo?.configHash === this.configHash)
          return this.o.log('ensureEngines joined: a run checking this engines config is under way', {
            nodeId,
            runId: now.runId,
          });
        this.o.log('ensureEngines running against another engines config: replacing it', {
          nodeId,
          running: now.memo?.configHash ?? null,
          wanted: this.configHash,
        });
      }
      return start('TERMINATE_EXISTING');
    })().catch((err: Error) =>
      this.o.log('could not start ensureEngines', { level: 'warn', nodeId, error: err.message }),
    );
  }
}

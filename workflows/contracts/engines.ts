/** Contract of the ensureEngines workflow (ID `engines/<node>`): what the control plane starts it with. */
import type { EngineName, EngineStatus, ModelSpec, NodeId } from '../../lib/types';

export interface EnsureEnginesWorkflowInput {
  nodeId: NodeId;
  /** server.yaml's engines: name -> version ("" = the operator's own binary on the node) */
  engines: Partial<Record<EngineName, string>>;
  /** server.yaml's catalog: its profiles' args are checked against each engine's help too */
  catalog: ModelSpec[];
  /** hash of engines + catalog: a control plane started with another one runs this again */
  configHash: string;
}

export type EnsureEnginesResult = EngineStatus[];

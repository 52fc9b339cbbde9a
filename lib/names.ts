/** Task queue names, workflow ids and search attributes: the one place they are spelled. */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { ReplicaId } from './types';

/** The shared task queues, one per kind of access (DESIGN: access boundaries are task queues). */
export const QUEUES = {
  control: 'llmgw-control',
  /**
   * The control plane's waits (an engine coming up, requests in flight draining, a model retiring, a move's
   * progress): the control worker's own access, on a queue of its own so that thousands of waits at once (a
   * 5,000-replica deploy) never take the slots of the short MySQL and placement activities on llmgw-control.
   */
  controlWait: 'llmgw-control-wait',
  proxmox: 'llmgw-proxmox',
  ca: 'llmgw-ca',
} as const;

/** The task queue a node's own worker polls. */
export function nodeQueue(nodeId: string): string {
  return `node-${nodeId}`;
}

/** Each workflow's stable id: the Temporal UI reads like the cluster, and a second start joins or is refused. */
export const workflowIds = {
  addNode: (node: string): string => `add-node/${node}`,
  provision: (node: string): string => `provision/${node}`,
  onboard: (node: string): string => `onboard/${node}`,
  engines: (node: string): string => `engines/${node}`,
  model: (model: string): string => `model/${model}`,
  replica: (replica: string): string => `replica/${replica}`,
  drain: (node: string): string => `drain/${node}`,
  removeNode: (node: string): string => `remove-node/${node}`,
  /** one per renewal attempt: a node may retry with a new CSR while an earlier attempt is still retrying */
  renewCertificate: (node: string, at: number): string => `renew-certificate/${node}/${at}`,
  publishCrl: (why: string, at: number): string => `publish-crl/${why}/${at}`,
} as const;

/**
 * The id of a model's `index`-th replica (`<model>-<n>`): the one place one is minted. Not parsed: the catalog
 * already checked the model's name, and a parse error inside a workflow would fail its task on every retry.
 */
export function replicaIdFor(model: string, index: number): ReplicaId {
  return `${model}-${index}` as ReplicaId;
}

/** Typed search attributes: "everything that touched node05" is one query. */
export const searchAttributes = {
  node: defineSearchAttributeKey('LlmgwNode', SearchAttributeType.KEYWORD_LIST),
  model: defineSearchAttributeKey('LlmgwModel', SearchAttributeType.KEYWORD),
  replica: defineSearchAttributeKey('LlmgwReplica', SearchAttributeType.KEYWORD),
} as const;

/** `--search-attribute` arguments for `temporal server start-dev` and operator create. */
export const SEARCH_ATTRIBUTE_FLAGS: string[] = ['LlmgwNode=KeywordList', 'LlmgwModel=Keyword', 'LlmgwReplica=Keyword'];

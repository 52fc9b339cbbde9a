/**
 * What a node certificate may ask of Temporal through the door, as a pure function of the certificate's CN, the
 * call and its decoded request. A node's worker needs only: the two reads it makes when it connects (system info,
 * its namespace), activity-task polls of its own queue `node-<CN>`, and heartbeats and answers for the tasks those
 * polls handed it. Everything else — starting, signalling, querying, terminating or resetting workflows, polls of
 * other queues, workflow and Nexus polls, the *ById calls that name a task without its token — is refused.
 */
import { temporal } from '@temporalio/proto';
import { nodeQueue } from '../../lib/names';
import type { TaskTokenMemory } from './task-tokens';

const ws = temporal.api.workflowservice.v1;

/** The service every Temporal SDK call goes to. */
export const WORKFLOW_SERVICE = 'temporal.api.workflowservice.v1.WorkflowService';

/** Service and method of a gRPC path (`/pkg.Service/Method`), or null when it is not one. */
export function grpcMethod(path: string | undefined): { service: string; method: string } | null {
  const m = /^\/([A-Za-z0-9_.]+)\/([A-Za-z0-9_]+)$/.exec(path ?? '');
  return m ? { service: m[1] as string, method: m[2] as string } : null;
}

/** What the door does with a node's call. */
export type NodeCallVerdict =
  | { kind: 'allow'; after: 'nothing' | 'record-tokens' | { forget: Uint8Array } }
  | { kind: 'refuse'; code: 3 | 7; reason: string };

export interface NodeCall {
  /** the certificate's common name: the node id */
  cn: string;
  /** the namespace llmgw runs in (temporal.namespace) */
  namespace: string;
  service: string;
  method: string;
  /** the request message, uncompressed */
  request: Uint8Array;
  tokens: TaskTokenMemory;
}

const refuse = (reason: string): NodeCallVerdict => ({ kind: 'refuse', code: 7, reason });
const allow = (after: Extract<NodeCallVerdict, { kind: 'allow' }>['after'] = 'nothing'): NodeCallVerdict => ({
  kind: 'allow',
  after,
});

type Decoder<T> = { decode(b: Uint8Array): T };

/** Activity-task answers: allowed with a token this door handed to this node; the task is over once one succeeds. */
const ANSWERS = {
  RecordActivityTaskHeartbeat: { type: ws.RecordActivityTaskHeartbeatRequest, ends: false },
  RespondActivityTaskCompleted: { type: ws.RespondActivityTaskCompletedRequest, ends: true },
  RespondActivityTaskFailed: { type: ws.RespondActivityTaskFailedRequest, ends: true },
  RespondActivityTaskCanceled: { type: ws.RespondActivityTaskCanceledRequest, ends: true },
} as const satisfies Record<
  string,
  { type: Decoder<{ taskToken?: Uint8Array | null; namespace?: string | null }>; ends: boolean }
>;

/** Why a call no node worker makes is refused, for the calls people are likeliest to try. */
function otherCall(method: string, queue: string): string {
  if (method.endsWith('ById'))
    return `${method} names a task by workflow and activity id instead of a task token this node was handed`;
  if (method === 'PollWorkflowTaskQueue' || method === 'PollNexusTaskQueue')
    return `a node runs activities only: it polls activity tasks of ${queue}, never workflow or Nexus tasks`;
  return `not a call a node's worker makes: a node may poll ${queue} and answer the tasks it was handed, nothing else`;
}

/** Judges one call of a node certificate. Throws when the request does not decode (the caller answers INVALID_ARGUMENT). */
export function judgeNodeCall(c: NodeCall): NodeCallVerdict {
  const queue = nodeQueue(c.cn);
  if (c.service !== WORKFLOW_SERVICE)
    return refuse(`${c.service} is not the workflow service: a node needs nothing else`);
  const ns = (given: string | null | undefined): string | null =>
    given === c.namespace ? null : `namespace ${JSON.stringify(given ?? '')} is not this cluster's (${c.namespace})`;
  switch (c.method) {
    case 'GetSystemInfo':
      return allow();
    case 'DescribeNamespace': {
      const r = ws.DescribeNamespaceRequest.decode(c.request);
      return r.id
        ? refuse('DescribeNamespace by id: name the namespace')
        : ns(r.namespace)
          ? refuse(ns(r.namespace) as string)
          : allow();
    }
    case 'PollActivityTaskQueue': {
      const r = ws.PollActivityTaskQueueRequest.decode(c.request);
      const wrong = ns(r.namespace);
      if (wrong) return refuse(wrong);
      const asked = r.taskQueue?.name ?? '';
      if (asked !== queue)
        return refuse(`node ${c.cn} may poll only its own queue ${queue}, not ${JSON.stringify(asked)}`);
      return allow('record-tokens');
    }
    case 'ShutdownWorker': {
      const r = ws.ShutdownWorkerRequest.decode(c.request);
      const wrong = ns(r.namespace);
      if (wrong) return refuse(wrong);
      // A node has no workflows, so no sticky queue of its own; another worker's it must not shut.
      if (r.stickyTaskQueue)
        return refuse(`ShutdownWorker of sticky queue ${JSON.stringify(r.stickyTaskQueue)}: a node worker has none`);
      if (r.taskQueue && r.taskQueue !== queue)
        return refuse(`ShutdownWorker of ${JSON.stringify(r.taskQueue)}: node ${c.cn} speaks only for ${queue}`);
      return allow();
    }
    case 'RecordWorkerHeartbeat': {
      const r = ws.RecordWorkerHeartbeatRequest.decode(c.request);
      const wrong = ns(r.namespace);
      if (wrong) return refuse(wrong);
      const other = (r.workerHeartbeat ?? []).find((h) => h.taskQueue && h.taskQueue !== queue);
      return other
        ? refuse(`a worker heartbeat for ${JSON.stringify(other.taskQueue)}: node ${c.cn} speaks only for ${queue}`)
        : allow();
    }
  }
  if (c.method in ANSWERS) {
    const a = ANSWERS[c.method as keyof typeof ANSWERS];
    const r = a.type.decode(c.request);
    const wrong = ns(r.namespace);
    if (wrong) return refuse(wrong);
    const token = r.taskToken ?? new Uint8Array();
    if (token.length === 0) return refuse(`${c.method} without a task token`);
    if (!c.tokens.has(c.cn, token))
      return refuse(
        `${c.method} with a task token this door never handed to ${c.cn} (another node's task, a forged token, or one forgotten since)`,
      );
    return allow(a.ends ? { forget: token } : 'nothing');
  }
  return refuse(otherCall(c.method, queue));
}

/** The task token an activity-task answer carries (null for any other call, or none given): what the door recalls first. */
export function answerToken(method: string, request: Uint8Array): Uint8Array | null {
  if (!(method in ANSWERS)) return null;
  const t = ANSWERS[method as keyof typeof ANSWERS].type.decode(request).taskToken;
  return t && t.length > 0 ? t : null;
}

/** Every task token in a PollActivityTaskQueue answer (none when the long poll ended empty). */
export function pollResponseToken(response: Uint8Array): Uint8Array | null {
  const r = ws.PollActivityTaskQueueResponse.decode(response);
  return r.taskToken && r.taskToken.length > 0 ? r.taskToken : null;
}

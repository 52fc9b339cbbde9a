/** The Temporal door's pure parts: gRPC framing, the task-token memory, the node policy, its address and its config. */
import { gzipSync } from 'node:zlib';
import { temporal } from '@temporalio/proto';
import { parseServerConfig } from '../../config/load';
import {
  grpcMethod,
  judgeNodeCall,
  pollResponseToken,
  WORKFLOW_SERVICE,
  type NodeCall,
} from '../../gateway/door/policy';
import {
  decodeGrpcMessage,
  encodeGrpcMessage,
  frameMessage,
  grpcTimeoutHeader,
  grpcTimeoutMs,
  messageBytes,
  parseFrames,
} from '../../gateway/door/grpc-frames';
import { TaskTokenMemory } from '../../gateway/door/task-tokens';
import { doorAddressFor } from '../../gateway/door/door';

const ws = temporal.api.workflowservice.v1;
const token = (s: string): Uint8Array => Buffer.from(s);

describe('gRPC frames', () => {
  test('messages split, gzip ones read, a cut one refused', async () => {
    const a = frameMessage(Buffer.from('hello'));
    const zipped = gzipSync(Buffer.from('world'));
    const b = Buffer.concat([Buffer.from([1, 0, 0, 0, zipped.length]), zipped]);
    const frames = parseFrames(Buffer.concat([a, b]));
    expect(frames.map((f) => f.compressed)).toEqual([false, true]);
    expect((await messageBytes(frames[1] as (typeof frames)[1], 'gzip')).toString()).toBe('world');
    await expect(messageBytes(frames[1] as (typeof frames)[1], 'snappy')).rejects.toThrow(/reads gzip only/);
    expect(() => parseFrames(a.subarray(0, 7))).toThrow(/cut short \(2 of 5 bytes\)/);
    expect(() => parseFrames(Buffer.from([0, 0, 0]))).toThrow(/header is cut short/);
    expect(parseFrames(Buffer.alloc(0))).toEqual([]);
  });

  test('grpc-message is percent-encoded outside printable ASCII and back', () => {
    const m = 'node "gpu-01" – 100% refused';
    expect(encodeGrpcMessage(m)).toBe('node "gpu-01" %E2%80%93 100%25 refused');
    expect(decodeGrpcMessage(encodeGrpcMessage(m))).toBe(m);
  });
});

describe('grpc-timeout', () => {
  test('reads every unit gRPC defines, and nothing else', () => {
    expect(grpcTimeoutMs('70000000u')).toBe(70_000); // what the SDK's core sends on a poll
    expect(grpcTimeoutMs('70S')).toBe(70_000);
    expect(grpcTimeoutMs('2M')).toBe(120_000);
    expect(grpcTimeoutMs('1H')).toBe(3_600_000);
    expect(grpcTimeoutMs('1500m')).toBe(1500);
    expect(grpcTimeoutMs('30000000n')).toBe(30); // at most 8 digits, as gRPC's spec says
    for (const bad of [undefined, '', '10', '10s', '123456789S', '-5S', ['10S']]) expect(grpcTimeoutMs(bad)).toBeNull();
  });
  test('writes whole milliseconds, never less than one', () => {
    expect(grpcTimeoutHeader(64_999.7)).toBe('64999m');
    expect(grpcTimeoutMs(grpcTimeoutHeader(65_000))).toBe(65_000);
    expect(grpcTimeoutHeader(-3)).toBe('1m');
  });
});

describe('task-token memory', () => {
  test('a token is good only for the node it was handed to, until forgotten', () => {
    const m = new TaskTokenMemory();
    m.remember('a', token('t1'));
    expect(m.has('a', token('t1'))).toBe(true);
    expect(m.has('b', token('t1'))).toBe(false);
    expect(m.has('a', token('t2'))).toBe(false);
    m.forget('a', token('t1'));
    expect(m.has('a', token('t1'))).toBe(false);
    expect(m.stats()).toEqual({ tokens: 0, nodes: 0, evicted: 0 });
  });

  test('bounded per node, least recently used first: a token in use stays', () => {
    const m = new TaskTokenMemory({ perNode: 3 });
    for (const t of ['t1', 't2', 't3']) m.remember('a', token(t));
    expect(m.has('a', token('t1'))).toBe(true); // a heartbeat: t1 is now the newest
    m.remember('a', token('t4'));
    expect(['t1', 't2', 't3', 't4'].map((t) => m.has('a', token(t)))).toEqual([true, false, true, true]);
    m.remember('b', token('t1'));
    expect(m.stats()).toEqual({ tokens: 4, nodes: 2, evicted: 1 });
  });

  test("with a backing store, a new memory (a restarted door, another control plane) recalls a running task's token", async () => {
    const rows = new Set<string>();
    const backing = {
      rememberTaskToken: async (cn: string, d: string) => void rows.add(`${cn}/${d}`),
      hasTaskToken: async (cn: string, d: string) => rows.has(`${cn}/${d}`),
      forgetTaskToken: async (cn: string, d: string) => void rows.delete(`${cn}/${d}`),
    };
    new TaskTokenMemory({ backing }).remember('a', token('t1'));
    await new Promise((r) => setImmediate(r));
    const restarted = new TaskTokenMemory({ backing });
    expect(restarted.has('a', token('t1'))).toBe(false);
    expect(await restarted.recall('b', token('t1'))).toBe(false);
    expect(await restarted.recall('a', token('t1'))).toBe(true);
    expect(restarted.has('a', token('t1'))).toBe(true);
    restarted.forget('a', token('t1'));
    await new Promise((r) => setImmediate(r));
    expect(rows.size).toBe(0);
    const logs: string[] = [];
    const broken = new TaskTokenMemory({
      backing: { ...backing, hasTaskToken: () => Promise.reject(new Error('MySQL down')) },
      log: (msg, f) => void logs.push(`${msg}: ${String(f.error)}`),
    });
    expect(await broken.recall('a', token('t2'))).toBe(false);
    expect(logs).toEqual(['task token store failed: MySQL down']);
  });
});

describe('what a node certificate may ask of Temporal', () => {
  const tokens = new TaskTokenMemory();
  tokens.remember('gpu-01', token('mine'));
  const call = (method: string, request: Uint8Array, o: Partial<NodeCall> = {}): ReturnType<typeof judgeNodeCall> =>
    judgeNodeCall({ cn: 'gpu-01', namespace: 'default', service: WORKFLOW_SERVICE, method, request, tokens, ...o });
  const poll = (queue: string, namespace = 'default'): Uint8Array =>
    ws.PollActivityTaskQueueRequest.encode({ namespace, taskQueue: { name: queue } }).finish();
  const answer = (t: string, namespace = 'default'): Uint8Array =>
    ws.RespondActivityTaskCompletedRequest.encode({ namespace, taskToken: token(t) }).finish();

  test('its own queue, the start-up reads and answers with its own tokens pass', () => {
    expect(call('GetSystemInfo', new Uint8Array())).toEqual({ kind: 'allow', after: 'nothing' });
    expect(call('DescribeNamespace', ws.DescribeNamespaceRequest.encode({ namespace: 'default' }).finish())).toEqual({
      kind: 'allow',
      after: 'nothing',
    });
    expect(call('PollActivityTaskQueue', poll('node-gpu-01'))).toEqual({ kind: 'allow', after: 'record-tokens' });
    expect(
      call(
        'RecordActivityTaskHeartbeat',
        ws.RecordActivityTaskHeartbeatRequest.encode({ namespace: 'default', taskToken: token('mine') }).finish(),
      ),
    ).toEqual({ kind: 'allow', after: 'nothing' });
    expect(call('RespondActivityTaskCompleted', answer('mine'))).toEqual({
      kind: 'allow',
      after: { forget: token('mine') },
    });
    expect(
      call(
        'ShutdownWorker',
        ws.ShutdownWorkerRequest.encode({ namespace: 'default', taskQueue: 'node-gpu-01' }).finish(),
      ),
    ).toEqual({ kind: 'allow', after: 'nothing' });
  });

  test.each([
    [
      'PollActivityTaskQueue',
      poll('node-gpu-02'),
      'node gpu-01 may poll only its own queue node-gpu-01, not "node-gpu-02"',
    ],
    ['PollActivityTaskQueue', poll('node-gpu-01', 'other'), 'namespace "other" is not this cluster\'s (default)'],
    [
      'RespondActivityTaskCompleted',
      answer('theirs'),
      'RespondActivityTaskCompleted with a task token this door never handed to gpu-01',
    ],
    [
      'RespondActivityTaskFailed',
      ws.RespondActivityTaskFailedRequest.encode({ namespace: 'default' }).finish(),
      'RespondActivityTaskFailed without a task token',
    ],
    ['PollWorkflowTaskQueue', new Uint8Array(), 'a node runs activities only'],
    ['RespondActivityTaskCompletedById', new Uint8Array(), 'names a task by workflow and activity id'],
    ['StartWorkflowExecution', new Uint8Array(), "not a call a node's worker makes"],
    ['TerminateWorkflowExecution', new Uint8Array(), "not a call a node's worker makes"],
    [
      'ShutdownWorker',
      ws.ShutdownWorkerRequest.encode({ namespace: 'default', stickyTaskQueue: 'llmgw-control-sticky' }).finish(),
      'a node worker has none',
    ],
    [
      'RecordWorkerHeartbeat',
      ws.RecordWorkerHeartbeatRequest.encode({
        namespace: 'default',
        workerHeartbeat: [{ taskQueue: 'llmgw-control' }],
      }).finish(),
      'speaks only for node-gpu-01',
    ],
    ['DescribeNamespace', ws.DescribeNamespaceRequest.encode({ id: 'abc' }).finish(), 'DescribeNamespace by id'],
  ])('%s is refused (%s)', (method, request, reason) => {
    const v = call(method, request as Uint8Array);
    expect(v).toMatchObject({ kind: 'refuse', code: 7 });
    expect(v.kind === 'refuse' && v.reason).toContain(reason);
  });

  test('another service is refused; a path that is not gRPC is no method', () => {
    expect(
      call('ListClusters', new Uint8Array(), { service: 'temporal.api.operatorservice.v1.OperatorService' }),
    ).toMatchObject({ kind: 'refuse', code: 7 });
    expect(grpcMethod('/temporal.api.workflowservice.v1.WorkflowService/PollActivityTaskQueue')).toEqual({
      service: WORKFLOW_SERVICE,
      method: 'PollActivityTaskQueue',
    });
    expect(grpcMethod('/index.html')).toBeNull();
  });

  test('a poll answer yields its task token; an empty one (a long poll that ended) none', () => {
    expect(
      pollResponseToken(ws.PollActivityTaskQueueResponse.encode({ taskToken: token('t'), activityId: '1' }).finish()),
    ).toEqual(token('t'));
    expect(pollResponseToken(new Uint8Array())).toBeNull();
  });
});

describe("the door's address and listener", () => {
  const listeners = (
    door: string,
  ): { controlPlane: { host: string }; temporalDoor: { host: string; port: number } } => ({
    controlPlane: { host: '127.0.0.1' },
    temporalDoor: { host: door, port: 7444 },
  });

  test('nodes dial the host they reached the control plane at, unless the door listens on a host of its own', () => {
    expect(doorAddressFor(listeners('127.0.0.1'), 'cp.example.net')).toBe('cp.example.net:7444');
    expect(doorAddressFor(listeners('0.0.0.0'), '10.0.0.5')).toBe('10.0.0.5:7444');
    expect(doorAddressFor(listeners('::'), '::1')).toBe('[::1]:7444');
    expect(doorAddressFor(listeners('10.0.0.9'), 'cp.example.net')).toBe('10.0.0.9:7444');
  });

  test('listeners.temporalDoor is checked like the other listeners', () => {
    expect(parseServerConfig('', 'server.yaml').listeners.temporalDoor).toEqual({ host: '127.0.0.1', port: 7444 });
    const problem = (yaml: string): string => {
      try {
        parseServerConfig(yaml, 'server.yaml');
      } catch (err) {
        return (err as Error).message;
      }
      return 'no problem';
    };
    expect(problem('listeners:\n  temporalDoor:\n    port: 7443\n')).toMatch(
      /listeners\.temporalDoor\.port: 7443 is also the controlPlane port/,
    );
    expect(problem('listeners:\n  temporalDoor:\n    port: 7233\n')).toMatch(/7233 is Temporal's own port/);
    expect(problem('listeners:\n  temporalDoor:\n    port: 20001\n')).toMatch(/20001 lies inside enginePorts/);
    expect(problem('listeners:\n  temporalDor:\n    port: 1\n')).toMatch(/did you mean "temporalDoor"/);
  });
});

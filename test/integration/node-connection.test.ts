/**
 * Node connections share one call-context storage per process (workers/agent/worker.ts: the SDK's own, one per
 * connection and never disabled, made every promise of a many-agent process cost one copy per agent), and the scopes
 * the SDK opens on it still work: a deadline set on one connection fails that connection's request, ends with its
 * scope, and does not reach a request another connection makes outside it. Against a real Temporal dev server.
 */
import type { DevServer } from '../../cli/cluster/temporal-dev';
import type { NativeConnection } from '@temporalio/worker';
import { nodeConnection } from '../../workers/agent/worker';
import { startTestTemporal } from '../helpers/cluster-parts';

describe('node connections', () => {
  let temporal: DevServer;
  const open: NativeConnection[] = [];
  beforeAll(async () => {
    temporal = await startTestTemporal();
  });
  afterAll(async () => {
    await Promise.all(open.map((c) => c.close()));
    await temporal?.stop();
  });

  test('share one call-context storage, and a deadline scope on one fails only its own requests, only inside it', async () => {
    const connect = async (): Promise<NativeConnection> => {
      const c = await nodeConnection(
        { address: temporal.address, namespace: 'default', mtls: false },
        {
          caPem: '',
          certPem: '',
          keyPem: '',
        },
      );
      open.push(c);
      return c;
    };
    const a = await connect();
    const b = await connect();
    expect(a.callContextStorage).toBe(b.callContextStorage);

    const info = (c: NativeConnection): Promise<unknown> => c.workflowService.getSystemInfo({});
    // A deadline already past: the request fails for it, either the server's DEADLINE_EXCEEDED (4, "context deadline
    // exceeded") or the client's own timer firing first, CANCELLED (1, "Timeout expired"); a CI run saw the second.
    const late = await a
      .withDeadline(Date.now() - 1000, () => info(a))
      .then(
        () => null,
        (err: { code?: number; message?: string }) => ({ code: err.code, message: err.message }),
      );
    expect([
      { code: 4, message: 'context deadline exceeded' },
      { code: 1, message: 'Timeout expired' },
    ]).toContainEqual(late);
    // Outside the scope, both connections answer.
    await expect(info(a)).resolves.toBeDefined();
    await expect(info(b)).resolves.toBeDefined();
    // A request b makes while a's scope is open elsewhere (not inside it) is not touched by it.
    let release = (): void => undefined;
    const held = a.withDeadline(Date.now() - 1000, () => new Promise<void>((r) => (release = r)));
    await expect(info(b)).resolves.toBeDefined();
    release();
    await held;
  });
});

/**
 * The agent's control planes: one in use, the next asked when it does not answer or answers 5xx, the one that
 * answered kept (a control plane that comes back gets nothing until the one in use fails), each move logged once.
 */
import { ControlPlanes, type ControlClient } from '../../workers/agent/control-planes';

const A = 'https://cp-a:7443';
const B = 'https://cp-b:7443';
const C = 'https://cp-c:7443';

/** A fake mTLS client: each server answers what `state` says (a status, or `down` for a refused connection). */
function fakeClient(state: Record<string, number | 'down'>): ControlClient & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    request: async (url: string) => {
      asked.push(url);
      const s = state[new URL(url).origin];
      if (s === undefined || s === 'down')
        throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
      return new Response(JSON.stringify({ s }), { status: s });
    },
    use: () => undefined,
    close: async () => undefined,
  };
}

function planes(
  state: Record<string, number | 'down'>,
  servers = [A, B],
): { cps: ControlPlanes; client: ReturnType<typeof fakeClient>; logs: Record<string, unknown>[] } {
  const logs: Record<string, unknown>[] = [];
  const client = fakeClient(state);
  return { cps: new ControlPlanes({ servers, client, log: (msg, f) => void logs.push({ msg, ...f }) }), client, logs };
}

test('one server: it is asked, whatever it answers, and nothing is logged', async () => {
  const { cps, client, logs } = planes({ [A]: 503 }, [A]);
  expect((await cps.fetch('/v1/agent/heartbeat')).status).toBe(503);
  expect(client.asked).toEqual([`${A}/v1/agent/heartbeat`]);
  expect(logs).toEqual([]);
});

test('a refused connection moves to the next control plane, which stays in use after the first comes back', async () => {
  const state: Record<string, number | 'down'> = { [A]: 200, [B]: 200 };
  const { cps, client, logs } = planes(state);
  expect((await cps.fetch('/x')).status).toBe(200);
  expect(cps.current).toBe(A);
  state[A] = 'down';
  expect((await cps.fetch('/x')).status).toBe(200);
  expect(cps.current).toBe(B);
  state[A] = 200;
  client.asked.length = 0;
  await cps.fetch('/x');
  await cps.fetch('/x');
  expect(client.asked).toEqual([`${B}/x`, `${B}/x`]);
  expect(logs).toEqual([
    {
      msg: 'control plane failover: this agent now talks to another control plane',
      level: 'warn',
      from: A,
      to: B,
      why: 'fetch failed: ECONNREFUSED',
    },
  ]);
});

test("a 5xx fails over; a 4xx is the control plane's answer and does not", async () => {
  const { cps, logs } = planes({ [A]: 403, [B]: 200 });
  expect((await cps.fetch('/x')).status).toBe(403);
  expect(cps.current).toBe(A);
  const s = planes({ [A]: 502, [B]: 200 });
  expect((await s.cps.fetch('/x')).status).toBe(200);
  expect(s.cps.current).toBe(B);
  expect(s.logs).toEqual([expect.objectContaining({ from: A, to: B, why: 'HTTP 502' })]);
  expect(logs).toEqual([]);
});

test('none answering: the one in use stays, and its own answer or error reaches the caller', async () => {
  const down = planes({ [A]: 'down', [B]: 'down' });
  await expect(down.cps.fetch('/x')).rejects.toThrow('fetch failed');
  expect(down.cps.current).toBe(A);
  const failing = planes({ [A]: 503, [B]: 'down' });
  expect((await failing.cps.fetch('/x')).status).toBe(503);
  expect([down.logs, failing.logs]).toEqual([[], []]);
});

test('in order, wrapping round: from B, a failure tries C, then A', async () => {
  const state: Record<string, number | 'down'> = { [A]: 'down', [B]: 200, [C]: 'down' };
  const { cps, client, logs } = planes(state, [A, B, C]);
  await cps.fetch('/x');
  expect(cps.current).toBe(B);
  state[B] = 'down';
  state[A] = 200;
  client.asked.length = 0;
  await cps.fetch('/x');
  expect(client.asked).toEqual([`${B}/x`, `${C}/x`, `${A}/x`]);
  expect(cps.current).toBe(A);
  expect(logs.map((l) => [l.from, l.to])).toEqual([
    [A, B],
    [B, A],
  ]);
});

test('calls failing over together log the move once', async () => {
  const { cps, logs } = planes({ [A]: 'down', [B]: 200 });
  await Promise.all([cps.fetch('/a'), cps.fetch('/b'), cps.fetch('/c')]);
  expect(cps.current).toBe(B);
  expect(logs).toHaveLength(1);
});

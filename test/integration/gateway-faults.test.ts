/**
 * The gateway against replicas that fail as real processes do: a sim engine frozen with SIGSTOP (its kernel still
 * accepts connections, nothing answers: what an NCCL hang looks like from outside) and a listener whose accept
 * queue is full (connections never open). Each ends in a typed error or a retry within the configured timeouts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { simEngineArgv } from '../../lib/sim/argv';
import { chat, closeAll, gateway, post, ready } from '../helpers/gateway';
import { freePort } from '../helpers/ports';
import { waitFor } from '../helpers/wait';

const MODEL = 'sim-7b';
const CLIENT_DEADLINE_MS = 30_000;
const children: ChildProcess[] = [];
const sockets: Socket[] = [];

/** A sim engine process on a free port, serving. */
async function simEngine(): Promise<{ endpoint: string; child: ChildProcess }> {
  const port = await freePort();
  const [cmd, ...pre] = simEngineArgv();
  const child = spawn(
    cmd as string,
    [...pre, '--model', MODEL, '--host', '127.0.0.1', '--port', String(port), '--tokens-per-second', '0'],
    { stdio: 'ignore' },
  );
  children.push(child);
  const endpoint = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) })).ok, {
    timeoutMs: 20_000,
    what: `the sim engine on :${port}`,
  });
  return { endpoint, child };
}

/** A port that takes no new connection: python listens with a backlog of 0, never accepts, and one connection fills the queue. */
async function blackHole(): Promise<string> {
  const child = spawn(
    'python3',
    [
      '-c',
      'import socket,sys,time\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(600)',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(child);
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.once('data', (b: Buffer) => resolve(Number(b.toString().trim())));
    child.once('exit', (code) => reject(new Error(`python3 exited with ${code}`)));
  });
  // Fill the accept queue; the next connection attempt then hangs in SYN-SENT.
  const filler = connect(port, '127.0.0.1');
  sockets.push(filler);
  await new Promise<void>((r, j) => filler.once('connect', r).once('error', j));
  return `http://127.0.0.1:${port}`;
}

afterEach(async () => {
  await closeAll();
  for (const s of sockets.splice(0)) s.destroy();
  for (const c of children.splice(0)) {
    // SIGKILL reaches a stopped process too.
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
});

describe('a replica that accepts requests and never answers (sim engine under SIGSTOP)', () => {
  it('answers 504 LLMGW_UPSTREAM_TIMEOUT within firstByteMs, retries on a live replica, and serves again once the engine runs', async () => {
    const frozen = await simEngine();
    const live = await simEngine();
    const { url, routing, lines } = await gateway(
      { models: [MODEL], replicas: [ready('frozen', MODEL, frozen.endpoint)] },
      { timeouts: { connectMs: 2000, firstByteMs: 1000, idleMs: 1000, requestMs: 60_000 } },
    );
    expect((await post(`${url}/v1/chat/completions`, chat(MODEL))).status).toBe(200);
    frozen.child.kill('SIGSTOP');
    const r = await post(`${url}/v1/chat/completions`, chat(MODEL), {
      signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
    });
    expect(r.status).toBe(504);
    expect(((await r.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'LLMGW_UPSTREAM_TIMEOUT',
      message: expect.stringContaining('frozen: no answer within 1000 ms'),
    });
    expect(routing.inFlightOf('frozen')).toBe(0);

    // A second replica: the request that times out on the frozen one is answered by the live one.
    const two = await gateway(
      { models: [MODEL], replicas: [ready('frozen', MODEL, frozen.endpoint), ready('live', MODEL, live.endpoint)] },
      { timeouts: { connectMs: 2000, firstByteMs: 1000, idleMs: 1000, requestMs: 60_000 } },
    );
    for (let i = 0; i < 2; i++)
      expect(
        (await post(`${two.url}/v1/chat/completions`, chat(MODEL), { signal: AbortSignal.timeout(CLIENT_DEADLINE_MS) }))
          .status,
      ).toBe(200);
    expect(two.lines.filter((l) => l.msg.startsWith('retrying')).map((l) => l.failed)).toEqual(['frozen']);

    frozen.child.kill('SIGCONT');
    expect(
      (await post(`${url}/v1/chat/completions`, chat(MODEL), { signal: AbortSignal.timeout(CLIENT_DEADLINE_MS) }))
        .status,
    ).toBe(200);
    expect(lines.filter((l) => l.level === 'error').map((l) => l.code)).toEqual(['LLMGW_UPSTREAM_TIMEOUT']);
  });
});

describe('a replica whose connections never open', () => {
  it('gives up on it after connectMs, answers from another replica, and skips it for the next requests', async () => {
    const hole = await blackHole();
    const live = await simEngine();
    const { url, routing, lines } = await gateway(
      { models: [MODEL], replicas: [ready('hole', MODEL, hole), ready('live', MODEL, live.endpoint)] },
      {
        timeouts: { connectMs: 300, firstByteMs: 600_000, idleMs: 120_000, requestMs: 60_000 },
        routing: { ejectMs: 60_000 },
      },
    );
    // Round robin starts at "hole": the connect times out after 300 ms and "live" answers.
    expect(
      (await post(`${url}/v1/chat/completions`, chat(MODEL), { signal: AbortSignal.timeout(CLIENT_DEADLINE_MS) }))
        .status,
    ).toBe(200);
    expect(lines.filter((l) => l.msg.startsWith('replica ejected'))).toEqual([
      expect.objectContaining({ replica: 'hole', error: 'hole: no connection within 300 ms' }),
    ]);
    expect(routing.isEjected('hole')).toBe(true);
    for (let i = 0; i < 3; i++)
      expect(
        (await post(`${url}/v1/chat/completions`, chat(MODEL), { signal: AbortSignal.timeout(CLIENT_DEADLINE_MS) }))
          .status,
      ).toBe(200);
    expect(lines.filter((l) => l.msg.startsWith('retrying'))).toHaveLength(1);
  });

  it('answers 504 when the only replica never connects', async () => {
    const hole = await blackHole();
    const { url } = await gateway(
      { models: [MODEL], replicas: [ready('hole', MODEL, hole)] },
      { timeouts: { connectMs: 300, firstByteMs: 600_000, idleMs: 120_000, requestMs: 60_000 } },
    );
    const r = await post(`${url}/v1/chat/completions`, chat(MODEL), {
      signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
    });
    expect(r.status).toBe(504);
    expect(((await r.json()) as { error: { code: string; message: string } }).error).toEqual({
      code: 'LLMGW_UPSTREAM_TIMEOUT',
      type: 'server_error',
      message: `model ${MODEL}: every replica failed before answering (hole: no connection within 300 ms)`,
    });
  });
});

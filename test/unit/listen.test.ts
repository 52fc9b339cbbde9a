/** waitListening, the check before a workers-first engine's rank 0 starts: listening, exited, never listening. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createListenActivities } from '../../activities/node/listen';
import { enginePaths, shardKey, writeJsonAtomic } from '../../lib/engine-state';
import { freePort } from '../helpers/ports';

describe('waitListening', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-listen-'));
  const { waitListening } = createListenActivities({ nodeId: 'rpc-b', stateDir: dir });
  const input = (port: number, timeoutS = 5) => ({
    replicaId: 'm-0',
    generation: 2,
    rank: 1,
    host: '127.0.0.1',
    port,
    timeoutS,
  });
  let server: Server | undefined;
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  afterEach(() => void server?.close());

  it('returns once the worker accepts connections', async () => {
    const port = await freePort();
    setTimeout(() => void (server = createServer().listen(port, '127.0.0.1')), 400);
    const r = (await new MockActivityEnvironment().run(waitListening, input(port))) as { waitedMs: number };
    expect(r.waitedMs).toBeGreaterThanOrEqual(300);
  });

  it("fails with the worker's exit and its own output when it exited first", async () => {
    const paths = enginePaths(dir, shardKey('m-0', 2, 1));
    writeFileSync(paths.log, 'Starting RPC server v7.0.0\nerror: failed to bind 127.0.0.1: Address already in use\n');
    writeJsonAtomic(paths.exit, { code: 1, signal: null, at: new Date().toISOString() });
    await expect(new MockActivityEnvironment().run(waitListening, input(await freePort()))).rejects.toMatchObject({
      type: 'LLMGW_ENGINE_EXITED',
      message: expect.stringMatching(
        /rank 1 of m-0 on rpc-b .* exited \(code 1\) before it listened; last output:\n.*Address already in use/s,
      ),
    });
    rmSync(paths.exit);
  });

  it('fails with LLMGW_RANK_NOT_LISTENING and the output so far when it never listens', async () => {
    await expect(new MockActivityEnvironment().run(waitListening, input(await freePort(), 1))).rejects.toMatchObject({
      type: 'LLMGW_RANK_NOT_LISTENING',
      message: expect.stringMatching(
        /did not listen within 1s, so rank 0 was not started; last output:\n.*Address already in use/s,
      ),
    });
  });
});

/**
 * Host keys the accept-new way, against real OpenSSH test hosts: a machine known by one key type that gained
 * another is still known (the known type is asked for first); a machine rebuilt at the same address with a new
 * key is refused by onboarding with both fingerprints, and learned anew once `llmgw ctl forget-host-key` ran.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { createOnboardActivities } from '../../activities/ca/onboard';
import { forgetHostKey } from '../../cli/ctl/forget-host-key';
import { QUEUES, workflowIds } from '../../lib/names';
import { HostKeyStore } from '../../lib/store/host-keys';
import { startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';

describe('ssh host keys, accept-new', () => {
  let c: OnboardCluster;
  let acts: ReturnType<typeof createOnboardActivities>;
  const keyFile = (name: string, type: string): string => {
    const f = join(c.dir, name);
    execFileSync('ssh-keygen', ['-q', '-t', type, '-N', '', '-f', f]);
    return f;
  };

  beforeAll(async () => {
    c = await startOnboardCluster({ catalog: [] });
    // The steps themselves, called directly (no heartbeat outside an activity): what the workflow runs first.
    acts = createOnboardActivities({
      caDir: join(c.dir, 'ca'),
      store: c.cp.store,
      hostKeys: new HostKeyStore(c.cp.store.pool),
      ca: { signNodeCsr: () => Promise.reject(new Error('unused')) },
      heartbeat: () => undefined,
    });
  }, 180_000);

  afterAll(async () => {
    await c?.close();
  }, 60_000);

  test('a known key type is asked for first: a machine that gained an Ed25519 key is no changed host', async () => {
    const [ecdsa, ed25519] = [keyFile('k-ecdsa', 'ecdsa'), keyFile('k-ed25519', 'ed25519')];
    // Known by its ECDSA key only ...
    const before = await c.lan.startHost({ nodeId: 'node-k', authorizedKeys: [c.sshPub], hostKeyFiles: [ecdsa] });
    expect((await acts.learnHostKey(c.input('node-k', before.address))).summary).toBe(
      `learned host key ecdsa-sha2-nistp256 ${before.fingerprints[0]}`,
    );
    await before.stop();
    // ... it now has an Ed25519 key too, which a client asks for first unless told otherwise.
    const after = await c.lan.startHost({
      nodeId: 'node-k',
      address: before.address,
      authorizedKeys: [c.sshPub],
      hostKeyFiles: [ecdsa, ed25519],
    });
    await acts.waitForSsh(c.input('node-k', after.address));
    expect(await acts.learnHostKey(c.input('node-k', after.address))).toEqual({
      summary: `known host key ecdsa-sha2-nistp256 ${before.fingerprints[0]}`,
      waitedMs: 0,
      changed: false,
    });
    await after.stop();
  }, 60_000);

  test('a changed host key is refused with both fingerprints, until llmgw ctl forget-host-key', async () => {
    const nodeId = 'node-r';
    const first = await c.lan.startHost({ nodeId, authorizedKeys: [c.sshPub] });
    await acts.learnHostKey(c.input(nodeId, first.address));
    const old = first.fingerprints[0]!;
    await first.stop();
    // The machine rebuilt at the same address: same name, new host key.
    const host = await c.lan.startHost({ nodeId, address: first.address, authorizedKeys: [c.sshPub] });
    const handle = await c.cp.client.workflow.start('onboardNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.onboard(nodeId),
      args: [c.input(nodeId, host.address)],
    });
    const err = await handle.result().then(
      () => null,
      (e: Error & { cause?: Error & { type?: string } }) => e.cause,
    );
    expect(err?.type).toBe('LLMGW_HOST_KEY_CHANGED');
    expect(err?.message).toContain('failed at step "learn the host key"');
    expect(err?.message).toContain(`presented the ssh host key ssh-ed25519 ${host.fingerprints[0]}`);
    expect(err?.message).toContain(`known by ssh-ed25519 ${old}`);
    expect(err?.message).toContain(`llmgw ctl forget-host-key ${nodeId}`);
    // Nothing was done to the new machine.
    expect((await host.exec('ls /etc/llmgw 2>&1')).stdout).toMatch(/No such file/);

    const forgot = await c.cli(['ctl', 'forget-host-key', nodeId, '--config', c.configFile]);
    expect({ code: forgot.code, err: forgot.err }).toEqual({ code: 0, err: '' });
    expect(forgot.out).toContain(`${nodeId}: forgot ssh-ed25519 ${old}`);
    expect(await forgetHostKey(c.config, nodeId, () => undefined)).toBe(0);
    // Now the new key is learned like any new machine's.
    expect((await acts.learnHostKey(c.input(nodeId, host.address))).summary).toBe(
      `learned host key ssh-ed25519 ${host.fingerprints[0]}`,
    );
    await host.stop();
  }, 90_000);
});

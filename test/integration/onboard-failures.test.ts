/**
 * Onboarding against machines that are not ready or not right (real OpenSSH test hosts): one that refuses
 * connections for its first seconds, reached as a non-root user with sudo, is waited for (and Ctrl-C on the CLI detaches while onboarding goes on;
 * llmgw ctl follow reattaches); an engine that cannot start — a real binary the loader refuses for want of
 * libgomp.so.1, the node05 story — fails onboarding at the probe with the loader's own words, and no agent runs.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QUEUES, workflowIds } from '../../lib/names';
import type { OnboardResult } from '../../workflows/contracts/onboard';
import { fakeGpu, startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';

/** A real program that needs libgomp (OpenMP), as llama.cpp's CPU backend does; prints a version like it. */
function llamaLikeBinary(): string {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-omp-'));
  writeFileSync(
    join(dir, 'main.c'),
    '#include <omp.h>\n#include <stdio.h>\nint main(void) { printf("version: 1 (omp %d threads)\\n", omp_get_max_threads()); return 0; }\n',
  );
  execFileSync('gcc', ['-fopenmp', '-o', join(dir, 'llama-server'), join(dir, 'main.c')]);
  return join(dir, 'llama-server');
}

describe('onboarding machines that are not ready or not right', () => {
  let c: OnboardCluster;

  beforeAll(async () => {
    c = await startOnboardCluster({ catalog: [] });
  }, 180_000);

  afterAll(async () => {
    await c?.close();
  }, 60_000);

  test('a machine refusing connections for its first seconds is waited for (reached as a sudo user); Ctrl-C detaches, ctl follow reattaches', async () => {
    // sshd is held until the test lets it start: however long the CLI takes to start on a loaded machine, its
    // first attempts meet refusals.
    const host = await c.lan.startHost({ nodeId: 'node-slow', authorizedKeys: [c.sshPub], sshdHeld: true });
    const booted = Date.now();
    await fakeGpu(host);
    // As a cloud image's default user: not root, passwordless sudo ('*': no password, but not a locked account).
    const user = await host.exec(
      "useradd -M -d /var/lib/ops -s /bin/sh ops && usermod -p '*' ops && echo 'ops ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/ops && chmod 440 /etc/sudoers.d/ops",
    );
    expect(user).toMatchObject({ code: 0 });
    const args = [
      'onboard-node',
      '--config',
      c.configFile,
      '--node',
      'node-slow',
      '--addr',
      host.address,
      '--server',
      c.cp.url,
      '--binary',
      c.artefact.file,
      '--ssh-key',
      c.sshKey,
      '--nvidia-smi',
      '/usr/local/bin/nvidia-smi',
      '--ssh-user',
      'ops',
    ];
    // Interrupted while it waits for ssh: the CLI says how to follow it again, and exits 0.
    let interrupted = false;
    const first = await c.cli(args, {
      onOutput: (out, kill) => {
        if (interrupted || !/waiting for: ssh ops@.*attempt 2 \(last: unreachable: .*ECONNREFUSED/.test(out)) return;
        interrupted = true;
        kill('SIGINT');
      },
    });
    expect(first.out).toMatch(/waiting for: ssh ops@[\d.]+:22, attempt 1/);
    expect(first.out).toContain(
      'detached: onboard/node-slow goes on in Temporal; follow it again with llmgw ctl follow onboard/node-slow',
    );
    expect({ code: first.code, err: first.err }).toEqual({ code: 0, err: '' });
    // The machine's ssh comes up 5 s after it booted, and at least 3.5 s after the step began waiting (it had
    // begun before the interrupt: its second attempt was seen), however long the CLI took to start.
    await new Promise((r) => setTimeout(r, Math.max(3500, booted + 5000 - Date.now())));
    host.startSshd();
    const follow = await c.cli(['ctl', 'follow', 'onboard/node-slow', '--config', c.configFile]);
    expect({ code: follow.code, err: follow.err }).toEqual({ code: 0, err: '' });
    expect(follow.out).toMatch(/✓ wait for ssh \([\d.]+ s\): ssh answered after \d+ attempts, [\d.]+ s of waiting/);
    expect(follow.out).toMatch(/node-slow onboarded in/);
    const r = (await c.cp.client.workflow.getHandle(workflowIds.onboard('node-slow')).result()) as OnboardResult;
    const ssh = r.steps[0]!;
    expect(ssh.waitedMs).toBeGreaterThanOrEqual(3000);
    console.log(
      `a machine refusing ssh for 5 s: onboarded in ${(r.totalMs / 1000).toFixed(2)} s, ${(r.waitedMs / 1000).toFixed(2)} s of it waiting on the node (ssh: ${ssh.summary})`,
    );
    expect((await c.cp.store.listNodes()).map((n) => n.id)).toContain('node-slow');
    // Installed through sudo: root's files, the key 0600.
    expect(
      (
        await host.exec(
          'stat -c "%n %U %a" /etc/llmgw/node.key /etc/llmgw/agent.sh /usr/local/share/ca-certificates/llmgw-ca.crt',
        )
      ).stdout,
    ).toBe(
      '/etc/llmgw/node.key root 600\n/etc/llmgw/agent.sh root 755\n/usr/local/share/ca-certificates/llmgw-ca.crt root 644\n',
    );
    await host.stop();
  }, 120_000);

  test('an engine that cannot start (a loader error) fails onboarding at the probe with that error; no agent is started', async () => {
    const host = await c.lan.startHost({
      nodeId: 'node-gomp',
      authorizedKeys: [c.sshPub],
      remove: ['/usr/lib/x86_64-linux-gnu/libgomp.so.1', '/usr/lib/aarch64-linux-gnu/libgomp.so.1'],
    });
    await fakeGpu(host);
    const bin = readFileSync(llamaLikeBinary()).toString('base64');
    expect(
      (
        await host.exec(
          'mkdir -p /opt/llama.cpp && base64 -d > /opt/llama.cpp/llama-server && chmod 755 /opt/llama.cpp/llama-server',
          { stdin: bin },
        )
      ).code,
    ).toBe(0);
    const handle = await c.cp.client.workflow.start('onboardNode', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.onboard('node-gomp'),
      args: [c.input('node-gomp', host.address, { bins: { llamacpp: '/opt/llama.cpp/llama-server' } })],
    });
    const err = await handle.result().then(
      () => null,
      (e: Error & { cause?: Error & { type?: string } }) => e.cause,
    );
    expect(err?.type).toBe('LLMGW_ENGINE_PROBE_FAILED');
    expect(err?.message).toContain(
      'failed at step "probe the engines": engine llamacpp cannot start on node-gomp: `/opt/llama.cpp/llama-server --version` exited 127',
    );
    expect(err?.message).toContain(
      'error while loading shared libraries: libgomp.so.1: cannot open shared object file',
    );
    expect(err?.message).toContain('apt-get install libgomp1');
    // The sim engine passed first; nothing was started and nothing registered.
    expect((await host.exec('/etc/llmgw/agent-service status')).stdout.trim()).toBe('stopped');
    expect((await c.cp.store.listNodes()).map((n) => n.id)).not.toContain('node-gomp');
    await host.stop();
  }, 120_000);
});

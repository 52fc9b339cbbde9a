/**
 * Onboarding over real ssh (issue 4): a test host (OpenSSH sshd in a network namespace with its own address,
 * hostname and filesystem view, no systemd, no checkout) onboarded by `llmgw onboard-node` through the
 * onboardNode workflow and the llmgw-ca worker, with the release artefact — registers, serves a sim replica
 * through the gateway; a rerun changes nothing (and a second start joins the first). Host keys: onboard-hostkeys.test.ts.
 */
import { QUEUES, workflowIds } from '../../lib/names';
import { onboardNode } from '../../cli/onboard';
import type { OnboardResult } from '../../workflows/contracts/onboard';
import { waitRoutable } from '../helpers/load';
import { fakeGpu, startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';
import type { TestHost } from '../helpers/test-host';
import { waitFor } from '../helpers/wait';

const MODEL = 'onboarded';
const secs = (ms: number | null): string => `${((ms ?? 0) / 1000).toFixed(2)} s`;

/** The wall time of an onboarding, by step, split into llmgw's own work and waiting on the node. */
function timing(label: string, r: OnboardResult): string {
  const rows = r.steps.map(
    (s) =>
      `  ${s.title.padEnd(24)} ${secs(s.ms).padStart(8)}  waiting ${secs(s.waitedMs).padStart(8)}  ${s.summary ?? ''}`,
  );
  return `${label}: ${secs(r.totalMs)} in all, ${secs(r.waitedMs)} waiting on the node, ${secs(r.totalMs - r.waitedMs)} llmgw's own work\n${rows.join('\n')}`;
}

describe('onboarding a node over real ssh', () => {
  let c: OnboardCluster;
  let host: TestHost;
  const nodeId = 'node-a';
  const address = (): string => host.address;

  beforeAll(async () => {
    c = await startOnboardCluster({
      catalog: [
        {
          name: MODEL,
          source: `sim://${MODEL}`,
          replicas: 1,
          profiles: [
            { name: 'default', engine: 'sim', nodes: 1, gpusPerNode: 1, args: ['--tokens-per-second', '500'] },
          ],
        },
      ],
    });
    host = await c.lan.startHost({ nodeId, authorizedKeys: [c.sshPub] });
    await fakeGpu(host);
  }, 180_000);

  afterAll(async () => {
    await c?.cp.client.workflow
      .getHandle(workflowIds.model(MODEL))
      .terminate()
      .catch(() => undefined);
    for (const r of (await c?.cp.store.listReplicas(MODEL).catch(() => [])) ?? [])
      await c.cp.client.workflow
        .getHandle(workflowIds.replica(r.id))
        .terminate()
        .catch(() => undefined);
    await c?.close();
  }, 60_000);

  test('llmgw onboard-node: step by step to a registered node that serves a sim replica', async () => {
    const r = await c.cli([
      'onboard-node',
      '--config',
      c.configFile,
      '--node',
      nodeId,
      '--addr',
      address(),
      '--server',
      c.cp.url,
      '--binary',
      c.artefact.file,
      '--ssh-key',
      c.sshKey,
      '--nvidia-smi',
      '/usr/local/bin/nvidia-smi',
      '--register-timeout',
      '60',
    ]);
    expect({ code: r.code, err: r.err }).toEqual({ code: 0, err: '' });
    // The terminal shows the workflow, its UI link, every step as it ends, and the time split.
    expect(r.out).toContain(`workflow onboard/${nodeId}`);
    expect(r.out).toContain(`/workflows/${encodeURIComponent(`onboard/${nodeId}`)}`);
    for (const step of [
      'wait for ssh',
      'learn the host key',
      'issue the certificate',
      'install',
      'probe the engines',
      'start the agent',
      'wait for registration',
      'install and probe its engines',
    ]) {
      expect(r.out).toMatch(new RegExp(`✓ ${step} \\(`));
    }
    expect(r.out).toContain(`learned host key ssh-ed25519 ${host.fingerprints[0]}`);
    expect(r.out).toMatch(/agent started without systemd/);
    expect(r.out).toMatch(
      new RegExp(`${nodeId} onboarded in [\\d.]+ s: [\\d.]+ s waiting on the node, [\\d.]+ s llmgw's own work`),
    );
    const result = (await c.cp.client.workflow.getHandle(workflowIds.onboard(nodeId)).result()) as OnboardResult;
    console.log(timing('first onboarding of a test host', result));

    // What it left on the machine: its hostname's certificate, the key 0600, the CA trusted system-wide, the agent running.
    const files = await host.exec(
      'stat -c "%n %a" /etc/llmgw/node.key /etc/llmgw/node.crt /usr/local/share/ca-certificates/llmgw-ca.crt; readlink /opt/llmgw/current; test -e /etc/ssl/certs/llmgw-ca.pem && echo trusted; /usr/local/bin/llmgw version; /etc/llmgw/agent-service status',
    );
    expect(files.stdout).toContain('/etc/llmgw/node.key 600');
    expect(files.stdout).toContain('/usr/local/share/ca-certificates/llmgw-ca.crt 644');
    expect(files.stdout).toContain(`/opt/llmgw/releases/${c.artefact.info.name}-${c.artefact.sha256.slice(0, 12)}`);
    expect(files.stdout).toContain('trusted');
    expect(files.stdout).toMatch(/llmgw \d+\.\d+\.\d+ \(release linux-/);
    expect(files.stdout).toMatch(/running \d+/);
    const openssl = await host.exec(
      'openssl verify -CAfile /etc/ssl/certs/ca-certificates.crt /etc/llmgw/node.crt; openssl x509 -in /etc/llmgw/node.crt -noout -subject',
    );
    expect(openssl.stdout).toContain('/etc/llmgw/node.crt: OK');
    expect(openssl.stdout).toContain(`CN = ${nodeId}`);

    // Registered, with its GPU, reached at its own address; it then serves a replica through the gateway.
    const node = (await c.cp.store.listNodes()).find((n) => n.id === nodeId);
    expect(node?.inventory.gpus).toHaveLength(1);
    expect(node?.inventory.host).toBe(address());
    await c.cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    await waitFor(
      async () => {
        const rs = await c.cp.store.listReplicas(MODEL);
        if (rs.some((x) => x.state === 'ready')) return true;
        const n = (await c.cp.store.listNodes()).find((x) => x.id === nodeId);
        const eng = await c.cp.client.workflow
          .getHandle(workflowIds.engines(nodeId))
          .describe()
          .then(
            (d) =>
              `${d.status.name} ${JSON.stringify(d.raw.pendingActivities?.map((p) => [p.activityType?.name, p.attempt, p.lastFailure?.message]))}`,
            (e: Error) => e.message,
          );
        const agentLog = (await host.exec('tail -n 15 /var/log/llmgw/agent.log')).stdout;
        throw new Error(
          `replicas ${JSON.stringify(rs.map((x) => [x.state, x.reason]))}; node ${n?.state} engines ${JSON.stringify((n as { engineStatus?: unknown } | undefined)?.engineStatus ?? n?.inventory.engines)}; ${workflowIds.engines(nodeId)}: ${eng}; the agent's log ends:\n${agentLog}`,
        );
      },
      { timeoutMs: 60_000, intervalMs: 500, what: `a replica of ${MODEL} ready on ${nodeId}` },
    );
    await waitRoutable(c.gateway.url, MODEL);
    const res = await fetch(`${c.gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    const [replica] = await c.cp.store.listReplicas(MODEL);
    expect(replica?.shards.map((s) => s.nodeId)).toEqual([nodeId]);
    // Behind the node's door, onboarding's default (--door <advertise-host>:7460): the route is the door's, and
    // the engine listens on the node's loopback only.
    expect(replica?.endpoint).toBe(`https://${address()}:7460/nodes/${nodeId}/replicas/${replica?.id}`);
    expect((await host.exec('cat /etc/llmgw/agent.sh')).stdout).toContain(` --door ${address()}:7460 `);
    // The engine runs on the test host, from the artefact: not from this checkout.
    const ps = await host.exec('ps -eo args | grep "[s]im-engine"');
    expect(ps.stdout).toContain('/opt/llmgw/');
    expect(ps.stdout).toContain('--host 127.0.0.1');
  }, 180_000);

  test('rerunning a finished onboarding changes nothing; a second start while one runs joins it', async () => {
    const before = await host.exec(
      'cat /run/llmgw-agent.pid; stat -c "%n %Y %i" /etc/llmgw/* /usr/local/share/ca-certificates/llmgw-ca.crt /opt/llmgw/current',
    );
    const certs = (await c.cp.store.listCertificates({ cn: nodeId })).length;
    const out: string[] = [];
    const link = 'http://ui/onboard';
    const [a, b] = await Promise.all([
      onboardNode(c.cp.client, c.input(nodeId, address()), {
        uiLink: link,
        out: (s) => void out.push(s),
        follow: true,
      }),
      new Promise((r) => setTimeout(r, 300)).then(() =>
        onboardNode(c.cp.client, c.input(nodeId, address()), {
          uiLink: link,
          out: (s) => void out.push(s),
          follow: true,
        }),
      ),
    ]);
    expect(out.join('')).toMatch(/joined the onboarding running since/);
    const ra = a as OnboardResult;
    expect(b).toEqual(ra);
    console.log(timing('rerun of a finished onboarding', ra));
    expect(ra.changed).toBe(false);
    expect(ra.steps.map((s) => s.summary)).toEqual([
      'ssh answered',
      `known host key ssh-ed25519 ${host.fingerprints[0]}`,
      expect.stringMatching(/^kept certificate [0-9a-f]{32}/),
      expect.stringMatching(/^nothing to change/),
      expect.stringMatching(/^engines run: sim/),
      expect.stringMatching(/^agent already running/),
      'registered and heartbeating',
      'engines offered: sim 1.0.0',
    ]);
    // Same agent process, same files (mtimes and inodes), no new certificate.
    expect(
      (
        await host.exec(
          'cat /run/llmgw-agent.pid; stat -c "%n %Y %i" /etc/llmgw/* /usr/local/share/ca-certificates/llmgw-ca.crt /opt/llmgw/current',
        )
      ).stdout,
    ).toBe(before.stdout);
    expect((await c.cp.store.listCertificates({ cn: nodeId })).length).toBe(certs);
    // One run served both starts.
    const runs = [];
    for await (const w of c.cp.client.workflow.list({ query: `WorkflowId = '${workflowIds.onboard(nodeId)}'` }))
      runs.push(w.runId);
    expect(runs).toHaveLength(2);
  }, 120_000);
});

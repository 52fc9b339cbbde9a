/**
 * llmgw ctl remove-node end to end: a node llmgw made (add-node on the Proxmox API fake: a VM named and tagged by
 * llmgw, booted as a test host running the real agent from the release artefact) holding a model's only replica
 * is refused while nothing else can take it; once another node can, its removal drains the replica there (the
 * model keeps serving), stops the agent over ssh, revokes its certificates, forgets its host keys and records,
 * and removes its VM. --force takes a model's last replica down with a node, and a VM of the node's name that
 * llmgw did not make is left alone. Real Temporal, MariaDB, control plane, CA and Proxmox workers, sshd, agents.
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { QUEUES, workflowIds } from '../../lib/names';
import { Proxmox } from '../../lib/proxmox/client';
import { startProxmoxWorker, type ProxmoxWorker } from '../../workers/proxmox';
import { waitRoutable } from '../helpers/load';
import { registerNode, simInventory, startNodeWorker, stopHeartbeats, type NodeWorker } from '../helpers/node-workers';
import { recordHistory } from '../helpers/histories';
import { fakeGpu, startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';
import { startProxmoxFake, type ProxmoxFake } from '../helpers/proxmox-fake';
import { closeCertClients } from '../helpers/tls';
import { waitFor } from '../helpers/wait';

const MODEL = 'held';
const MADE = 'pve-rm';
const OTHER = 'rm-b';

describe('llmgw ctl remove-node', () => {
  let c: OnboardCluster;
  let pve: ProxmoxFake;
  let proxmoxWorker: ProxmoxWorker;
  let worker: NodeWorker | undefined;
  const pids = new Map<string, number>();
  const ready = (what: string) =>
    waitFor(async () => (await c.cp.store.listReplicas(MODEL)).find((r) => r.state === 'ready'), {
      timeoutMs: 90_000,
      intervalMs: 300,
      what,
    });

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
    pve = await startProxmoxFake({ network: c.lan, taskMs: 200, bootMs: 1000, onBoot: (host) => fakeGpu(host) });
    const secretFile = join(c.dir, 'proxmox-token');
    writeFileSync(secretFile, `${pve.tokenSecret}\n`, { mode: 0o600 });
    const proxmox = {
      url: pve.url,
      node: pve.node,
      tokenId: pve.tokenId,
      tokenSecretFile: secretFile,
      ca: pve.caFile,
      storage: 'local-lvm',
      image: 'local:import/debian-12-genericcloud-amd64.qcow2',
      bridge: 'vmbr0',
      gateway: c.lan.gateway,
      nameserver: null,
      cores: 2,
      memoryMiB: 2048,
      disk: '16G',
    };
    appendFileSync(
      c.configFile,
      ['proxmox:', ...Object.entries(proxmox).map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`), ''].join('\n'),
    );
    proxmoxWorker = await startProxmoxWorker({
      config: { temporal: c.config.temporal, proxmox },
      pollMs: 200,
      lockBackoffMs: 300,
    });
    const net = c.lan.gateway.replace(/\d+$/, '');
    const added = await c.cli(
      [
        'add-node',
        '--config',
        c.configFile,
        '--name',
        MADE,
        '--ip',
        `${net}146/24`,
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
      ],
      { timeoutMs: 240_000 },
    );
    expect({ code: added.code, err: added.err }).toEqual({ code: 0, err: '' });
  }, 360_000);

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
    await worker?.stop();
    for (const pid of pids.values())
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    stopHeartbeats();
    await closeCertClients();
    await proxmoxWorker?.close();
    await pve?.close();
    await c?.close();
  }, 90_000);

  test("refused while the node holds a model's last replica and no other node can take it, naming both", async () => {
    await c.cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    expect((await ready(`${MODEL} on ${MADE}`)).shards.map((s) => s.nodeId)).toEqual([MADE]);
    // Another node, cordoned: it could take the replica but may not.
    worker = await startNodeWorker(c.temporal.address, OTHER, pids);
    await registerNode(c.cp, OTHER, simInventory({ fabric: false }));
    await c.cp.store.setNodeState(OTHER, 'cordoned');
    const r = await c.cli(['ctl', 'remove-node', MADE, '--config', c.configFile, '--ssh-key', c.sshKey]);
    console.log(`ctl remove-node (refused):\n${r.out}${r.err}`);
    expect(r.code).not.toBe(0);
    expect(r.err).toContain(
      `removing ${MADE} failed at step "check what it holds": ${MADE} holds the last replica of ${MODEL} (${MODEL}-0), and it fits nowhere else: no node can take ${MODEL}/default (sim, 1 GPU): ${OTHER}: cordoned`,
    );
    expect(r.err).toContain(`remove ${MADE} with --force (${MODEL} then stops serving until a node can take it)`);
    // Nothing was touched.
    expect((await c.cp.store.listNodes()).map((n) => n.id)).toContain(MADE);
    expect((await c.cp.store.listReplicas(MODEL)).find((x) => x.state === 'ready')?.shards[0]?.nodeId).toBe(MADE);
  }, 120_000);

  test('drains, stops the agent, revokes, forgets and removes the VM llmgw made; the model keeps serving', async () => {
    await c.cp.store.setNodeState(OTHER, 'ready');
    const host = pve.vms().find((v) => v.name === MADE)?.host;
    const vmid = pve.vms().find((v) => v.name === MADE)?.vmid;
    expect((await host?.exec('/etc/llmgw/agent-service status'))?.stdout).toMatch(/running \d+/);
    const r = await c.cli(
      ['ctl', 'remove-node', MADE, '--destroy-vm', '--config', c.configFile, '--ssh-key', c.sshKey],
      { timeoutMs: 180_000 },
    );
    console.log(`ctl remove-node --destroy-vm:\n${r.out}`);
    expect({ code: r.code, err: r.err }).toEqual({ code: 0, err: '' });
    expect(r.out).toContain(`removing ${MADE}: workflow remove-node/${MADE}`);
    expect(r.out).toMatch(new RegExp(`✓ drain its replicas \\([\\d.]+ s\\): moved ${MODEL}-0`));
    // Onboarded with its node door (the default), which outlives the agent: removal stops it too.
    expect(r.out).toMatch(
      /✓ stop the agent \([\d.]+ s\): no systemd: \/etc\/llmgw\/agent-service stop; its node door stopped \(pid \d+\)/,
    );
    expect(r.out).toMatch(/✓ revoke its certificates \([\d.]+ s\): 1 certificate revoked; the CRL republished/);
    expect(r.out).toMatch(/✓ forget its host keys and records \([\d.]+ s\): forgot 1 host key, the node's record/);
    expect(r.out).toMatch(
      new RegExp(`✓ remove its VM \\([\\d.]+ s\\): VM ${vmid} "${MADE}" \\(tag llmgw\\) on ${pve.node} removed`),
    );
    expect(r.out).toMatch(new RegExp(`${MADE} removed in [\\d.]+ s`));

    const moved = await ready(`${MODEL} serving on ${OTHER}`);
    expect(moved.shards.map((s) => s.nodeId)).toEqual([OTHER]);
    await waitRoutable(c.gateway.url, MODEL, 30_000);
    expect((await c.cp.store.listNodes()).map((n) => n.id)).not.toContain(MADE);
    expect((await c.cp.store.listCertificates({ cn: MADE })).every((x) => x.revokedAt !== null)).toBe(true);
    expect(pve.vms().find((v) => v.name === MADE)).toBeUndefined();
    const nodes = await c.cli(['ctl', 'nodes', '--config', c.configFile]);
    expect(nodes.out).not.toMatch(new RegExp(`^${MADE} `, 'm'));
    recordHistory(c.temporal.address, 'remove-node.json', workflowIds.removeNode(MADE));
  }, 240_000);

  test("--force takes a model's last replica down with its node; a VM of its name llmgw did not make is left alone", async () => {
    const api = new Proxmox({ url: pve.url, tokenId: pve.tokenId, tokenSecret: pve.tokenSecret, caPem: pve.caPem });
    try {
      await api.waitTask(await api.createVm(pve.node, { vmid: 190, name: OTHER, cores: 1, memory: 512 }), {
        pollMs: 100,
      });
    } finally {
      await api.close();
    }
    const refused = await c.cli([
      'ctl',
      'remove-node',
      OTHER,
      '--destroy-vm',
      '--config',
      c.configFile,
      '--ssh-key',
      c.sshKey,
    ]);
    expect(refused.err).toContain(`${OTHER} holds the last replica of ${MODEL}`);
    const r = await c.cli(
      ['ctl', 'remove-node', OTHER, '--destroy-vm', '--force', '--config', c.configFile, '--ssh-key', c.sshKey],
      { timeoutMs: 180_000 },
    );
    console.log(`ctl remove-node --force --destroy-vm:\n${r.out}`);
    expect({ code: r.code, err: r.err }).toEqual({ code: 0, err: '' });
    expect(r.out).toMatch(
      new RegExp(
        `✓ drain its replicas \\([\\d.]+ s\\): stopped ${MODEL}-1 \\(--force: it fits nowhere else; its replacement waits for room\\)`,
      ),
    );
    expect(r.out).toMatch(/✓ stop the agent \([\d.]+ s\): not stopped: llmgw never onboarded it over ssh/);
    expect(r.out).toMatch(
      new RegExp(
        `✓ remove its VM \\([\\d.]+ s\\): VM 190 "${OTHER}" on node ${pve.node} \\(stopped\\): not created by llmgw \\(no llmgw tag\\): left alone`,
      ),
    );
    expect(pve.vms().find((v) => v.vmid === 190)).toMatchObject({ name: OTHER });
    // The model's replica stopped with the node and waits for one that can take it.
    const waiting = await waitFor(
      async () => (await c.cp.store.listReplicas(MODEL)).find((x) => x.state === 'waiting'),
      { timeoutMs: 30_000, what: `a ${MODEL} replica waiting` },
    );
    expect(waiting.reason).toMatch(/no nodes registered|cordoned/);
    expect((await c.cp.store.listNodes()).map((n) => n.id)).not.toContain(OTHER);
  }, 240_000);
});

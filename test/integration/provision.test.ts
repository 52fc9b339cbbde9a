/**
 * Provisioning on Proxmox (issue 5), against the Proxmox API fake (test/helpers/proxmox-fake.ts) over real HTTPS
 * with its own CA: the llmgw-proxmox worker, the provisionNode and addNode workflows on a real Temporal server, and
 * VMs that the fake "starts" as real test hosts (network namespaces running sshd) — so `llmgw add-node` runs end
 * to end: provision → onboard → registered node → a sim replica served on it.
 */
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { QUEUES, workflowIds } from '../../lib/names';
import { Proxmox } from '../../lib/proxmox/client';
import { parseNodeId } from '../../lib/types';
import { startProxmoxWorker, type ProxmoxWorker } from '../../workers/proxmox';
import type { ProvisionInput, ProvisionResult, AddNodeResult } from '../../workflows/contracts/provision';
import type { ProxmoxConfig } from '../../config/types';
import { waitRoutable } from '../helpers/load';
import { fakeGpu, startOnboardCluster, type OnboardCluster } from '../helpers/onboard-cluster';
import { startProxmoxFake, type ProxmoxFake } from '../helpers/proxmox-fake';
import { waitFor } from '../helpers/wait';

const MODEL = 'provisioned';
const ids = workflowIds;
const secs = (ms: number | null | undefined): string => `${((ms ?? 0) / 1000).toFixed(2)} s`;

describe('provisioning on Proxmox (the API fake), and llmgw add-node end to end', () => {
  let c: OnboardCluster;
  let pve: ProxmoxFake;
  let worker: ProxmoxWorker;
  let proxmox: ProxmoxConfig;
  /** 10.254.X. — the test network's /24 */
  let net: string;
  const started: string[] = [];

  /** What provision-node would send, for a VM at `.octet` of the test network. */
  const input = (nodeId: string, octet: number, o: Partial<ProvisionInput> = {}): ProvisionInput => ({
    nodeId: parseNodeId(nodeId),
    vmid: octet,
    ip: `${net}${octet}/24`,
    gateway: c.lan.gateway,
    nameserver: null,
    cores: 2,
    memoryMiB: 2048,
    diskGiB: 16,
    cpu: 'host',
    image: proxmox.image,
    storage: proxmox.storage,
    bridge: proxmox.bridge,
    pveNode: proxmox.node,
    sshKeys: [c.sshPub],
    ciuser: 'root',
    sshPort: 22,
    sshDeadlineS: 60,
    ...o,
  });
  const provision = async (i: ProvisionInput): Promise<ProvisionResult> => {
    started.push(ids.provision(i.nodeId));
    const h = await c.cp.client.workflow.start('provisionNode', {
      taskQueue: QUEUES.control,
      workflowId: ids.provision(i.nodeId),
      args: [i],
    });
    return (await h.result()) as ProvisionResult;
  };
  const failure = async (p: Promise<unknown>): Promise<string> => {
    const err = await p.then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(WorkflowFailedError);
    return (err as WorkflowFailedError).cause?.message ?? '';
  };
  const vm = (vmid: number) => pve.vms().find((v) => v.vmid === vmid);

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
    net = c.lan.gateway.replace(/\d+$/, '');
    // The cloud image has the NVIDIA driver's nvidia-smi (the fake one: one GPU).
    pve = await startProxmoxFake({ network: c.lan, taskMs: 400, bootMs: 1500, onBoot: (host) => fakeGpu(host) });
    const secretFile = join(c.dir, 'proxmox-token');
    writeFileSync(secretFile, `${pve.tokenSecret}\n`, { mode: 0o600 });
    proxmox = {
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
    worker = await startProxmoxWorker({
      config: { temporal: c.config.temporal, proxmox },
      pollMs: 200,
      lockBackoffMs: 300,
    });
  }, 240_000);

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
    for (const id of started)
      await c?.cp.client.workflow
        .getHandle(id)
        .terminate()
        .catch(() => undefined);
    await worker?.close();
    await pve?.close();
    await c?.close();
  }, 90_000);

  test('the worker checks the token and the CA at start: a wrong secret is refused naming the fix', async () => {
    const bad = join(c.dir, 'bad-token');
    writeFileSync(bad, '00000000-0000-4000-8000-000000000000\n', { mode: 0o600 });
    await expect(
      startProxmoxWorker({ config: { temporal: c.config.temporal, proxmox: { ...proxmox, tokenSecretFile: bad } } }),
    ).rejects.toThrow(
      /Proxmox refused GET \/version: 401 authentication failure — check proxmox.tokenId and tokenSecretFile/,
    );
    // A CA that did not sign the host's certificate: TLS fails, and is never switched off.
    await expect(
      startProxmoxWorker({ config: { temporal: c.config.temporal, proxmox: { ...proxmox, ca: c.config.tls.ca } } }),
    ).rejects.toThrow(/TLS: the host's certificate is not signed by proxmox.ca/);
  });

  test('llmgw proxmox-worker, the process: up once Proxmox answered; a wrong token ends it, naming the fix', async () => {
    const up = await c.cli(['proxmox-worker', '--config', c.configFile], {
      timeoutMs: 60_000,
      onErrOutput: (err, kill) => void (err.includes('proxmox worker running') && kill('SIGTERM')),
    });
    expect(up.err).toMatch(/proxmox reachable.*8\.4\.1/);
    expect(up.err).toContain('proxmox worker running');
    const badFile = join(c.dir, 'server-bad-token.yaml');
    const bad = join(c.dir, 'bad-token-2');
    writeFileSync(bad, '00000000-0000-4000-8000-000000000000\n', { mode: 0o600 });
    writeFileSync(
      badFile,
      readFileSync(c.configFile, 'utf8').replace(JSON.stringify(proxmox.tokenSecretFile), JSON.stringify(bad)),
    );
    const refused = await c.cli(['proxmox-worker', '--config', badFile], { timeoutMs: 60_000 });
    expect(refused.code).not.toBe(0);
    expect(refused.err).toMatch(/401 authentication failure — check proxmox.tokenId and tokenSecretFile/);
  }, 90_000);

  test('llmgw add-node: the VM on Proxmox, then onboarding, to a node that serves a sim replica', async () => {
    const nodeId = 'pve-a';
    const octet = 144;
    const r = await c.cli(
      [
        'add-node',
        '--config',
        c.configFile,
        '--name',
        nodeId,
        '--ip',
        `${net}${octet}/24`,
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
    expect({ code: r.code, err: r.err }).toEqual({ code: 0, err: '' });
    started.push(ids.addNode(nodeId));
    expect(r.out).toContain(`workflow add-node/${nodeId}`);
    expect(r.out).toContain(`provision: workflow provision/${nodeId}`);
    expect(r.out).toContain(`onboard: workflow onboard/${nodeId}`);
    for (const step of [
      'check the VMID',
      'create the VM',
      'grow the disk',
      'start the VM',
      'wait for its ssh port',
      'wait for ssh',
      'issue the certificate',
      'wait for registration',
    ]) {
      expect(r.out).toMatch(new RegExp(`✓ ${step} \\(`));
    }
    expect(r.out).toMatch(new RegExp(`${nodeId} added in [\\d.]+ s`));
    // A VM on cpu host shows this machine's AVX2: the CPU check passes.
    expect(r.out).toMatch(/CPU: avx avx2 fma sse4_2 present/);

    // What Proxmox was asked for: VMID from the address, cloud-init with the CA host's key (encoded once), cpu host.
    const v = vm(octet);
    expect(v).toMatchObject({ name: nodeId, cpuType: 'host', status: 'running' });
    expect(v?.tags?.split(';')).toEqual(expect.arrayContaining(['llmgw', expect.stringMatching(/^run-/)]));
    expect(decodeURIComponent(v?.config.sshkeys ?? '')).toBe(c.sshPub);
    expect(v?.config).toMatchObject({
      ciupgrade: '0',
      ipconfig0: `ip=${net}${octet}/24,gw=${c.lan.gateway}`,
      scsi0: expect.stringMatching(/^local-lvm:vm-144-disk-0,.*size=16G/),
    });
    expect(v?.host?.address).toBe(`${net}${octet}`);

    // The time split: llmgw's own work and waiting (on Proxmox's tasks, the boot, the node).
    const result = (await c.cp.client.workflow.getHandle(ids.addNode(nodeId)).result()) as AddNodeResult;
    const p = result.provision!;
    const o = result.onboard!;
    const waited = p.waitedMs + o.waitedMs;
    console.log(
      [
        `add-node on the Proxmox fake: ${secs(result.totalMs)} end to end, ${secs(waited)} waiting (Proxmox tasks, boot, the node), ${secs(result.totalMs - waited)} llmgw's own work`,
        `  provision ${secs(p.totalMs)} (waiting ${secs(p.waitedMs)}); onboard ${secs(o.totalMs)} (waiting ${secs(o.waitedMs)})`,
        ...[...p.steps, ...o.steps].map(
          (s) =>
            `  ${s.title.padEnd(24)} ${secs(s.ms).padStart(8)}  waiting ${secs(s.waitedMs).padStart(8)}  ${s.summary ?? ''}`,
        ),
      ].join('\n'),
    );

    // Registered with its GPU at its address; a sim replica is placed on it and answers through the gateway.
    const node = (await c.cp.store.listNodes()).find((n) => n.id === nodeId);
    expect(node?.inventory.host).toBe(`${net}${octet}`);
    expect(node?.inventory.gpus).toHaveLength(1);
    await c.cp.client.workflow.start('modelDeployment', {
      taskQueue: QUEUES.control,
      workflowId: workflowIds.model(MODEL),
      args: [{ model: MODEL }],
    });
    const ready = await waitFor(async () => (await c.cp.store.listReplicas(MODEL)).find((x) => x.state === 'ready'), {
      timeoutMs: 90_000,
      intervalMs: 500,
      what: `a ready ${MODEL} replica`,
    });
    expect(ready.shards.map((s) => s.nodeId)).toEqual([nodeId]);
    await waitRoutable(c.gateway.url, MODEL, 30_000);
    const res = await fetch(`${c.gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(5);
  }, 300_000);

  test('an existing VMID is refused naming the VM that holds it, and that VM is left alone', async () => {
    const api = new Proxmox({ url: pve.url, tokenId: pve.tokenId, tokenSecret: pve.tokenSecret, caPem: pve.caPem });
    try {
      const upid = await api.createVm(pve.node, { vmid: 150, name: 'someones-db', cores: 1, memory: 512 });
      await api.waitTask(upid, { pollMs: 100 });
    } finally {
      await api.close();
    }
    const msg = await failure(provision(input('pve-taken', 150)));
    expect(msg).toMatch(/VMID 150 is taken: VM 150 "someones-db"/);
    expect(msg).toMatch(/never adopts or replaces a VM it did not create: pass another --vmid N/);
    expect(vm(150)).toMatchObject({ name: 'someones-db', status: 'stopped' });
    // Nothing was asked of VM 150 beyond looking.
    expect(pve.requests.filter((q) => q.method !== 'GET' && q.path.includes('/qemu/150'))).toEqual([]);
  }, 60_000);

  test('a step that fails after the create removes the VM this run created', async () => {
    pve.inject({ kind: 'task-fail', type: 'qmstart', text: 'start failed: QEMU exited with code 1' });
    const msg = await failure(provision(input('pve-broken', 151)));
    expect(msg).toMatch(
      /provisioning pve-broken failed at step "start the VM": .*Proxmox task qmstart 151 failed: start failed: QEMU exited with code 1/,
    );
    expect(msg).toMatch(/VM 151 "pve-broken", created by this run, removed/);
    expect(vm(151)).toBeUndefined();
    expect(pve.requests.some((q) => q.method === 'DELETE' && q.path === `/nodes/${pve.node}/qemu/151`)).toBe(true);
  }, 60_000);

  test('a failed import removes nothing that is not ours, and says so', async () => {
    pve.inject({
      kind: 'task-fail',
      type: 'qmcreate',
      text: "unable to create VM 152 - volume 'local:import/x.qcow2' does not exist",
    });
    const msg = await failure(provision(input('pve-noimage', 152)));
    expect(msg).toMatch(/failed at step "create the VM": .*unable to create VM 152 - volume/);
    // The fake, like PVE, removes a VM whose create task failed; the undo finds nothing to remove.
    expect(msg).toMatch(/VM 152 is not there \(nothing to remove\)/);
    expect(vm(152)).toBeUndefined();
  }, 60_000);

  test('a lock timeout is retried, and a create whose answer was lost is recognised as our own VM', async () => {
    pve.inject({ kind: 'lock-timeout', method: 'PUT', path: `/nodes/${pve.node}/qemu/153/resize`, times: 2 });
    pve.inject({ kind: 'drop-response', method: 'POST', path: `/nodes/${pve.node}/qemu` });
    const before = pve.requests.length;
    const r = await provision(input('pve-flaky', 153));
    const mine = pve.requests.slice(before);
    // Two resizes refused on the lock, then the third grew the disk.
    expect(mine.filter((q) => q.method === 'PUT' && q.path.endsWith('/qemu/153/resize')).map((q) => q.status)).toEqual([
      500, 500, 200,
    ]);
    expect(r.steps.find((s) => s.id === 'resizeDisk')?.summary).toMatch(/scsi0 grown from 2 to 16 GiB/);
    // The first create went through but its answer was lost; the re-sent one met "already exists" for our own VM.
    expect(
      mine.filter((q) => q.method === 'POST' && q.path === `/nodes/${pve.node}/qemu`).map((q) => q.status),
    ).toEqual([0, 500]);
    expect(r.steps.find((s) => s.id === 'createVm')?.summary).toMatch(
      /VM 153 "pve-flaky" (created \(the create was re-sent|was already created by this run)/,
    );
    expect(vm(153)).toMatchObject({ name: 'pve-flaky', status: 'running' });
  }, 90_000);

  test('two add-nodes on one Proxmox node run their creates one at a time, and both succeed', async () => {
    // add-node --provision-only: the addNode workflow with its provisionNode child alone.
    const addNode = async (i: ProvisionInput): Promise<ProvisionResult> => {
      started.push(ids.addNode(i.nodeId), ids.provision(i.nodeId));
      const h = await c.cp.client.workflow.start('addNode', {
        taskQueue: QUEUES.control,
        workflowId: ids.addNode(i.nodeId),
        args: [{ nodeId: i.nodeId, provision: i, onboard: null }],
      });
      const r = (await h.result()) as AddNodeResult;
      expect(r.onboard).toBeNull();
      return r.provision!;
    };
    const [a, b] = await Promise.all([addNode(input('pve-par-a', 160)), addNode(input('pve-par-b', 161))]);
    expect([a.vmid, b.vmid]).toEqual([160, 161]);
    expect(pve.maxConcurrentImports()).toBe(1);
    const summaries = [a, b].map((x) => x.steps.find((s) => s.id === 'createVm')?.summary ?? '');
    expect(summaries.filter((s) => /queued [\d.]+ s behind another create/.test(s))).toHaveLength(1);
    expect([vm(160)?.status, vm(161)?.status]).toEqual(['running', 'running']);
  }, 90_000);

  test("a VM on kvm64 (Proxmox's API default CPU) is flagged at the end of add-node and in ctl nodes, with the fix", async () => {
    const nodeId = 'pve-old-cpu';
    const r = await c.cli(
      [
        'add-node',
        '--config',
        c.configFile,
        '--name',
        nodeId,
        '--ip',
        `${net}170/24`,
        '--cpu',
        'kvm64',
        '--server',
        c.cp.url,
        '--binary',
        c.artefact.file,
        '--ssh-key',
        c.sshKey,
        '--no-gpu',
        '--register-timeout',
        '60',
      ],
      { timeoutMs: 240_000 },
    );
    started.push(ids.addNode(nodeId));
    expect({ code: r.code, err: r.err }).toEqual({ code: 0, err: '' });
    expect(vm(170)?.cpuType).toBe('kvm64');
    expect(r.out).toMatch(
      /WARNING: pve-old-cpu's CPU check failed: a virtual CPU \(Common KVM processor\) lacks avx, avx2, fma, sse4_2/,
    );
    expect(r.out).toContain(
      "fix: set the VM's CPU type to host (Proxmox: qm set VMID --cpu host, then stop and start the VM)",
    );
    const nodes = await c.cli(['ctl', 'nodes', '--config', c.configFile]);
    expect(nodes.code).toBe(0);
    expect(nodes.out.split('\n').find((l) => l.startsWith(nodeId))).toMatch(/cpu-flags/);
  }, 300_000);
});

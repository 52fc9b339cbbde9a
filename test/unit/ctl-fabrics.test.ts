/** `llmgw ctl fabrics` and the node list say when one fabric name covers two subnet managers, naming each side; the CERT cell says when a renewal is overdue. */
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { dirname, join } from 'node:path';
import { stringify } from 'yaml';
import { ctlCommand } from '../../cli/ctl';
import { certColumn, formatNodes } from '../../cli/ctl/nodes';
import {
  fabricColumn,
  fabricsView,
  formatFabrics,
  listFabricGroups,
  type NodeListEntry,
} from '../../cli/ctl/views/fabrics';
import type { NodeCertificate } from '../../gateway/control/contract';
import { issueOperatorCertificate, loadCa, renewAt } from '../../lib/pki';
import type { DoctorResult, FabricIdentity } from '../../lib/types';
import { testTls } from '../helpers/tls';

const A = '0x98039b03009fa1c0';
const B = '0xb83fd20300c1d2e0';

function node(
  id: string,
  fabrics: Record<string, string[]>,
  identity?: Record<string, FabricIdentity>,
  state: NodeListEntry['state'] = 'ready',
): NodeListEntry {
  return {
    id: id as NodeListEntry['id'],
    state,
    inventory: {
      gpus: [],
      adapters: [],
      fabrics,
      cpuFlags: [],
      engines: ['sim'],
      host: '127.0.0.1',
      ...(identity ? { fabricIdentity: identity } : {}),
    },
  };
}
const sm = (smGuid: string | null): FabricIdentity =>
  smGuid
    ? { smGuid, strength: 'sm-guid', smLid: '0x1' }
    : { smGuid: null, strength: 'declared-only', note: 'sminfo could not open mlx5_0 port 1' };
const DEVS = ['mlx5_0', 'mlx5_1'];

describe('ctl fabrics', () => {
  const nodes = [
    node('gpu-a', { 'ib-a': DEVS }, { 'ib-a': sm(A) }),
    node('gpu-b', { 'ib-a': DEVS }, { 'ib-a': sm(B) }),
    node('gpu-c', { 'ib-a': DEVS }, { 'ib-a': sm(A) }, 'cordoned'),
    node('gpu-d', { 'ib-b': ['mlx5_2', 'mlx5_3'] }, { 'ib-b': sm(null) }),
    node('gpu-e', { 'ib-b': ['mlx5_2', 'mlx5_3'] }),
    node('cpu-a', {}),
  ];
  it('shows two fabrics under one name, naming the nodes on each side', () => {
    const v = fabricsView(nodes);
    expect(v.fabrics.map((f) => [f.key, f.smGuid, f.nodes.map((n) => n.id)])).toEqual([
      [`ib-a@${A}`, A, ['gpu-a', 'gpu-c']],
      [`ib-a@${B}`, B, ['gpu-b']],
      ['ib-b', null, ['gpu-d', 'gpu-e']],
    ]);
    expect(v.fabrics[0]?.warnings[0]).toBe(
      `one of 2 fabrics named ib-a (their ports see different subnet managers): a replica never spans them; the other side: SM ${B}: gpu-b`,
    );
    expect(v.fabrics[0]?.warnings).toContain('gpu-c: cordoned');
    expect(v.fabrics[1]?.warnings[0]).toContain(`the other side: SM ${A}: gpu-a, gpu-c`);
    expect(v.fabrics[2]?.warnings).toEqual([
      'gpu-d, gpu-e: subnet manager not identified, name trusted as declared (weaker)',
    ]);
    expect(v.islands).toEqual(['cpu-a']);
  });
  it('prints one row per fabric, islands last', () => {
    const lines = formatFabrics(fabricsView(nodes)).split('\n');
    expect(lines[0]).toMatch(/^FABRIC\s+SUBNET MANAGER\s+NODES\s+ADAPTERS\s+WARNINGS$/);
    expect(lines[1]).toMatch(
      new RegExp(
        `^ib-a\\s+${A}\\s+gpu-a,gpu-c\\s+gpu-a:mlx5_0,mlx5_1 gpu-c:mlx5_0,mlx5_1\\s+one of 2 fabrics named ib-a`,
      ),
    );
    expect(lines[3]).toMatch(/^ib-b\s+unknown \(declared only\)\s+gpu-d,gpu-e/);
    expect(lines[4]).toMatch(/^\(island\)\s+-\s+cpu-a\s+-\s+no fabric: single-node replicas only$/);
    expect(formatFabrics({ fabrics: [], islands: [] })).toBe('no nodes registered\n');
  });
  it('marks split and weaker fabrics in the node list cell', () => {
    const groups = listFabricGroups(nodes);
    expect(fabricColumn(nodes[0] as NodeListEntry, groups)).toBe(`ib-a(mlx5_0,mlx5_1)[split: SM ${A}]`);
    expect(fabricColumn(nodes[3] as NodeListEntry, groups)).toBe('ib-b(mlx5_2,mlx5_3)[declared only]');
    expect(fabricColumn(nodes[4] as NodeListEntry, groups)).toBe('ib-b(mlx5_2,mlx5_3)');
    expect(fabricColumn(nodes[5] as NodeListEntry, groups)).toBe('island');
  });
});

describe('ctl nodes and ctl fabrics over the node list', () => {
  const fail = (id: string): DoctorResult => ({ id, status: 'fail', summary: `${id} failed`, fix: `fix ${id}` });
  const rows = [
    {
      ...node('gpu-a', { 'ib-a': DEVS }, { 'ib-a': sm(A) }),
      replicas: ['m-0'],
      gpusUsed: 1,
      lastSeen: null,
      registeredAt: new Date(),
    },
    {
      ...node('gpu-b', { 'ib-a': DEVS }, { 'ib-a': sm(B) }),
      replicas: [],
      gpusUsed: 0,
      lastSeen: null,
      registeredAt: new Date(),
    },
  ];
  if (rows[0])
    rows[0].inventory.doctor = [
      fail('cpu-flags'),
      fail('libgomp'),
      { id: 'gpudirect-rdma', status: 'warn', summary: '', fix: 'modprobe nvidia-peermem' },
    ];
  if (rows[1]) rows[1].inventory.doctor = [{ id: 'cpu-flags', status: 'pass', summary: 'ok', fix: '' }];
  let server: Server;
  let url = '';
  let config = '';
  beforeAll(async () => {
    // ctl talks HTTPS with its operator certificate; the served list stands in for the control plane.
    const tls = testTls();
    const op = issueOperatorCertificate(loadCa(dirname(tls.ca)), 'operator');
    writeFileSync(tls.clientCert, op.certPem);
    writeFileSync(tls.clientKey, op.keyPem);
    config = join(dirname(tls.clientCert), 'server.yaml');
    writeFileSync(config, stringify({ tls }));
    server = createServer({ cert: readFileSync(tls.serverCert), key: readFileSync(tls.serverKey) }, (req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(req.url === '/v1/nodes' ? { nodes: rows } : {}));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const addr = server.address();
    url = `https://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('ctl nodes: the FABRIC cell says a name is split, CHECKS names failing and warning checks', () => {
    const lines = formatNodes(rows).split('\n');
    expect(lines[0]).toMatch(/^NODE\s+STATE\s+GPUS\s+FABRIC\s+ENGINES\s+REPLICAS\s+CHECKS\s+CERT\s+LAST SEEN$/);
    expect(lines[1]).toMatch(
      new RegExp(
        `^gpu-a\\s+ready\\s+1/0\\s+ib-a\\(mlx5_0,mlx5_1\\)\\[split: SM ${A}\\]\\s+sim \\(not probed yet\\)\\s+m-0\\s+fail: cpu-flags,libgomp warn: gpudirect-rdma\\s+-\\s+never$`,
      ),
    );
    expect(lines[2]).toMatch(/^gpu-b\s.*\s+-\s+ok\s+-\s+never$/);
  });
  it('ctl fabrics prints the table and --json the view, from GET /v1/nodes', async () => {
    let text = '';
    await ctlCommand(['fabrics', '--server', url, '--config', config], (s) => void (text += s));
    expect(text).toBe(formatFabrics(fabricsView(rows)));
    expect(text).toContain(`the other side: SM ${B}: gpu-b`);
    let json = '';
    await ctlCommand(['fabrics', '--server', url, '--config', config, '--json'], (s) => void (json += s));
    expect(JSON.parse(json)).toEqual(JSON.parse(JSON.stringify(fabricsView(rows))));
  });
});

describe('ctl nodes CERT column', () => {
  const DAY = 86_400_000;
  const now = Date.parse('2026-06-01T00:00:00Z');
  const cert = (notBefore: number, notAfter: number, revoked = false): NodeCertificate => ({
    serial: '0a',
    notAfter: new Date(notAfter).toISOString(),
    renewAt: renewAt(new Date(notBefore), new Date(notAfter)).toISOString(),
    revoked,
  });
  it.each([
    ['no certificate recorded', null, /^-$/],
    ['within its first two thirds', cert(now - 10 * DAY, now + 80 * DAY), /^ok until 2026-08-20$/],
    [
      'past two thirds: the agent missed its renewal',
      cert(now - 70 * DAY, now + 20 * DAY),
      /^RENEW OVERDUE \(expires 2026-06-21\)$/,
    ],
    ['past not-after', cert(now - 91 * DAY, now - 3600_000), /^EXPIRED 60m ago$/],
    ['every certificate revoked', cert(now - 10 * DAY, now + 80 * DAY, true), /^revoked$/],
  ])('%s', (_what, c, cell) => {
    expect(certColumn(c, now)).toMatch(cell);
  });
});

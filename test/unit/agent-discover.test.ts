/** The agent's discovery at start: fabric identity from sminfo and the doctor report go into the inventory it registers; a split fabric refuses the start. */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hasCode } from '../../lib/errors';
import { parseNodeId } from '../../lib/types';
import { discover } from '../../workers/agent/discovery';
import type { AgentOptions } from '../../workers/agent/options';

const FIXTURES = join(__dirname, '..', 'fixtures');
const GUID_B = '0xb83fd20300c1d2e0';

describe('agent discover()', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-discover-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  /** The fake sminfo with its environment baked in (jest's process.env does not reach the agent's children). */
  const sminfo = (name: string, env: string): string => {
    const p = join(dir, name);
    writeFileSync(p, `#!/bin/sh\n${env} exec ${join(FIXTURES, 'sminfo')} "$@"\n`);
    chmodSync(p, 0o755);
    return p;
  };
  const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
  const opts = (o: Partial<AgentOptions>): Omit<AgentOptions, 'tls'> => ({
    nodeId: parseNodeId('d1'),
    server: 'http://127.0.0.1:1',
    nvidiaSmi: join(FIXTURES, 'nvidia-smi'),
    noGpu: false,
    ibRoot: join(FIXTURES, 'sysfs/ndr-a'),
    cpuinfo: join(FIXTURES, 'roots/kvm64/proc/cpuinfo'),
    fabrics: ['ib-a'],
    advertiseHost: '127.0.0.1',
    engineSetup: { enginesDir: join(dir, 'installs'), bins: {} },
    stateDir: dir,
    stopEnginesOnExit: false,
    log: (msg, fields) => void lines.push({ msg, ...(fields ? { fields } : {}) }),
    ...o,
  });

  test('registers the SM GUID each fabric sees and the doctor results (a kvm64 CPU fails cpu-flags)', async () => {
    const inv = await discover(opts({ sminfo: sminfo('sm-b', `FAKE_SMINFO_GUID=${GUID_B}`) }));
    expect(inv.fabrics).toEqual({ 'ib-a': ['mlx5_0', 'mlx5_1'] });
    expect(inv.fabricIdentity).toEqual({ 'ib-a': expect.objectContaining({ smGuid: GUID_B, strength: 'sm-guid' }) });
    const ids = (inv.doctor ?? []).map((d) => d.id);
    expect(ids).toEqual(expect.arrayContaining(['nvidia-smi', 'cpu-flags', 'subnet-manager/ib-a']));
    expect(inv.doctor?.find((d) => d.id === 'cpu-flags')?.status).toBe('fail');
    expect(inv.doctor?.find((d) => d.id === 'subnet-manager/ib-a')?.status).toBe('pass');
    expect(lines.find((l) => l.msg === 'doctor')?.fields?.checks).toMatch(/fail: .*cpu-flags/);
  });

  test('an unreadable SM is logged as weaker and the fabric is kept, marked declared-only', async () => {
    lines.length = 0;
    const inv = await discover(opts({ sminfo: sminfo('sm-perm', 'FAKE_SMINFO_FAIL=permission') }));
    expect(inv.fabricIdentity?.['ib-a']?.strength).toBe('declared-only');
    expect(lines.find((l) => l.msg === 'fabric identity warning')?.fields?.warning).toMatch(
      /fabric ib-a: subnet manager GUID not read/,
    );
  });

  test('ports of one fabric that see different subnet managers refuse the start, naming both', async () => {
    const err = await discover(
      opts({
        ibRoot: join(FIXTURES, 'sysfs/ndr-split'),
        sminfo: sminfo('sm-split', `FAKE_SMINFO_GUIDS=mlx5_1=${GUID_B}`),
      }),
    ).then(
      () => null,
      (e: unknown) => e,
    );
    expect(hasCode(err, 'LLMGW_FABRIC_SPLIT')).toBe(true);
    expect((err as Error).message).toMatch(
      /^agent not started: fabric ib-a: its ports see different subnet managers .*mlx5_1 port 1 sees SM 0xb83fd20300c1d2e0/,
    );
  });

  test('an adapter that does not exist refuses the start, naming it', async () => {
    const err = await discover(opts({ fabrics: ['ib-a:mlx5_7'], sminfo: sminfo('sm-a', '') })).then(
      () => null,
      (e: unknown) => e,
    );
    expect(hasCode(err, 'LLMGW_BAD_REQUEST')).toBe(true);
    expect((err as Error).message).toContain('adapter mlx5_7 does not exist on this node');
  });
});

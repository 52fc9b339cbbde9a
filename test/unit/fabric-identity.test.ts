/** Fabric identity at agent start: sysfs fixture trees plus a fake sminfo, as on real nodes with and without root. */
import { join } from 'node:path';
import { discoverFabricIdentity, parseFabricFlag, type FabricDiscovery } from '../../lib/fabrics';
import { hasCode } from '../../lib/errors';
import { runCommand, type Exec } from '../../lib/hardware/exec';
import { readIbAdapters } from '../../lib/hardware/infiniband';
import { normaliseGuid, parseSminfo, querySm } from '../../lib/hardware/sminfo';
import { thrownWithCode } from '../helpers/errors';

const FIXTURES = join(__dirname, '..', 'fixtures');
const SYSFS = join(FIXTURES, 'sysfs');
const FAKE_SMINFO = join(FIXTURES, 'sminfo');
const GUID_A = '0x98039b03009fa1c0';
const GUID_B = '0xb83fd20300c1d2e0';

/** Runs fixture scripts with extra environment variables (via env(1): jest's process.env is not the child's). */
const withEnv =
  (env: Record<string, string>): Exec =>
  (cmd, args) =>
    runCommand('env', [...Object.entries(env).map(([k, v]) => `${k}=${v}`), cmd, ...args]);

async function discover(
  tree: string,
  flags: string[],
  env: Record<string, string> = {},
  sminfo = FAKE_SMINFO,
): Promise<FabricDiscovery> {
  const ibRoot = join(SYSFS, tree);
  return discoverFabricIdentity({
    flags,
    adapters: await readIbAdapters(ibRoot),
    ibRoot,
    sminfo,
    run: Object.keys(env).length ? withEnv(env) : runCommand,
  });
}

/** The refusal's error, asserting its code. */
function refused(r: FabricDiscovery, code: 'LLMGW_BAD_REQUEST' | 'LLMGW_FABRIC_SPLIT'): Error {
  if (r.kind !== 'refused') throw new Error(`expected a refusal, got ${JSON.stringify(r)}`);
  expect(hasCode(r.error, code)).toBe(true);
  return r.error;
}

describe('sminfo', () => {
  it('parses the SM line and zero-pads the GUID', () => {
    expect(
      parseSminfo(
        'sminfo: sm lid 1 sm guid 0x98039b03009fa1c0, activity count 20431 priority 15 state 3 SMINFO_MASTER\n',
      ),
    ).toEqual({ smLid: 1, smGuid: GUID_A, activity: 20431, priority: 15, state: 3 });
    expect(
      parseSminfo('sminfo: sm lid 5 sm guid 0x2c9030a1b2c3, activity count 7 priority 0 state 2 SMINFO_STANDBY')
        ?.smGuid,
    ).toBe('0x00002c9030a1b2c3');
    expect(parseSminfo('garbage')).toBeNull();
    expect(normaliseGuid('0xZZ')).toBeNull();
  });
  it('asks about one port and reads the fake', async () => {
    const r = await querySm(FAKE_SMINFO, 'mlx5_1', 1, withEnv({ FAKE_SMINFO_GUIDS: `mlx5_1=${GUID_B}` }));
    expect(r).toEqual({ kind: 'ok', info: expect.objectContaining({ smGuid: GUID_B, state: 3 }) });
  });
  it('says why it failed: no permission, no SM, not installed', async () => {
    const perm = await querySm(FAKE_SMINFO, 'mlx5_0', 1, withEnv({ FAKE_SMINFO_FAIL: 'permission' }));
    expect(perm).toMatchObject({
      kind: 'failed',
      cause: 'permission',
      reason: expect.stringContaining("Failed to open 'mlx5_0' port '1'"),
      fix: expect.stringContaining('root'),
    });
    const nosm = await querySm(FAKE_SMINFO, 'mlx5_0', 1, withEnv({ FAKE_SMINFO_FAIL: 'no-sm' }));
    expect(nosm).toMatchObject({
      kind: 'failed',
      cause: 'no-sm',
      reason: expect.stringContaining('no subnet manager answered on mlx5_0 port 1'),
    });
    const missing = await querySm('/opt/none/sminfo', 'mlx5_0', 1, runCommand);
    expect(missing).toMatchObject({
      kind: 'failed',
      cause: 'missing',
      fix: expect.stringContaining('infiniband-diags'),
    });
  });
});

describe('parseFabricFlag with ports', () => {
  it('refuses dev:port instead of silently dropping adapters after the second colon', () => {
    const e = thrownWithCode(() => parseFabricFlag('ib-a:mlx5_0:1,mlx5_1:1'), 'LLMGW_BAD_REQUEST');
    expect(e.message).toContain('--fabric ib-a:mlx5_0,mlx5_1');
  });
});

describe('discoverFabricIdentity', () => {
  it('records the SM GUID every declared port sees', async () => {
    const r = await discover('ndr-a', ['ib-a']);
    expect(r).toMatchObject({ kind: 'ok', fabrics: { 'ib-a': ['mlx5_0', 'mlx5_1'] }, warnings: [] });
    if (r.kind !== 'ok') return;
    expect(r.fabricIdentity).toEqual({ 'ib-a': { smGuid: GUID_A, strength: 'sm-guid', smLid: '0x1' } });
    expect(r.probes.map((p) => `${p.device}:${p.port}`)).toEqual(['mlx5_0:1', 'mlx5_1:1']);
  });
  it('an island declares nothing and runs no sminfo', async () => {
    const r = await discover('ndr-a', [], {}, '/opt/none/sminfo');
    expect(r).toEqual({ kind: 'ok', fabrics: {}, fabricIdentity: {}, probes: [], warnings: [] });
  });
  it('refuses ports on one fabric that see different subnet managers, naming ports and SMs', async () => {
    // Same sm_lid 0x1 and fe80 prefix on both ports: only the SM GUID shows mlx5_1 is on another fabric.
    const e = refused(
      await discover('ndr-split', ['ib-a'], { FAKE_SMINFO_GUIDS: `mlx5_1=${GUID_B}` }),
      'LLMGW_FABRIC_SPLIT',
    );
    expect(e.message).toContain(`mlx5_0 port 1 sees SM ${GUID_A}`);
    expect(e.message).toContain(`mlx5_1 port 1 sees SM ${GUID_B}`);
    expect(e.message).toContain('--fabric ib-a:mlx5_0 --fabric ib-a-2:mlx5_1');
  });
  it('accepts the same ports declared as two fabrics', async () => {
    const r = await discover('ndr-split', ['ib-a:mlx5_0', 'ib-b:mlx5_1'], { FAKE_SMINFO_GUIDS: `mlx5_1=${GUID_B}` });
    expect(r.kind === 'ok' && r.fabricIdentity).toEqual({
      'ib-a': expect.objectContaining({ smGuid: GUID_A }),
      'ib-b': expect.objectContaining({ smGuid: GUID_B }),
    });
  });
  it('refuses an adapter declared under two fabrics, naming it and both fabrics', async () => {
    const e = refused(await discover('ndr-a', ['ib-a:mlx5_0,mlx5_1', 'ib-b:mlx5_1']), 'LLMGW_BAD_REQUEST');
    expect(e.message).toMatch(/adapter mlx5_1 is declared under two fabrics, ib-a and ib-b/);
  });
  it('refuses a RoCE port declared as InfiniBand, naming it', async () => {
    expect(refused(await discover('roce-v2', ['ib-a:mlx5_0']), 'LLMGW_BAD_REQUEST').message).toMatch(
      /adapter mlx5_0 is an Ethernet \(RoCE\) port/,
    );
    expect(refused(await discover('roce-v2', ['ib-a']), 'LLMGW_BAD_REQUEST').message).toContain(
      'no active InfiniBand port',
    );
  });
  it('refuses a down port, naming it and what its physical state means', async () => {
    const e = refused(await discover('ndr-down', ['ib-a:mlx5_0,mlx5_1']), 'LLMGW_BAD_REQUEST');
    expect(e.message).toBe(
      '--fabric ib-a: adapter mlx5_1 port 1 is 1: DOWN (physical state 2: Polling: no cable, or the far end is down); bring the link up or leave mlx5_1 out',
    );
  });
  it('NAME alone skips the down port and takes the one active port', async () => {
    const r = await discover('ndr-down', ['ib-a']);
    expect(r.kind === 'ok' && r.fabrics).toEqual({ 'ib-a': ['mlx5_0'] });
  });
  it('refuses a missing adapter, naming it', async () => {
    expect(refused(await discover('ndr-a', ['ib-a:mlx5_7']), 'LLMGW_BAD_REQUEST').message).toContain(
      'adapter mlx5_7 does not exist on this node (present: mlx5_0, mlx5_1)',
    );
  });
  it('falls back to the declared name, marked weaker, when sminfo has no permission', async () => {
    const r = await discover('ndr-a', ['ib-a'], { FAKE_SMINFO_FAIL: 'permission' });
    if (r.kind !== 'ok') throw r.error;
    expect(r.fabricIdentity['ib-a']).toMatchObject({ smGuid: null, strength: 'declared-only', smLid: '0x1' });
    expect(r.fabricIdentity['ib-a']?.note).toMatch(
      /not read .*Failed to open 'mlx5_0' port '1'.*trusting the declared name.*run as root/,
    );
    expect(r.warnings).toHaveLength(1);
  });
  it('falls back when sminfo is not installed, saying how to install it', async () => {
    const r = await discover('ndr-a', ['ib-a'], {}, '/opt/none/sminfo');
    expect(r.kind === 'ok' && r.fabricIdentity['ib-a']?.note).toContain('install infiniband-diags');
  });
});

import { join } from 'node:path';
import { parseFabricFlag, resolveFabrics } from '../../lib/fabrics';
import { readIbAdapters } from '../../lib/hardware/infiniband';
import type { IbAdapter } from '../../lib/types';
import { thrownWithCode } from '../helpers/errors';

const SYSFS = join(__dirname, '..', 'fixtures', 'sysfs');
const ib = (device: string, state = '4: ACTIVE', linkLayer = 'InfiniBand', port = 1): IbAdapter => ({
  device,
  port,
  state,
  rate: '200 Gb/sec (4X HDR)',
  linkLayer,
});

/** The thrown error, asserting it carries LLMGW_BAD_REQUEST. */
function thrown(fn: () => unknown): Error {
  return thrownWithCode(fn, 'LLMGW_BAD_REQUEST');
}

describe('parseFabricFlag', () => {
  it('parses a bare name', () => {
    expect(parseFabricFlag('ib-a')).toEqual({ name: 'ib-a', devices: null });
  });
  it('parses a name with devices', () => {
    expect(parseFabricFlag('ib-a:mlx5_0,mlx5_1')).toEqual({ name: 'ib-a', devices: ['mlx5_0', 'mlx5_1'] });
  });
  it('rejects a bad name with the rule', () => {
    for (const raw of ['IB', '1ib', '', 'a'.repeat(33), 'ib_a']) {
      expect(thrown(() => parseFabricFlag(raw)).message).toMatch(/a-z, 0-9 and '-', starting with a letter/);
    }
  });
  it('rejects an empty device list', () => {
    expect(thrown(() => parseFabricFlag('ib-a:')).message).toContain('--fabric ib-a');
  });
});

describe('resolveFabrics', () => {
  it('returns no fabrics for no flags', () => {
    expect(resolveFabrics([], [ib('mlx5_0')])).toEqual({});
  });
  it('takes the first two active InfiniBand ports for a bare name', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'two-hdr'));
    expect(resolveFabrics([parseFabricFlag('ib-a')], adapters)).toEqual({ 'ib-a': ['mlx5_0', 'mlx5_1'] });
  });
  it('uses natural order and skips down and Ethernet ports for a bare name', () => {
    const adapters = [
      ib('mlx5_10'),
      ib('mlx5_0', '1: DOWN'),
      ib('mlx5_1', '4: ACTIVE', 'Ethernet'),
      ib('mlx5_2'),
      ib('mlx5_3'),
    ];
    expect(resolveFabrics([{ name: 'ib-a', devices: null }], adapters)).toEqual({ 'ib-a': ['mlx5_2', 'mlx5_3'] });
  });
  it('fails a bare name on a node with no active InfiniBand port', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'roce'));
    expect(thrown(() => resolveFabrics([{ name: 'ib-a', devices: null }], adapters)).message).toContain(
      'no active InfiniBand port',
    );
  });
  it('accepts explicit devices that exist, are active and InfiniBand', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'two-hdr'));
    expect(resolveFabrics([parseFabricFlag('ib-a:mlx5_1')], adapters)).toEqual({ 'ib-a': ['mlx5_1'] });
  });
  it('names a missing device and the present ones', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'two-hdr'));
    const msg = thrown(() => resolveFabrics([parseFabricFlag('ib-a:mlx5_7')], adapters)).message;
    expect(msg).toContain('mlx5_7');
    expect(msg).toContain('mlx5_0, mlx5_1');
  });
  it('names the state of a down device', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'one-down'));
    const msg = thrown(() => resolveFabrics([parseFabricFlag('ib-a:mlx5_0,mlx5_1')], adapters)).message;
    expect(msg).toContain('mlx5_1');
    expect(msg).toContain('1: DOWN');
  });
  it('rejects an Ethernet (RoCE) device', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'roce'));
    const msg = thrown(() => resolveFabrics([parseFabricFlag('ib-a:mlx5_0')], adapters)).message;
    expect(msg).toContain('mlx5_0');
    expect(msg).toMatch(/Ethernet/);
  });
  it('rejects a device under two fabrics, naming both', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'two-hdr'));
    const msg = thrown(() =>
      resolveFabrics([parseFabricFlag('ib-a:mlx5_0'), parseFabricFlag('ib-b:mlx5_0,mlx5_1')], adapters),
    ).message;
    expect(msg).toContain('mlx5_0');
    expect(msg).toContain('ib-a');
    expect(msg).toContain('ib-b');
  });
  it('keeps two fabrics on separate devices', async () => {
    const adapters = await readIbAdapters(join(SYSFS, 'two-hdr'));
    expect(resolveFabrics([parseFabricFlag('ib-a:mlx5_0'), parseFabricFlag('ib-b:mlx5_1')], adapters)).toEqual({
      'ib-a': ['mlx5_0'],
      'ib-b': ['mlx5_1'],
    });
  });
});

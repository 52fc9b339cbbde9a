import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { loadServerConfig, parseServerConfig, type ConfigError } from '../../config/load';
import { DEFAULT_CONFIG } from '../../config/defaults';
import { Checker, isObj, quote, suggest } from '../../config/check';
import { thrownWithCode } from '../helpers/errors';

/** The ConfigError thrown by parsing `text`. */
function configError(text: string, file = 'server.yaml'): ConfigError {
  return thrownWithCode<ConfigError>(() => parseServerConfig(text, file), 'LLMGW_CONFIG_INVALID');
}

describe('config/check', () => {
  it('suggests a near key and nothing for a far one', () => {
    expect(suggest('adress', ['address', 'namespace', 'uiUrl'])).toBe('address');
    expect(suggest('vlm', ['sim', 'llamacpp', 'vllm', 'sglang'])).toBe('vllm');
    expect(suggest('zzzzzzzz', ['address', 'namespace'])).toBeUndefined();
  });
  it('quotes and tells mappings apart', () => {
    expect(quote('a"b')).toBe('"a\\"b"');
    expect(isObj({})).toBe(true);
    expect(isObj([])).toBe(false);
    expect(isObj(null)).toBe(false);
  });
  it('collects issues instead of throwing', () => {
    const c = new Checker();
    const o = c.obj({ a: 1, bb: 2 }, ['x'], ['a', 'b']);
    expect(c.str(o, ['x', 'a'], '"text"')).toBe('');
    expect(c.int(o, ['x', 'missing'], 1, 10, '5')).toBe(0);
    expect(c.issues.map((i) => i.path)).toEqual([
      ['x', 'bb'],
      ['x', 'a'],
      ['x', 'missing'],
    ]);
    expect(c.issues[0]?.fix).toContain('did you mean "b"?');
  });
});

describe('parseServerConfig', () => {
  it('gives the defaults for empty text', () => {
    const cfg = parseServerConfig('', 'server.yaml');
    expect(cfg).toEqual(DEFAULT_CONFIG);
    expect(Object.isFrozen(cfg.temporal)).toBe(true);
    expect(loadServerConfig()).toEqual(DEFAULT_CONFIG);
  });
  it('merges one changed value over the defaults', () => {
    const cfg = parseServerConfig('temporal:\n  address: temporal.internal:7233\n', 'server.yaml');
    expect(cfg.temporal).toEqual({ ...DEFAULT_CONFIG.temporal, address: 'temporal.internal:7233' });
    expect(cfg.catalog).toEqual(DEFAULT_CONFIG.catalog);
  });
  it('names file, line, key path and fix for a bad value', () => {
    const e = configError('temporal:\n  address: http://temporal:7233\n', '/etc/llmgw/server.yaml');
    expect(e.file).toBe('/etc/llmgw/server.yaml');
    expect(e.keyPath).toBe('temporal.address');
    expect(e.problem).toContain('has a URL scheme');
    expect(e.fix).toContain('host:port');
    expect(e.message).toMatch(/^\/etc\/llmgw\/server\.yaml:2:\d+: temporal\.address: /);
  });
  it("reads the drain grace and a model's own, and names the key of a bad one", () => {
    const cfg = parseServerConfig(
      'drain:\n  graceS: 120\ncatalog:\n  - name: m\n    source: sim://m\n    replicas: 1\n    drainGraceS: 3600\n    profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 1 }]\n',
      'server.yaml',
    );
    expect(cfg.drain.graceS).toBe(120);
    expect(cfg.catalog[0]?.drainGraceS).toBe(3600);
    expect(DEFAULT_CONFIG.drain.graceS).toBe(600);
    const e = configError('drain:\n  graceS: 10m\n');
    expect(e.keyPath).toBe('drain.graceS');
    expect(e.fix).toMatch(/whole number from 0 to 86400, e\.g\. 600/);
    expect(
      configError(
        'catalog:\n  - name: m\n    source: sim://m\n    replicas: 1\n    drainGraceS: -5\n    profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 1 }]\n',
      ).keyPath,
    ).toBe('catalog[0].drainGraceS');
    expect(configError('drain:\n  grace: 60\n').fix).toContain('did you mean "graceS"?');
  });
  it('names list indexes in the key path', () => {
    const e = configError(
      'catalog:\n  - name: m\n    source: sim://m\n    replicas: -1\n    profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 1 }]\n',
    );
    expect(e.keyPath).toBe('catalog[0].replicas');
    expect(e.fix).toMatch(/whole number/);
  });
  it('reports an unknown key with a did-you-mean', () => {
    const e = configError('temporal:\n  adress: 127.0.0.1:7233\n');
    expect(e.keyPath).toBe('temporal.adress');
    expect(e.problem).toContain('unknown key "adress"');
    expect(e.fix).toContain('did you mean "address"?');
  });
  it('reports an unknown engine with a did-you-mean', () => {
    const e = configError('engines:\n  vlm: "0.6.3"\n');
    expect(e.keyPath).toBe('engines.vlm');
    expect(e.fix).toContain('did you mean "vllm"?');
  });
  it('reports several errors at once', () => {
    const e = configError('temporal:\n  adress: x\nmysql:\n  url: postgres://db/x\ngateway:\n  refreshMs: 5\n');
    expect(e.issues.map((i) => i.keyPath)).toEqual(
      expect.arrayContaining(['temporal.adress', 'mysql.url', 'gateway.refreshMs']),
    );
    expect(e.issues.length).toBeGreaterThanOrEqual(3);
    expect(e.message.split('\n')).toHaveLength(e.issues.length);
    for (const i of e.issues) expect(i.fix).not.toBe('');
  });
  it('reads the gateway timeouts key by key over the defaults, and names a bad one with its range', () => {
    const cfg = parseServerConfig('gateway:\n  accessLog: true\n  timeouts:\n    idleMs: 5000\n', 'server.yaml');
    expect(cfg.gateway).toEqual({
      ...DEFAULT_CONFIG.gateway,
      accessLog: true,
      timeouts: { connectMs: 2000, firstByteMs: 600_000, idleMs: 5000, requestMs: 60_000 },
    });
    const e = configError(
      'gateway:\n  accessLog: "yes"\n  timeouts:\n    connectMs: 0\n    firstByteMs: 10m\n    idleMz: 5\n',
    );
    expect(e.issues.map((i) => [i.keyPath, i.problem])).toEqual([
      ['gateway.timeouts.idleMz', 'unknown key "idleMz"'],
      ['gateway.timeouts.connectMs', 'expected a whole number from 100 to 60000, got number 0'],
      ['gateway.timeouts.firstByteMs', 'expected a whole number from 1000 to 86400000, got string "10m"'],
      ['gateway.accessLog', 'expected true or false, got string "yes"'],
    ]);
    expect(e.issues[0]?.fix).toContain('did you mean "idleMs"?');
  });
  it("takes a model's own first-byte timeout from the catalog", () => {
    const model = (extra: string): string =>
      `catalog:\n  - name: m\n    source: sim://m\n    replicas: 1\n    profiles: [{ name: default, engine: sim, nodes: 1, gpusPerNode: 1 }]\n${extra}`;
    expect(parseServerConfig(model('    firstByteMs: 30000\n'), 'server.yaml').catalog[0]?.firstByteMs).toBe(30_000);
    expect(parseServerConfig(model(''), 'server.yaml').catalog[0]).not.toHaveProperty('firstByteMs');
    const e = configError(model('    firstByteMs: 500\n'));
    expect(e.keyPath).toBe('catalog[0].firstByteMs');
    expect(e.fix).toContain('600000');
  });
  it('never echoes a mysql password', () => {
    const e = configError('mysql:\n  url: mysql://root:hunter2@db:3306\n');
    expect(e.message).not.toContain('hunter2');
    expect(e.problem).toContain('names no database');
  });
  it('reports YAML syntax errors with a position', () => {
    const e = configError('temporal:\n\taddress: x\n');
    expect(e.problem).toMatch(/YAML syntax error/);
    expect(e.message).toMatch(/^server\.yaml:\d+:\d+: /);
  });
  it('says a file that cannot be read names the path', () => {
    expect(() => loadServerConfig('/nonexistent/server.yaml')).toThrow(
      /\/nonexistent\/server\.yaml: cannot be read \(ENOENT\)/,
    );
  });
});

describe('config/server.example.yaml', () => {
  const file = join(__dirname, '../../config/server.example.yaml');
  const text = readFileSync(file, 'utf8');

  test('parses and equals the built-in defaults (it documents them)', () => {
    expect(parseServerConfig(text, file)).toEqual(DEFAULT_CONFIG);
  });

  test('spells out every key the defaults have', () => {
    const doc = parse(text) as unknown;
    const paths = (v: unknown, at: string): string[] =>
      isObj(v)
        ? Object.entries(v).flatMap(([k, inner]) => [`${at}${k}`, ...paths(inner, `${at}${k}.`)])
        : Array.isArray(v)
          ? v.flatMap((x) => paths(x, at))
          : [];
    expect([...new Set(paths(doc, ''))].sort()).toEqual([...new Set(paths(DEFAULT_CONFIG, ''))].sort());
  });
});

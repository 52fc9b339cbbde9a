/** server.yaml's admission and metrics sections, and a catalog model's maxConcurrent: defaults, values, errors. */
import { parseServerConfig, type ConfigError } from '../../config/load';
import { thrownWithCode } from '../helpers/errors';

const configError = (text: string): ConfigError =>
  thrownWithCode<ConfigError>(() => parseServerConfig(text, 'server.yaml'), 'LLMGW_CONFIG_INVALID');

test('defaults: admission bounded, every metrics listener off, no catalog limit', () => {
  const c = parseServerConfig('', 'server.yaml');
  expect(c.gateway.admission).toEqual({ queueMax: 256, queueTimeoutMs: 30_000, defaultMaxConcurrent: 64 });
  expect(c.metrics).toEqual({ gateway: null, controlPlane: null, caWorker: null, proxmoxWorker: null });
  expect(c.catalog.every((m) => m.maxConcurrent === undefined)).toBe(true);
});

test('a metrics listener per role, temporalPort optional; maxConcurrent per model; one admission key changed', () => {
  const c = parseServerConfig(
    [
      'metrics:',
      '  gateway: { host: 127.0.0.1, port: 9464 }',
      '  controlPlane: { host: 127.0.0.1, port: 9465, temporalPort: 9466 }',
      'gateway:',
      '  admission: { queueMax: 10 }',
      'catalog:',
      '  - { name: m, source: "sim://m", replicas: 1, maxConcurrent: 4,',
      '      profiles: [{ name: p, engine: sim, nodes: 1, gpusPerNode: 1, args: [] }] }',
    ].join('\n'),
    'server.yaml',
  );
  expect(c.metrics.gateway).toEqual({ host: '127.0.0.1', port: 9464, temporalPort: 0 });
  expect(c.metrics.controlPlane).toEqual({ host: '127.0.0.1', port: 9465, temporalPort: 9466 });
  expect(c.metrics.caWorker).toBeNull();
  expect(c.gateway.admission).toEqual({ queueMax: 10, queueTimeoutMs: 30_000, defaultMaxConcurrent: 64 });
  expect(c.catalog[0]?.maxConcurrent).toBe(4);
});

test('wrong values name the key and the fix', () => {
  expect(configError('metrics:\n  gatway: { host: 127.0.0.1, port: 1 }\n').message).toMatch(
    /metrics\.gatway.*did you mean "gateway"/,
  );
  expect(configError('metrics:\n  gateway: { host: 127.0.0.1, port: 70000 }\n').message).toContain(
    'metrics.gateway.port',
  );
  expect(configError('gateway:\n  admission: { queueTimeoutMs: 5 }\n').message).toContain(
    'gateway.admission.queueTimeoutMs',
  );
  expect(
    configError(
      'catalog:\n  - { name: m, source: "sim://m", replicas: 1, maxConcurrent: 0, profiles: [{ name: p, engine: sim, nodes: 1, gpusPerNode: 1 }] }\n',
    ).message,
  ).toContain('catalog[0].maxConcurrent');
});

test("a catalog model's routing: a policy and its fields, each checked", () => {
  const model = (routing: string): string =>
    `catalog:\n  - { name: m, source: "sim://m", replicas: 1, routing: ${routing}, profiles: [{ name: p, engine: sim, nodes: 1, gpusPerNode: 1 }] }\n`;
  expect(parseServerConfig('', 'server.yaml').catalog.every((m) => m.routing === undefined)).toBe(true);
  expect(
    parseServerConfig(model('{ policy: prefix, prefixBytes: 4096, loadFactor: 1.5 }'), 'server.yaml').catalog[0]
      ?.routing,
  ).toEqual({ policy: 'prefix', prefixBytes: 4096, loadFactor: 1.5 });
  expect(
    parseServerConfig(model('{ policy: session, sessionHeader: X-Conversation }'), 'server.yaml').catalog[0]?.routing,
  ).toEqual({ policy: 'session', sessionHeader: 'x-conversation' });
  expect(configError(model('{ policy: prefx }')).message).toMatch(
    /catalog\[0\]\.routing\.policy.*"prefx" is not a routing policy.*did you mean "prefix"/s,
  );
  expect(configError(model('{ policy: prefix, loadFactor: 0.5 }')).message).toMatch(
    /catalog\[0\]\.routing\.loadFactor.*from 1 to 10/s,
  );
  expect(configError(model('{ policy: prefix, prefixBytes: 10 }')).message).toContain('catalog[0].routing.prefixBytes');
  expect(configError(model('{ policy: session, sessionHeader: "a b" }')).message).toContain(
    'is not an HTTP header name',
  );
  expect(configError(model('prefix')).message).toMatch(/catalog\[0\]\.routing.*expected a mapping/s);
});

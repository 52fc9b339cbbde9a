/** How the CLI and the listeners read their input: plain digits, options before the verb, defaulted sections, internal errors. */
import Fastify from 'fastify';
import { intOption } from '../../cli/args';
import { verbIndex } from '../../cli/ctl/index';
import { defaultedIn, parseServerConfig } from '../../config/load';
import { answerErrors } from '../../gateway/errors';

describe('intOption', () => {
  test.each(['0', '3', '64', '007'])('reads %j', (v) => expect(intOption(v, 'N', 9)).toBe(Number(v)));
  test.each(['', ' 3', '3 ', '1e9', '0x10', '-1', '2.5', '+3', 'NaN', '9'.repeat(16)])(
    'refuses %j, naming the flag',
    (v) => {
      expect(() => intOption(v, '--replicas', 0)).toThrow(
        `--replicas must be a whole number written in digits (e.g. 3), got ${JSON.stringify(v)}`,
      );
    },
  );
  test('an absent option is the fallback', () => expect(intOption(undefined, 'N', 9)).toBe(9));
});

describe('verbIndex', () => {
  test.each([
    [['nodes'], 0],
    [['--config', 'f.yaml', 'nodes'], 2],
    [['--json', 'nodes'], 1],
    [['--config=f.yaml', 'nodes', '--json'], 1],
    [['--server', 'https://x:1', '--config', 'f', 'scale', 'm', '3'], 4],
    [['--help'], -1],
    [[], -1],
  ])('%j: the verb is at %i', (argv, at) => expect(verbIndex(argv)).toBe(at));
});

describe('defaultedIn', () => {
  test('names the file whose config has no mysql section, and nothing when it has one', () => {
    expect(defaultedIn(parseServerConfig('gateway:\n  refreshMs: 800\n', 'a.yaml'), 'mysql')).toBe('a.yaml');
    expect(defaultedIn(parseServerConfig('mysql:\n  url: mysql://root@db:3306/x\n', 'b.yaml'), 'mysql')).toBeNull();
    expect(defaultedIn(parseServerConfig('', '<defaults>'), 'mysql')).toBe('<defaults>');
  });
});

describe('answerErrors', () => {
  test('an internal error is logged with the route and answered without its internals', async () => {
    const lines: Record<string, unknown>[] = [];
    const app = Fastify();
    answerErrors(app, (msg, fields) => void lines.push({ msg, ...fields }));
    app.get('/v1/things/:id', async () => {
      throw Object.assign(new Error("You have an error in your SQL syntax near 'a', 'b'"), { code: 'ER_PARSE_ERROR' });
    });
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const r = await fetch(`${base}/v1/things/7`, { headers: { 'x-request-id': 'abc' } });
      const body = (await r.json()) as { error: { message: string; code: string } };
      expect(r.status).toBe(500);
      expect(body.error.code).toBe('LLMGW_INTERNAL');
      expect(body.error.message).not.toMatch(/SQL/);
      expect(lines).toEqual([
        expect.objectContaining({
          msg: 'internal error',
          level: 'error',
          method: 'GET',
          route: '/v1/things/:id',
          error: expect.stringContaining('SQL syntax'),
        }),
      ]);
    } finally {
      await app.close();
    }
  });
});

/** A role's log line: JSON with a time, a level (info unless told), the component and the message; any value JSON can carry. */
import { makeLog } from '../../cli/log';

function written(fn: () => void): Record<string, unknown>[] {
  const lines: string[] = [];
  const spy = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  });
  try {
    fn();
  } finally {
    spy.mockRestore();
  }
  for (const l of lines) expect(l.endsWith('\n') && !l.slice(0, -1).includes('\n')).toBe(true);
  return lines.map((l) => JSON.parse(l) as Record<string, unknown>);
}

test('a line has t, level, c and msg, in that order, then the fields; level is info unless a field says otherwise', () => {
  const log = makeLog('agent a1');
  const [plain, warn] = written(() => {
    log('registered', { node: 'a1' });
    log('control plane failover', { level: 'warn', from: 'https://a' });
  });
  expect(Object.keys(plain as object)).toEqual(['t', 'level', 'c', 'msg', 'node']);
  expect(plain).toMatchObject({ level: 'info', c: 'agent a1', msg: 'registered', node: 'a1' });
  expect(new Date(String(plain?.t)).toISOString()).toBe(plain?.t);
  expect(warn).toMatchObject({ level: 'warn', msg: 'control plane failover', from: 'https://a' });
});

test('an Error field is its name, message and code (not {}); a bigint is a string', () => {
  const log = makeLog('control-plane');
  const [line] = written(() =>
    log('failed', { level: 'error', err: Object.assign(new Error('boom'), { code: 'ECONNREFUSED' }), nanos: 12n }),
  );
  expect(line).toMatchObject({ err: { name: 'Error', message: 'boom', code: 'ECONNREFUSED' }, nanos: '12' });
});

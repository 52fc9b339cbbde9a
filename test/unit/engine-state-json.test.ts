/** The JSON files the agent and the node door share: written whole or not at all, private when asked. */
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readJson, writeJsonAtomic } from '../../lib/engine-state';

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'llmgw-json-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('a private file is 0600 even over a temp file a crash left, replaces the old one whole, leaves no temp file', () => {
  const file = join(dir, 'credentials.json');
  writeFileSync(file, '{"old":true}\n', { mode: 0o644 });
  writeFileSync(`${file}.${process.pid}.tmp`, '{"half', { mode: 0o644 });
  writeJsonAtomic(file, { keyPem: 'k' }, 0o600);
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(readJson(file)).toEqual({ keyPem: 'k' });
  expect(readdirSync(dir)).toEqual(['credentials.json']);
});

test('readJson is null for a missing file and for one that is not JSON', () => {
  expect(readJson(join(dir, 'absent.json'))).toBeNull();
  writeFileSync(join(dir, 'half.json'), '{"certPem": "---');
  expect(readJson(join(dir, 'half.json'))).toBeNull();
});

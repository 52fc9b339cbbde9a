/** sminfo for a node with fabrics: found on PATH, installed by a root agent when missing, or a message that says how. */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCommand } from '../../lib/hardware/exec';
import { ensureSminfo, findOnPath } from '../../lib/hardware/ibdiags';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-ibdiags-'));
const bin = join(dir, 'bin');
const log: string[] = [];
const quiet = (msg: string): void => void log.push(msg);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A stand-in for apt-get: a real process that "installs" sminfo into `bin` (or fails like apt does). */
const fakeApt = (name: string, body: string): string => {
  const file = join(dir, name);
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, 0o755);
  return file;
};

beforeAll(() => {
  mkdirSync(bin);
});

test('missing, not root: says to install infiniband-diags or pass --sminfo, runs nothing', async () => {
  const r = await ensureSminfo({
    sbin: [],
    path: bin,
    root: false,
    run: async () => {
      throw new Error('must not run');
    },
    log: quiet,
  });
  expect(r).toEqual({
    kind: 'missing',
    why: 'sminfo not found and the agent is not root: install infiniband-diags (apt-get install -y --no-install-recommends infiniband-diags) or pass --sminfo PATH',
  });
});

test("missing, root: the install fails -> the exit code and apt's last words, nothing found", async () => {
  const apt = fakeApt('apt-fail', 'echo "E: Unable to locate package infiniband-diags" >&2; exit 100');
  const r = await ensureSminfo({
    sbin: [],
    path: bin,
    root: true,
    run: runCommand,
    log: quiet,
    install: [apt, 'install', 'infiniband-diags'],
  });
  expect(r.kind).toBe('missing');
  expect(r.kind === 'missing' && r.why).toMatch(
    /failed \(exit 100: E: Unable to locate package infiniband-diags\): install infiniband-diags by hand or pass --sminfo PATH$/,
  );
});

test('missing, root: installs infiniband-diags, then finds the sminfo it brought', async () => {
  const apt = fakeApt('apt-ok', `printf '#!/bin/sh\\necho sminfo\\n' > ${bin}/sminfo; chmod +x ${bin}/sminfo`);
  const r = await ensureSminfo({ sbin: [], path: bin, root: true, run: runCommand, log: quiet, install: [apt] });
  expect(r).toEqual({ kind: 'found', path: join(bin, 'sminfo'), installed: true });
  expect(log).toContain('sminfo missing: installing infiniband-diags');
  // Next start: found, nothing installed.
  const again = await ensureSminfo({
    sbin: [],
    path: bin,
    root: true,
    run: async () => {
      throw new Error('must not run');
    },
    log: quiet,
  });
  expect(again).toEqual({ kind: 'found', path: join(bin, 'sminfo'), installed: false });
  expect(findOnPath('sminfo', `/nonexistent:${bin}`, [])).toBe(join(bin, 'sminfo'));
});

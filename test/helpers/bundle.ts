/** Bundles the workflow code once per content hash (bundling takes seconds; every test file would redo it). */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';

const ROOT = resolve(__dirname, '../..');

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? tsFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Path of a bundle of workflows/ for Worker's `workflowBundle: { codePath }`. */
export async function workflowBundlePath(): Promise<string> {
  const h = createHash('sha256');
  for (const f of [...tsFiles(join(ROOT, 'workflows')), ...tsFiles(join(ROOT, 'lib'))].sort())
    h.update(f).update(readFileSync(f));
  const file = join(tmpdir(), `llmgw-workflows-${h.digest('hex').slice(0, 16)}.js`);
  if (existsSync(file)) return file;
  const { code } = await bundleWorkflowCode({
    workflowsPath: join(ROOT, 'workflows'),
    logger: {
      info: () => undefined,
      warn: () => undefined,
      error: console.error,
      debug: () => undefined,
      trace: () => undefined,
      log: () => undefined,
    },
  });
  const tmp = `${file}.${process.pid}`;
  writeFileSync(tmp, code);
  renameSync(tmp, file);
  return file;
}

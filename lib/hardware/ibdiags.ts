/**
 * Making sure a node that declares fabrics has `sminfo` (Debian/Ubuntu package infiniband-diags) to read each
 * port's subnet manager with: found on PATH (or /usr/sbin, which a non-root PATH may lack) it is used; missing,
 * an agent running as root installs the package once; otherwise it says how to fix it, and the fabric's
 * identity falls back to the weaker "declared only".
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import type { Exec } from './exec';

/** The install command the agent runs as root when sminfo is missing. */
export const INSTALL_IB_DIAGS = ['apt-get', 'install', '-y', '--no-install-recommends', 'infiniband-diags'];

export interface EnsureSminfoInput {
  /** PATH to search (the agent's own) */
  path: string;
  /** True when the agent runs as root (it may install packages) */
  root: boolean;
  run: Exec;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** Install command (default INSTALL_IB_DIAGS) */
  install?: string[];
  /** Searched after `path` (default /usr/sbin and /sbin, where the package puts it but a user's PATH may not reach) */
  sbin?: string[];
}

export type SminfoFound = { kind: 'found'; path: string; installed: boolean } | { kind: 'missing'; why: string };

/** The first executable `name` in `path`'s directories, then in `sbin`, or null. */
export function findOnPath(name: string, path: string, sbin = ['/usr/sbin', '/sbin']): string | null {
  for (const dir of [...path.split(delimiter).filter(Boolean), ...sbin]) {
    const file = join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      /* not here */
    }
  }
  return null;
}

/** Finds sminfo, installing infiniband-diags first when it is missing and the agent may. Never throws. */
export async function ensureSminfo(o: EnsureSminfoInput): Promise<SminfoFound> {
  const have = findOnPath('sminfo', o.path, o.sbin);
  if (have) return { kind: 'found', path: have, installed: false };
  const install = o.install ?? INSTALL_IB_DIAGS;
  if (!o.root) {
    return {
      kind: 'missing',
      why: `sminfo not found and the agent is not root: install infiniband-diags (${INSTALL_IB_DIAGS.join(' ')}) or pass --sminfo PATH`,
    };
  }
  o.log('sminfo missing: installing infiniband-diags', { command: install.join(' ') });
  const [cmd, ...args] = install;
  const r = await o.run(cmd as string, args);
  const now = findOnPath('sminfo', o.path, o.sbin);
  if (r.code === 0 && now) {
    o.log('infiniband-diags installed', { sminfo: now });
    return { kind: 'found', path: now, installed: true };
  }
  const out = `${r.stderr}${r.stdout}`.trim().split('\n').slice(-3).join(' | ');
  return {
    kind: 'missing',
    why: `sminfo not found and \`${install.join(' ')}\` ${r.error ? `could not run (${r.error})` : r.code === 0 ? 'installed no sminfo' : `failed (exit ${r.code}${out ? `: ${out}` : ''})`}: install infiniband-diags by hand or pass --sminfo PATH`,
  };
}

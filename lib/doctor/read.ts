/** Reading a node's files under an injected root, so every doctor check runs against a fixture tree too. */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { DoctorResult } from '../types';

/** A file's text, or null when it cannot be read. */
export async function readText(base: string, rel: string): Promise<string | null> {
  return readFile(join(base, rel), 'utf8').catch(() => null);
}

/** True when the path exists (file or directory). */
export async function exists(base: string, rel: string): Promise<boolean> {
  return stat(join(base, rel)).then(
    () => true,
    () => false,
  );
}

/** A directory's entries, or none. */
export async function list(base: string, rel: string): Promise<string[]> {
  return readdir(join(base, rel)).catch(() => [] as string[]);
}

export const pass = (id: string, summary: string): DoctorResult => ({ id, status: 'pass', summary, fix: '' });
export const warn = (id: string, summary: string, fix: string): DoctorResult => ({ id, status: 'warn', summary, fix });
export const fail = (id: string, summary: string, fix: string): DoctorResult => ({ id, status: 'fail', summary, fix });

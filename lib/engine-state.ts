/**
 * The on-disk record of an engine that outlives its agent: one directory per node, three files per shard key
 * (`<key>.json` written by the shim once the engine runs, `<key>.exit.json` when it exits, `<key>.log` its output).
 */
import { chmodSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileTail, procStatFields } from './process';
import { releaseSelfArgv } from './release';
import { ownEntryArgv } from './paths';

/** What the shim records once the engine is running: enough to find it, and to prove a pid is still it. */
export interface EngineState {
  key: string;
  replicaId: string;
  rank: number;
  generation: number;
  port: number;
  shimPid: number;
  /** /proc/<pid>/stat field 22 (start time in clock ticks since boot): a recycled pid has another. */
  shimStartTime: string;
  enginePid: number;
  engineStartTime: string;
  /** The engine's command line, for logs and the Temporal UI. */
  command: string;
  /** Its CUDA_VISIBLE_DEVICES (null: unset); absent in records of shims older than GPU pinning. */
  devices?: string | null;
  startedAt: string;
}

/** What the shim records when the engine exits (`error`: it could not be started at all). */
export interface EngineExit {
  code: number | null;
  signal: string | null;
  error?: string;
  at: string;
}

export interface EnginePaths {
  state: string;
  exit: string;
  log: string;
}

const KEY_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** The key of one shard's engine: `${replicaId}.g${generation}.r${rank}`; throws on a replica id unfit for a file name. */
export function shardKey(replicaId: string, generation: number, rank: number): string {
  const key = `${replicaId}.g${generation}.r${rank}`;
  if (!KEY_RE.test(key) || key.includes('..'))
    throw new Error(`replica id "${replicaId}" cannot name an engine state file (a-z, A-Z, 0-9, '.', '_', '-')`);
  return key;
}

/** The files of one key in `dir`. */
export function enginePaths(dir: string, key: string): EnginePaths {
  return { state: join(dir, `${key}.json`), exit: join(dir, `${key}.exit.json`), log: join(dir, `${key}.log`) };
}

/**
 * Writes JSON so a reader sees the old file or the whole new one, never half (temp file + rename). `mode` (e.g.
 * 0o600 for a file holding a key) is set on the temp file before the rename, so the name never shows it wider.
 */
export function writeJsonAtomic(file: string, value: unknown, mode?: number): void {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(value)}\n`, mode === undefined ? {} : { mode });
  // writeFileSync's mode applies only to a file it creates: a temp file a crash left keeps its own.
  if (mode !== undefined) chmodSync(tmp, mode);
  renameSync(tmp, file);
}

/** A JSON file's value, or null when it is missing or not JSON. */
export function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    // Missing, or not ours to understand: either way there is no record to act on.
    return null;
  }
}

/** The state of `key` in `dir`, or null. */
export function readEngineState(dir: string, key: string): EngineState | null {
  return readJson<EngineState>(enginePaths(dir, key).state);
}

/** The exit record of `key` in `dir`, or null while the engine runs (or never ran). */
export function readEngineExit(dir: string, key: string): EngineExit | null {
  return readJson<EngineExit>(enginePaths(dir, key).exit);
}

/** Every key with any file in `dir` (an empty list when the directory does not exist). */
export function listEngineKeys(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const keys = new Set<string>();
  for (const n of names) {
    const m = /^(.+?)(\.exit\.json|\.json|\.log)$/.exec(n);
    if (m?.[1] && KEY_RE.test(m[1])) keys.add(m[1]);
  }
  return [...keys].sort();
}

/** The newest modification time (ms) among `key`'s files, or 0. */
export function newestFileMs(dir: string, key: string): number {
  return Object.values(enginePaths(dir, key)).reduce((t, f) => {
    try {
      return Math.max(t, statSync(f).mtimeMs);
    } catch {
      return t;
    }
  }, 0);
}

/** Removes `key`'s state and exit records (and its log unless `keepLog`). */
export function removeEngineFiles(dir: string, key: string, o: { keepLog?: boolean } = {}): void {
  const p = enginePaths(dir, key);
  rmSync(p.state, { force: true });
  rmSync(p.exit, { force: true });
  if (!o.keepLog) rmSync(p.log, { force: true });
}

/** The last `lines` lines of `key`'s log (reads at most the last 16 KiB). */
export function logTail(dir: string, key: string, lines: number): string {
  return fileTail(enginePaths(dir, key).log, lines);
}

/** A pid's start time (/proc/<pid>/stat field 22), or null when it is gone or a zombie (dead, not yet reaped). */
export function procStartTime(pid: number): string | null {
  const rest = procStatFields(pid);
  // rest[0] is field 3 (state), so field 22 (start time) is rest[19]; an exited process has none.
  if (!rest || rest[0] === 'Z' || rest[0] === 'X') return null;
  return rest[19] ?? null;
}

/** True while `pid` is the very process that started at `startTime` (not a recycled pid). */
export function sameProcess(pid: number, startTime: string): boolean {
  return pid > 0 && procStartTime(pid) === startTime;
}

/**
 * The argv prefix that runs the engine shim (as the sim engine is run: node, tsx's CommonJS loader, the
 * absolute entrypoint; from a release artefact its bundled program's `engine-shim`), followed by the shim's own
 * flags and `--` and the engine command.
 */
export function engineShimArgv(): string[] {
  return releaseSelfArgv('engine-shim') ?? ownEntryArgv('cli/engine-shim');
}

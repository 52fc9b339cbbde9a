/**
 * What a node's door process and its agent share on disk, under `<state-dir>/door/`: the door's record (who it is
 * and where its control listener is: the agent adopts it by this), the node credentials it serves with (the agent
 * writes them, renewals included; the door re-reads them), and its log.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readJson, writeJsonAtomic } from '../../lib/engine-state';
import type { TlsCredentials } from '../../lib/tls-client';
import { ownEntryArgv, PROJECT_ROOT } from '../../lib/paths';
import { release, releaseSelfArgv } from '../../lib/release';

/** The door's record: written by the door once it listens. */
export interface DoorRecord {
  pid: number;
  /** /proc/<pid>/stat field 22: a recycled pid has another */
  startTime: string;
  /** Asked of every call to its control listener */
  token: string;
  /** The llmgw build it runs (doorVersion()) */
  version: string;
  /** Its control listener on 127.0.0.1 */
  controlPort: number;
  host: string;
  port: number;
  startedAt: string;
}

/** The door's files in `stateDir`. */
export function doorPaths(stateDir: string): { dir: string; record: string; credentials: string; log: string } {
  const dir = join(stateDir, 'door');
  return {
    dir,
    record: join(dir, 'door.json'),
    credentials: join(dir, 'credentials.json'),
    log: join(dir, 'door.log'),
  };
}

/** Writes `value` as JSON, readable by the owner only, so a reader sees the old file or the whole new one. */
/** The door's record, or null. */
export function readDoorRecord(stateDir: string): DoorRecord | null {
  return readJson<DoorRecord>(doorPaths(stateDir).record);
}

/** Writes the door's record (owner-only: it holds the control token). */
export function writeDoorRecord(stateDir: string, rec: DoorRecord): void {
  mkdirSync(doorPaths(stateDir).dir, { recursive: true, mode: 0o700 });
  writeJsonAtomic(doorPaths(stateDir).record, rec, 0o600);
}

/** Writes the credentials the door serves with (owner-only: the node's key). */
export function writeDoorCredentials(stateDir: string, tls: TlsCredentials): void {
  mkdirSync(doorPaths(stateDir).dir, { recursive: true, mode: 0o700 });
  writeJsonAtomic(
    doorPaths(stateDir).credentials,
    { certPem: tls.certPem, keyPem: tls.keyPem, caPem: tls.caPem } satisfies TlsCredentials,
    0o600,
  );
}

/** The credentials file's text (compared to see a renewal), or null. */
export function readDoorCredentialsText(stateDir: string): string | null {
  try {
    return readFileSync(doorPaths(stateDir).credentials, 'utf8');
  } catch {
    return null;
  }
}

/** The build a door runs: the package version, and the release commit where there is one. */
export function doorVersion(): string {
  const r = release();
  if (r) return r.commit;
  return readJson<{ version: string }>(join(PROJECT_ROOT, 'package.json'))?.version ?? 'unknown';
}

/** The argv prefix that runs `llmgw node-door` from this build. */
export function nodeDoorArgv(): string[] {
  return releaseSelfArgv('node-door') ?? ownEntryArgv('cli/node-door');
}

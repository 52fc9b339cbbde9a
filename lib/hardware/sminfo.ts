/** The subnet manager a port sees, from infiniband-diags' `sminfo` (needs /dev/infiniband/umad*, usually root). */
import type { Exec } from './exec';

export interface SmInfo {
  smLid: number;
  /** `0x` + 16 lowercase hex digits (sminfo does not zero-pad) */
  smGuid: string;
  activity: number;
  priority: number;
  /** 0 NOTACT, 1 DISCOVER, 2 STANDBY, 3 MASTER */
  state: number;
}

export type SmQuery =
  | { kind: 'ok'; info: SmInfo }
  | { kind: 'failed'; cause: 'missing' | 'permission' | 'no-sm' | 'other'; reason: string; fix: string };

const LINE_RE = /sm lid (\d+) sm guid (0x[0-9a-f]+), activity count (\d+) priority (\d+) state (\d+)/i;

/** Normalises a GUID to `0x` + 16 hex digits; null when it is not one. */
export function normaliseGuid(raw: string): string | null {
  if (!/^0x[0-9a-f]{1,16}$/i.test(raw.trim())) return null;
  return `0x${BigInt(raw.trim()).toString(16).padStart(16, '0')}`;
}

/** Parses `sminfo: sm lid 1 sm guid 0x98039b03009fa1c0, activity count 20431 priority 15 state 3 SMINFO_MASTER`. */
export function parseSminfo(text: string): SmInfo | null {
  const m = LINE_RE.exec(text);
  const guid = m?.[2] ? normaliseGuid(m[2]) : null;
  if (!m || !guid) return null;
  return { smLid: Number(m[1]), smGuid: guid, activity: Number(m[3]), priority: Number(m[4]), state: Number(m[5]) };
}

/** The arguments asking about the SM behind one local port. */
export const sminfoArgs = (device: string, port: number): string[] => ['-C', device, '-P', String(port)];

/** Asks `sminfo` at `path` which SM `device` port `port` sees. Never throws. */
export async function querySm(path: string, device: string, port: number, run: Exec): Promise<SmQuery> {
  const where = `${device} port ${port}`;
  const r = await run(path, sminfoArgs(device, port));
  if (r.error === 'ENOENT') {
    return {
      kind: 'failed',
      cause: 'missing',
      reason: `sminfo not found at ${path}`,
      fix: 'install infiniband-diags (apt-get install infiniband-diags / dnf install infiniband-diags) or pass --sminfo PATH',
    };
  }
  const out = `${r.stdout}\n${r.stderr}`;
  const info = r.code === 0 ? parseSminfo(r.stdout) : null;
  if (info) return { kind: 'ok', info };
  const first =
    out
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .pop() ??
    r.error ??
    'no output';
  // Opening the umad device fails without root (mode 0600) or without the ib_umad module.
  if (/can't open UMAD port|Failed to open|Permission denied/i.test(out)) {
    return {
      kind: 'failed',
      cause: 'permission',
      reason: `sminfo could not open ${where} (${first})`,
      fix: 'run as root (sminfo opens /dev/infiniband/umad*, mode 0600) and load ib_umad (modprobe ib_umad)',
    };
  }
  if (/iberror: failed: query/i.test(out)) {
    return {
      kind: 'failed',
      cause: 'no-sm',
      reason: `no subnet manager answered on ${where} (${first})`,
      fix: `start a subnet manager on this fabric (opensm, or the switch's SM), then check with: sminfo -C ${device} -P ${port}`,
    };
  }
  return {
    kind: 'failed',
    cause: 'other',
    reason: `sminfo on ${where} failed (${r.error ?? `exit ${r.code}`}): ${first}`,
    fix: `run sminfo -C ${device} -P ${port} by hand to see why`,
  };
}

/**
 * SSH host keys the `accept-new` way (OpenSSH's StrictHostKeyChecking=accept-new): a host never seen is
 * learned, a known host must present a key it is known by, and a known host presenting any other key is a
 * changed host — refused, because the risk guarded against is a substituted machine, not a new one.
 */
import { createHash } from 'node:crypto';

/** A host key as onboarding stores it. */
export interface HostKey {
  /** the key's type as the key blob names it: ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa … */
  type: string;
  /** `SHA256:` and the unpadded base64 of the blob's SHA-256, as `ssh-keygen -l` prints it */
  fingerprint: string;
  /** the public key blob, base64 (an authorized_keys / known_hosts line's second field) */
  key: string;
}

/** The type named at the start of an SSH public key blob (a uint32 length and that many bytes). */
export function keyBlobType(blob: Buffer): string {
  if (blob.length < 4) throw new Error('ssh public key blob too short');
  const n = blob.readUInt32BE(0);
  if (n < 1 || n > 64 || blob.length < 4 + n) throw new Error('ssh public key blob does not start with a key type');
  return blob.subarray(4, 4 + n).toString('latin1');
}

/** The fingerprint OpenSSH prints for a key blob. */
export function fingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** A presented key blob as a HostKey. */
export function hostKeyOf(blob: Buffer): HostKey {
  return { type: keyBlobType(blob), fingerprint: fingerprint(blob), key: blob.toString('base64') };
}

export type HostKeyDecision =
  | { kind: 'new' }
  | { kind: 'known'; key: HostKey }
  /** known by other keys, none of them the one presented (whatever their types) */
  | { kind: 'changed'; known: HostKey[] };

/** accept-new: what to do with `presented` from a host known by `known` (empty: never seen). */
export function decideHostKey(known: readonly HostKey[], presented: HostKey): HostKeyDecision {
  if (known.length === 0) return { kind: 'new' };
  const same = known.find((k) => k.key === presented.key);
  return same ? { kind: 'known', key: same } : { kind: 'changed', known: [...known] };
}

/** ssh2's default host key algorithm order (ssh2 1.17 with Ed25519 support). */
export const DEFAULT_HOST_KEY_ALGORITHMS = [
  'ssh-ed25519',
  'ecdsa-sha2-nistp256',
  'ecdsa-sha2-nistp384',
  'ecdsa-sha2-nistp521',
  'rsa-sha2-512',
  'rsa-sha2-256',
  'ssh-rsa',
] as const;

/** The handshake algorithms that let a server present a key of blob type `type`. */
function algorithmsFor(type: string): string[] {
  return type === 'ssh-rsa' ? ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'] : [type];
}

/**
 * The host key algorithms to offer a known host: the types it is known by first, as OpenSSH does. Without
 * this the client asks for Ed25519 first, a host known by its ECDSA key presents its Ed25519 one, and a second
 * key type is mistaken for a changed host.
 */
export function preferredHostKeyAlgorithms(known: readonly HostKey[]): string[] {
  const first = known
    .flatMap((k) => algorithmsFor(k.type))
    .filter((a) => (DEFAULT_HOST_KEY_ALGORITHMS as readonly string[]).includes(a));
  return [...new Set([...first, ...DEFAULT_HOST_KEY_ALGORITHMS])];
}

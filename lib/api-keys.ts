/**
 * Inference API keys, pure: their format, their digest, the Authorization header, and the options `ctl keys create`
 * takes. A key is `llmgw-` and 43 base64url characters (32 random bytes); only its SHA-256 is ever stored.
 */
import { createHash, randomBytes } from 'node:crypto';
import { quoteInput } from './errors';

/** What every key starts with, so a leaked one is recognisable (secret scanners, logs). */
export const KEY_PREFIX = 'llmgw-';
/** A key's whole length: the prefix and 43 base64url characters. */
export const KEY_LENGTH = KEY_PREFIX.length + 43;
/** Key names: what `ctl keys` and usage rows call a key. */
export const KEY_NAME_RULE = /^[a-z0-9][a-z0-9._-]{0,63}$/;
/** The largest rpm or tpm accepted (MySQL INT). */
export const MAX_QUOTA = 2_000_000_000;

const KEY_BODY = /^[A-Za-z0-9_-]{43}$/;

/** A new key: 256 bits from the system's CSPRNG. */
export function newApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** The stored digest of a key: SHA-256, hex. A key has 256 bits of entropy, so no salt or slow hash is needed. */
export function keyDigest(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** What a key list shows of a key: its first characters, never enough to use it. */
export function keyPrefix(key: string): string {
  return key.slice(0, KEY_PREFIX.length + 4);
}

/** An Authorization header read: the key it carries, or why it carries none (the 401's message). */
export type BearerResult = { kind: 'ok'; key: string } | { kind: 'error'; message: string };

/**
 * Reads `Authorization: Bearer <key>`. Static keys from server.yaml may have any shape, so the shape of an llmgw key
 * is checked by `checkKeyShape`, not here.
 */
export function parseBearer(header: string | undefined): BearerResult {
  if (header === undefined || header === '')
    return { kind: 'error', message: 'missing API key: send "Authorization: Bearer <key>"' };
  const sp = header.indexOf(' ');
  const scheme = sp < 0 ? header : header.slice(0, sp);
  if (scheme.toLowerCase() !== 'bearer')
    return {
      kind: 'error',
      message: `malformed Authorization header: expected "Bearer <key>", got scheme ${quoteInput(scheme, 16)}`,
    };
  const key = header.slice(sp + 1).trim();
  if (sp < 0 || key === '') return { kind: 'error', message: 'malformed Authorization header: "Bearer" without a key' };
  if (/\s/.test(key)) return { kind: 'error', message: 'malformed Authorization header: the key contains whitespace' };
  return { kind: 'ok', key };
}

/** Null when `key` has an llmgw key's shape, else the 401's message (it never echoes the key). */
export function checkKeyShape(key: string): string | null {
  if (!key.startsWith(KEY_PREFIX)) return `invalid API key: llmgw keys start with "${KEY_PREFIX}"`;
  if (key.length !== KEY_LENGTH)
    return `invalid API key: llmgw keys are ${KEY_LENGTH} characters long, this one has ${key.length} (cut when copied?)`;
  if (!KEY_BODY.test(key.slice(KEY_PREFIX.length)))
    return 'invalid API key: it contains characters no llmgw key has (letters, digits, "-" and "_" only)';
  return null;
}

/** What `ctl keys create` asks for, checked. */
export interface KeySpec {
  name: string;
  /** null: every model */
  models: string[] | null;
  /** requests per minute; null: unlimited */
  rpm: number | null;
  /** tokens (prompt + completion, as the engine reports them) per minute; null: unlimited */
  tpm: number | null;
  expiresAt: Date | null;
}

/** A key name, checked; throws an Error whose message names the rule. */
export function checkKeyName(name: string): string {
  if (!KEY_NAME_RULE.test(name))
    throw new Error(
      `key name ${quoteInput(name, 70)} is not valid: use 1-64 lowercase letters, digits, ".", "_" or "-", starting with a letter or digit (e.g. team-search)`,
    );
  return name;
}

/** `--rpm` / `--tpm`: a whole number from 1; 0 is refused (revoke the key to block it). */
export function parseQuota(flag: 'rpm' | 'tpm', raw: string | undefined): number | null {
  if (raw === undefined) return null;
  const what = flag === 'rpm' ? 'requests per minute' : 'tokens per minute';
  if (!/^\d+$/.test(raw.trim()))
    throw new Error(`--${flag} ${quoteInput(raw, 24)} is not a whole number of ${what} (e.g. --${flag} 600)`);
  const n = Number(raw.trim());
  if (n === 0)
    throw new Error(
      `--${flag} 0 would make a key that can never be used: leave --${flag} out for no limit, or revoke a key to block it`,
    );
  if (n > MAX_QUOTA) throw new Error(`--${flag} ${n} is more than ${MAX_QUOTA}: leave --${flag} out for no limit`);
  return n;
}

/** `--models a,b`: model names, no empties or repeats; undefined = every model. */
export function parseModels(raw: string | undefined): string[] | null {
  if (raw === undefined) return null;
  const models = raw.split(',').map((m) => m.trim());
  if (models.some((m) => m === ''))
    throw new Error(
      `--models ${quoteInput(raw, 100)} has an empty name: give a comma-separated list, e.g. --models sim-small,sim-large`,
    );
  const bad = models.find((m) => m.length > 128 || /[\s"']/.test(m));
  if (bad !== undefined) throw new Error(`--models: ${quoteInput(bad, 130)} is not a model name`);
  return [...new Set(models)];
}

/** `--expires`: an ISO date (`2027-01-31`, midnight UTC) or date-time with a zone; must be in the future. */
export function parseExpiry(raw: string | undefined, now: Date = new Date()): Date | null {
  if (raw === undefined) return null;
  const s = raw.trim();
  const ok =
    /^\d{4}-\d{2}-\d{2}$/.test(s) || /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(s);
  const d = new Date(/^\d{4}-\d{2}-\d{2}$/.test(s) ? `${s}T00:00:00Z` : s);
  if (!ok || Number.isNaN(d.getTime()))
    throw new Error(
      `--expires ${quoteInput(raw, 40)} is not a date: give YYYY-MM-DD (midnight UTC) or YYYY-MM-DDTHH:MM:SSZ, e.g. --expires 2027-01-31`,
    );
  if (d.getTime() <= now.getTime())
    throw new Error(`--expires ${s} is in the past (now ${now.toISOString()}): give a future date`);
  return d;
}

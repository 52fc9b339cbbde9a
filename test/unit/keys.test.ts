/** Inference keys, pure parts: the key format, the Authorization header, ctl's options, the answer's usage, lease sizes, the key table. */
import {
  checkKeyName,
  checkKeyShape,
  keyDigest,
  KEY_LENGTH,
  newApiKey,
  parseBearer,
  parseExpiry,
  parseModels,
  parseQuota,
} from '../../lib/api-keys';
import { openAiError } from '../../lib/errors';
import { grantOf, type KeyRecord } from '../../lib/store/keys';
import { roleForUrl } from '../../gateway/control/server';
import { KeyTable, scopeRefusal } from '../../gateway/inference/keys';
import { estimateTokens } from '../../gateway/inference/quota';
import { UsageMeter } from '../../gateway/inference/usage-meter';

const record = (key: string, o: Partial<KeyRecord> = {}): KeyRecord => ({
  id: 1,
  name: 'team-a',
  digest: keyDigest(key),
  models: null,
  rpm: null,
  tpm: null,
  expiresAt: null,
  revoked: false,
  ...o,
});

describe('keys', () => {
  test('are llmgw- and 43 base64url characters, distinct, and stored as their SHA-256', () => {
    const a = newApiKey();
    expect(a).toMatch(/^llmgw-[A-Za-z0-9_-]{43}$/);
    expect(a).toHaveLength(KEY_LENGTH);
    expect(newApiKey()).not.toBe(a);
    expect(checkKeyShape(a)).toBeNull();
    expect(keyDigest(a)).toMatch(/^[0-9a-f]{64}$/);
    expect(keyDigest(a)).not.toContain(a.slice(6, 20));
  });

  test.each([
    [undefined, /^missing API key: send "Authorization: Bearer <key>"$/],
    ['', /^missing API key/],
    ['Basic abc', /expected "Bearer <key>", got scheme "Basic"/],
    ['Bearer', /"Bearer" without a key/],
    ['Bearer   ', /"Bearer" without a key/],
    ['Bearer a b', /the key contains whitespace/],
    ['Token llmgw-x', /got scheme "Token"/],
  ])('the Authorization header %j is refused: %s', (header, message) => {
    const r = parseBearer(header);
    expect(r.kind).toBe('error');
    expect(r.kind === 'error' && r.message).toMatch(message);
  });

  test('"bearer" is read in any case', () => {
    expect(parseBearer('bearer llmgw-x')).toEqual({ kind: 'ok', key: 'llmgw-x' });
  });

  test.each([
    ['sk-123', /start with "llmgw-"/],
    ['llmgw-abc', /49 characters long, this one has 9/],
    [`llmgw-${'a'.repeat(44)}`, /this one has 50/],
    [`llmgw-${'a'.repeat(42)}=`, /characters no llmgw key has/],
  ])('a key of the wrong shape %j says what is wrong', (key, message) => {
    expect(checkKeyShape(key)).toMatch(message);
  });
});

describe('ctl keys create options', () => {
  test('names', () => {
    expect(checkKeyName('team-a.v2_x')).toBe('team-a.v2_x');
    for (const bad of ['', 'Team', '-a', 'a b', 'a'.repeat(65), 'ä'])
      expect(() => checkKeyName(bad)).toThrow(/is not valid: use 1-64 lowercase/);
  });

  test('quotas: whole numbers from 1; 0 refused with what to do instead', () => {
    expect(parseQuota('rpm', undefined)).toBeNull();
    expect(parseQuota('rpm', '600')).toBe(600);
    expect(() => parseQuota('rpm', '0')).toThrow(/--rpm 0 would make a key that can never be used: leave --rpm out/);
    expect(() => parseQuota('tpm', '-5')).toThrow(/not a whole number of tokens per minute/);
    expect(() => parseQuota('tpm', '1e6')).toThrow(/not a whole number/);
    expect(() => parseQuota('tpm', '99999999999')).toThrow(/more than 2000000000/);
  });

  test('models: a comma list, no empties, repeats folded', () => {
    expect(parseModels(undefined)).toBeNull();
    expect(parseModels('a, b,a')).toEqual(['a', 'b']);
    expect(() => parseModels('a,')).toThrow(/has an empty name/);
  });

  test('expiry: a date (midnight UTC) or a date-time with a zone, in the future', () => {
    const now = new Date('2026-06-01T00:00:00Z');
    expect(parseExpiry('2027-01-31', now)?.toISOString()).toBe('2027-01-31T00:00:00.000Z');
    expect(parseExpiry('2026-06-01T12:30:00+02:00', now)?.toISOString()).toBe('2026-06-01T10:30:00.000Z');
    expect(() => parseExpiry('2026-05-31', now)).toThrow(/is in the past/);
    expect(() => parseExpiry('2026-06-01T12:30:00', now)).toThrow(/is not a date/); // no zone: ambiguous
    expect(() => parseExpiry('2026-13-45', now)).toThrow(/is not a date/);
  });
});

describe('errors in OpenAI shape', () => {
  test('carry OpenAI codes where OpenAI has one', () => {
    expect(openAiError('LLMGW_INVALID_API_KEY', 'm')).toEqual({
      error: { message: 'm', type: 'invalid_request_error', code: 'invalid_api_key' },
    });
    expect(openAiError('LLMGW_RATE_LIMITED_TOKENS', 'm').error).toMatchObject({
      type: 'tokens',
      code: 'rate_limit_exceeded',
    });
    expect(openAiError('LLMGW_BAD_REQUEST', 'm').error.code).toBe('LLMGW_BAD_REQUEST');
  });
});

describe('the usage an answer reports', () => {
  test('at the end of a JSON answer, split across chunks', () => {
    const m = new UsageMeter();
    const body = JSON.stringify({
      id: 'x',
      choices: [{ message: { content: 'hi' } }],
      usage: { prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 },
    });
    for (let i = 0; i < body.length; i += 7) m.push(Buffer.from(body.slice(i, i + 7)));
    expect(m.reported()).toEqual({ prompt: 12, completion: 34 });
  });

  test('in the last event of a stream, after events with "usage": null; else counted by events', () => {
    const ev = (o: unknown): string => `data: ${JSON.stringify(o)}\n\n`;
    const m = new UsageMeter();
    m.push(
      Buffer.from(
        ev({ choices: [{ delta: { content: 'a' } }], usage: null }) +
          ev({ choices: [{ delta: { content: 'b' } }], usage: null }),
      ),
    );
    m.push(Buffer.from(ev({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })));
    m.push(Buffer.from('data: [DONE]\n\n'));
    expect(m.reported()).toEqual({ prompt: 3, completion: 2 });
    const bare = new UsageMeter();
    for (const c of ['a', 'b', 'c']) bare.push(Buffer.from(ev({ choices: [{ delta: { content: c } }] })));
    expect(bare.reported()).toBeNull();
    expect(bare.eventCount()).toBe(3);
  });

  test('an answer without usage reports none', () => {
    const m = new UsageMeter();
    expect(m.reported()).toBeNull();
    m.push(Buffer.from('{"data":[{"embedding":[0.1]}]}'));
    expect(m.reported()).toBeNull();
  });
});

describe('quota leases', () => {
  test('grant the slice wanted, half of what is left near the limit, never past it, nothing below what is needed', () => {
    expect(grantOf(null, 0, 10, 1)).toBe(10);
    expect(grantOf(1000, 0, 20, 1)).toBe(20);
    expect(grantOf(1000, 990, 20, 1)).toBe(5);
    expect(grantOf(1000, 999, 20, 1)).toBe(1);
    expect(grantOf(1000, 1000, 20, 1)).toBe(0);
    expect(grantOf(1000, 990, 20, 15)).toBe(0);
    expect(grantOf(1000, 1200, 20, 0)).toBe(0); // a debt took it past the limit
  });

  test('a request is estimated at its body / 4 plus its max_tokens (256 unset; embeddings produce none)', () => {
    expect(estimateTokens(400, 50, false)).toBe(150);
    expect(estimateTokens(400, null, false)).toBe(356);
    expect(estimateTokens(400, null, true)).toBe(100);
  });
});

describe('the key table', () => {
  const key = newApiKey();
  const other = newApiKey();
  const table = (rec: KeyRecord, statics: string[] = []): Promise<KeyTable> => {
    const t = new KeyTable(async () => ({ keys: [rec], now: new Date() }), { staticKeys: statics, clock: () => 1000 });
    return t.refresh().then(() => t);
  };

  test('knows a key by its header, a static key, and refuses unknown, revoked and expired ones by name', async () => {
    const t = await table(record(key), ['static-1']);
    expect(t.authenticate(`Bearer ${key}`)).toMatchObject({ kind: 'key', key: { name: 'team-a' } });
    expect(t.authenticate(`Bearer ${key}`)).toMatchObject({ kind: 'key' }); // the cached header
    expect(t.authenticate('Bearer static-1')).toEqual({ kind: 'static' });
    expect(t.authenticate(`Bearer ${other}`)).toMatchObject({
      kind: 'refused',
      message: expect.stringMatching(/no such key/),
    });
    const revoked = await table(record(key, { revoked: true }));
    expect(revoked.authenticate(`Bearer ${key}`)).toEqual({
      kind: 'refused',
      message: 'invalid API key: key team-a was revoked',
    });
    const expired = await table(record(key, { expiresAt: 1000 }));
    expect(expired.authenticate(`Bearer ${key}`)).toMatchObject({
      message: expect.stringMatching(/key team-a expired at 1970/),
    });
  });

  test('a revocation read later reaches a header already cached', async () => {
    const rows = [record(key)];
    const t = new KeyTable(async () => ({ keys: rows, now: new Date() }));
    await t.refresh();
    expect(t.authenticate(`Bearer ${key}`).kind).toBe('key');
    rows[0] = record(key, { revoked: true });
    await t.refresh();
    expect(t.authenticate(`Bearer ${key}`).kind).toBe('refused');
  });

  test('with no key at all, the refusal says how to make one', async () => {
    const t = new KeyTable(async () => ({ keys: [], now: new Date() }));
    await t.refresh();
    expect(t.authenticate(`Bearer ${key}`)).toMatchObject({
      message: expect.stringMatching(/create one with llmgw ctl keys create NAME$/),
    });
  });

  test('scope: a model outside the key names the model and marks those no longer served', () => {
    const rec = record(key, { models: ['a', 'gone'] });
    expect(scopeRefusal(rec, 'a', () => true)).toBeNull();
    expect(scopeRefusal(rec, 'b', (m) => m !== 'gone')).toBe(
      'key team-a may not use model "b"; it may use: a, gone (no longer served)',
    );
  });
});

test('the control API serves key routes to operator certificates only (a node certificate cannot make keys)', () => {
  for (const route of ['/v1/keys', '/v1/keys/:name/revoke', '/v1/keys/usage'])
    expect(roleForUrl(route)).toBe('operator');
});

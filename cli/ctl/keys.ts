/** `llmgw ctl keys create|list|revoke|usage`: inference API keys, through the control plane (operator certificate). */
import type { KeyCreateRequest } from '../../gateway/control/contract';
import { loadServerConfig } from '../../config/load';
import {
  checkKeyName,
  keyDigest,
  keyPrefix,
  newApiKey,
  parseExpiry,
  parseModels,
  parseQuota,
  type KeySpec,
} from '../../lib/api-keys';
import type { KeyListEntry, KeyUsageRow } from '../../lib/store/keys';
import { intOption, parse, UsageError } from '../args';
import { callControl, controlApi, postControl, type ControlApi } from '../control-api';
import { table } from '../table';
import type { CtlVerb } from './verb';

export const KEYS_USAGE = `
llmgw ctl keys create NAME [--models a,b] [--rpm N] [--tpm N] [--expires DATE]
llmgw ctl keys list
llmgw ctl keys revoke NAME
llmgw ctl keys usage [NAME] [--hours N]

Inference API keys: what clients send to the gateway as "Authorization: Bearer <key>". A key can do nothing
but inference on its models; operators use their certificates, never keys. Only the key's SHA-256 is stored
(made here, on your machine): create prints the key once, as its last line — keep it, it cannot be shown again.
Every gateway sees a new or revoked key within a second. See docs/keys.md.

  create NAME           a new key; NAME: 1-64 of a-z 0-9 . _ - (e.g. team-search)
    --models a,b        the models it may use (default: every model); each must be deployed
    --rpm N             requests per minute, all gateways together (default: no limit)
    --tpm N             tokens per minute, prompt + completion as the engines report them (default: no limit)
                        a limit of 0 is refused: revoke a key to block it
    --expires DATE      YYYY-MM-DD (midnight UTC) or YYYY-MM-DDTHH:MM:SSZ; refused afterwards
  list                  every key: name, first characters, models, limits, expiry, revoked
  revoke NAME           refuse the key from now on, on every gateway within a second (its usage is kept)
  usage [NAME]          requests, refusals (429) and tokens per key, model and hour (UTC)
    --hours N           how far back (default 24)

  --config FILE         server.yaml (default: built-in local-cluster defaults)
  --server URL          control plane URL (default: https:// and the config's listeners.controlPlane)
  --json                machine-readable output

Example:
  llmgw ctl keys create team-search --models sim-small --rpm 600 --tpm 100000
  curl -H "Authorization: Bearer llmgw-…" http://127.0.0.1:8080/v1/models
`;

const OPTIONS = {
  config: { type: 'string' },
  server: { type: 'string' },
  json: { type: 'boolean' },
  models: { type: 'string' },
  rpm: { type: 'string' },
  tpm: { type: 'string' },
  expires: { type: 'string' },
  hours: { type: 'string' },
} as const;

/** Turns a parse function's Error into a UsageError (it names the flag and the fix). */
function checked<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** The options `create` takes, checked, before anything is sent. */
export function keySpec(
  name: string | undefined,
  v: { models?: string; rpm?: string; tpm?: string; expires?: string },
): KeySpec {
  if (name === undefined) throw new UsageError('ctl keys create needs a NAME, e.g. llmgw ctl keys create team-search');
  return checked(() => ({
    name: checkKeyName(name),
    models: parseModels(v.models),
    rpm: parseQuota('rpm', v.rpm),
    tpm: parseQuota('tpm', v.tpm),
    expiresAt: parseExpiry(v.expires),
  }));
}

/** Makes a key here, registers its digest, and prints it as the last line; returns the key. */
export async function createKey(api: ControlApi, spec: KeySpec, out: (s: string) => void): Promise<string> {
  const key = newApiKey();
  const body: KeyCreateRequest = {
    name: spec.name,
    digest: keyDigest(key),
    prefix: keyPrefix(key),
    models: spec.models,
    rpm: spec.rpm,
    tpm: spec.tpm,
    expiresAt: spec.expiresAt?.toISOString() ?? null,
  };
  await postControl(api, '/v1/keys', body);
  out(
    `key ${spec.name} created: ${spec.models ? `models ${spec.models.join(', ')}` : 'every model'}, ` +
      `${spec.rpm ?? 'unlimited'} requests and ${spec.tpm ?? 'unlimited'} tokens per minute` +
      `${spec.expiresAt ? `, expires ${spec.expiresAt.toISOString()}` : ''}\n` +
      'this is the only time the key is shown; send it as "Authorization: Bearer <key>":\n' +
      `${key}\n`,
  );
  return key;
}

/** Prints every key. */
export async function listKeys(api: ControlApi, json: boolean, out: (s: string) => void): Promise<KeyListEntry[]> {
  const { keys } = await callControl<{ keys: KeyListEntry[] }>(api, '/v1/keys');
  if (json) out(`${JSON.stringify(keys, null, 2)}\n`);
  else if (keys.length === 0) out('no keys yet: llmgw ctl keys create NAME\n');
  else
    out(
      table(
        ['NAME', 'KEY', 'MODELS', 'RPM', 'TPM', 'EXPIRES', 'STATE'],
        keys.map((k) => [
          k.name,
          `${k.prefix}…`,
          k.models?.join(',') ?? '*',
          k.rpm === null ? '-' : String(k.rpm),
          k.tpm === null ? '-' : String(k.tpm),
          k.expiresAt?.slice(0, 16).replace('T', ' ') ?? '-',
          k.revokedAt
            ? `revoked ${k.revokedAt.slice(0, 10)}`
            : k.expiresAt && Date.parse(k.expiresAt) <= Date.now()
              ? 'expired'
              : 'active',
        ]),
      ),
    );
  return keys;
}

/** Revokes a key by name. */
export async function revokeKey(api: ControlApi, name: string, out: (s: string) => void): Promise<boolean> {
  const { revoked } = await postControl<{ revoked: boolean }>(api, `/v1/keys/${encodeURIComponent(name)}/revoke`);
  out(
    revoked ? `key ${name} revoked: every gateway refuses it within a second\n` : `key ${name} was revoked already\n`,
  );
  return revoked;
}

/** Prints usage per key, model and hour. */
export async function keysUsage(
  api: ControlApi,
  o: { name?: string; hours: number; json: boolean },
  out: (s: string) => void,
): Promise<KeyUsageRow[]> {
  const q = new URLSearchParams({ hours: String(o.hours), ...(o.name !== undefined ? { name: o.name } : {}) });
  const { usage } = await callControl<{ usage: KeyUsageRow[] }>(api, `/v1/keys/usage?${q}`);
  if (o.json) out(`${JSON.stringify(usage, null, 2)}\n`);
  else if (usage.length === 0) out(`no usage in the last ${o.hours} h${o.name ? ` for key ${o.name}` : ''}\n`);
  else
    out(
      table(
        ['HOUR (UTC)', 'KEY', 'MODEL', 'REQUESTS', '429', 'PROMPT TOKENS', 'COMPLETION TOKENS'],
        usage.map((u) => [
          u.hour.slice(0, 13).replace('T', ' '),
          u.name,
          u.model,
          String(u.requests),
          String(u.refused),
          String(u.promptTokens),
          String(u.completionTokens),
        ]),
      ),
    );
  return usage;
}

/** Entry for `llmgw ctl keys …` (argv without the verb). */
export async function keysCommand(
  argv: string[],
  out: (s: string) => void = (s) => process.stdout.write(s),
): Promise<void> {
  const { values, positionals } = parse(argv, { usage: KEYS_USAGE, allowPositionals: true, options: OPTIONS });
  const [sub, name, ...extra] = positionals;
  const api = (): ControlApi => controlApi(loadServerConfig(values.config), values.server);
  const only = (allowed: string[]): void => {
    const given = (['models', 'rpm', 'tpm', 'expires', 'hours'] as const).filter((k) => values[k] !== undefined);
    const stray = given.find((k) => !allowed.includes(k));
    if (stray) throw new UsageError(`ctl keys ${sub} takes no --${stray}\n${KEYS_USAGE}`);
    if (extra.length) throw new UsageError(`ctl keys ${sub}: unexpected ${JSON.stringify(extra[0])}\n${KEYS_USAGE}`);
  };
  switch (sub) {
    case 'create': {
      only(['models', 'rpm', 'tpm', 'expires']);
      const spec = keySpec(name, values);
      return void (await createKey(api(), spec, out));
    }
    case 'list':
      only([]);
      if (name !== undefined) throw new UsageError(`ctl keys list takes no NAME\n${KEYS_USAGE}`);
      return void (await listKeys(api(), values.json ?? false, out));
    case 'revoke':
      only([]);
      if (name === undefined)
        throw new UsageError('ctl keys revoke needs a NAME, e.g. llmgw ctl keys revoke team-search');
      return void (await revokeKey(
        api(),
        checked(() => checkKeyName(name)),
        out,
      ));
    case 'usage': {
      only(['hours']);
      const hours = intOption(values.hours, '--hours', 24);
      if (hours < 1 || hours > 24 * 90) throw new UsageError('--hours must be from 1 to 2160 (90 days)');
      const n = name === undefined ? undefined : checked(() => checkKeyName(name));
      return void (await keysUsage(api(), { name: n, hours, json: values.json ?? false }, out));
    }
    default:
      throw new UsageError(
        `${sub === undefined ? 'ctl keys needs a SUBCOMMAND' : `unknown subcommand "ctl keys ${sub}"`}: create, list, revoke or usage\n${KEYS_USAGE}`,
      );
  }
}

/** `ctl keys` (its own options and --help) */
export const keysVerb: CtlVerb = {
  help: `  keys create|list|revoke|usage
                              inference API keys: scoped to models, with rpm/tpm quotas across gateways, hashed
                              in MySQL; create prints the key once (docs/keys.md)`,
  run: (ctx) => keysCommand(ctx.positionals, ctx.out),
  raw: keysCommand,
};

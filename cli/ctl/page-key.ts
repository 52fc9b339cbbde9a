/** `llmgw ctl page-key create|list|revoke NAME`: the keys operators sign in to the cluster page with. */
import type { PageKeyCreated } from '../../gateway/control/contract';
import { UsageError } from '../args';
import { callControl, postControl } from '../control-api';
import { table } from '../table';
import type { CtlVerb } from './verb';

const SUBS = 'create NAME | list | revoke NAME';

/** `ctl page-key` */
export const pageKey: CtlVerb = {
  help: `  page-key create NAME        a key to sign in to the cluster page (https://CONTROL-PLANE/page/) with; shown once,
                              stored hashed (docs/cluster-page.md)
  page-key list | revoke NAME the keys by name; revoking one ends its sessions`,
  async run({ api, values, positionals, out }) {
    const [sub, name] = positionals;
    if (sub === 'list') {
      const { keys } = await callControl<{ keys: { name: string; createdAt: string; revokedAt: string | null }[] }>(
        api,
        '/v1/page-keys',
      );
      out(
        values.json
          ? `${JSON.stringify(keys, null, 2)}\n`
          : keys.length
            ? table(
                ['NAME', 'CREATED', 'REVOKED'],
                keys.map((k) => [k.name, k.createdAt, k.revokedAt ?? '-']),
              )
            : 'no page keys: llmgw ctl page-key create NAME\n',
      );
      return;
    }
    if ((sub !== 'create' && sub !== 'revoke') || !name)
      throw new UsageError(`ctl page-key needs ${SUBS}, e.g. llmgw ctl page-key create alice`);
    if (sub === 'revoke') {
      await postControl(api, '/v1/page-keys/revoke', { name });
      out(`page key ${name} revoked; its sessions are ended\n`);
      return;
    }
    const r = await postControl<PageKeyCreated>(api, '/v1/page-keys', { name });
    out(
      values.json
        ? `${JSON.stringify(r)}\n`
        : `page key ${r.name} (shown this once; only its hash is stored):\n  ${r.key}\nsign in at ${api.server}/page/\n`,
    );
  },
};

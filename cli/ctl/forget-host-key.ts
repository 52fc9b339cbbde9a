/** `llmgw ctl forget-host-key NODE`: forgets the ssh host keys onboarding learned for NODE (it was rebuilt on purpose). */
import type { ServerConfig } from '../../config/types';
import { checkNodeId } from '../../lib/pki/node-id';
import { nodeArg, type CtlVerb } from './verb';

/**
 * Deletes NODE's host keys from MySQL (server.yaml's mysql: the CA host's records), so the next onboarding learns
 * the key the machine presents then. Prints the fingerprints it forgot.
 */
export async function forgetHostKey(
  config: Pick<ServerConfig, 'mysql'>,
  node: string,
  out: (s: string) => void,
): Promise<number> {
  const nodeId = checkNodeId(node);
  // Loaded here, not at the top: every other ctl verb starts without MySQL's driver.
  /* eslint-disable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */
  const { openConfiguredDatabase } = require('../../lib/store/db') as typeof import('../../lib/store/db');
  const { HostKeyStore } = require('../../lib/store/host-keys') as typeof import('../../lib/store/host-keys');
  /* eslint-enable @typescript-eslint/no-require-imports, @typescript-eslint/consistent-type-imports */
  const pool = await openConfiguredDatabase(config.mysql, 'controlPlane');
  try {
    const keys = new HostKeyStore(pool);
    const known = await keys.list(nodeId);
    const n = await keys.forget(nodeId);
    out(
      n === 0
        ? `${nodeId}: no ssh host key recorded (never onboarded, or already forgotten)\n`
        : `${nodeId}: forgot ${known.map((k) => `${k.type} ${k.fingerprint}`).join(', ')}; the next llmgw onboard-node learns the key it presents then\n`,
    );
    return n;
  } finally {
    await pool.end();
  }
}

/** `ctl forget-host-key` */
export const forgetHostKeyVerb: CtlVerb = {
  help: `  forget-host-key NODE        forget the ssh host keys onboarding learned for NODE, when the machine was rebuilt on
                              purpose (server.yaml's mysql: run it on the CA host)`,
  run: async (ctx) => void (await forgetHostKey(ctx.config, nodeArg(ctx, 'gpu-01'), ctx.out)),
};

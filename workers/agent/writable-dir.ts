/** The agent's directories (`--state-dir`, `--weights-dir`) checked at start. */
import { accessSync, constants, mkdirSync } from 'node:fs';
import { LlmgwError } from '../../lib/errors';

/** Creates `dir` and checks the agent may write there; fails at start naming `flag` and the `fix`, rather than at first use. */
export function ensureWritableDir(dir: string, flag: string, fix: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new LlmgwError(
      'LLMGW_BAD_REQUEST',
      `${flag} ${dir} is not a writable directory (${(err as Error).message}); ${fix}`,
    );
  }
}

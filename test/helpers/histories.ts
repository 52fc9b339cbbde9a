/** Recording replay fixtures (test/fixtures/histories) from a test's own Temporal server, when LLMGW_RECORD_HISTORIES is set. */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { TEMPORAL_BIN } from '../../cli/cluster/temporal-dev';

const HISTORIES = join(__dirname, '../fixtures/histories');

/**
 * Writes workflow `id`'s history (its latest run, or `runId`) as `file` when LLMGW_RECORD_HISTORIES=1; the
 * temporal CLI's JSON, because historyToJSON trips over jest's second copy of protobufjs. Returns whether it did.
 */
export function recordHistory(address: string, file: string, id: string, runId?: string): boolean {
  if (!process.env.LLMGW_RECORD_HISTORIES) return false;
  writeFileSync(
    join(HISTORIES, file),
    execFileSync(
      TEMPORAL_BIN,
      ['workflow', 'show', '--address', address, '-w', id, ...(runId ? ['-r', runId] : []), '--output', 'json'],
      { encoding: 'utf8' },
    ),
  );
  return true;
}

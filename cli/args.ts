/** Shared option parsing for CLI commands: `--help` that teaches, and errors that say what to type. */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { quoteInput } from '../lib/errors';

/** A usage error: the command prints it with the usage text and exits 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

export interface CommandSpec<O extends NonNullable<ParseArgsConfig['options']>> {
  usage: string;
  options: O;
  allowPositionals?: boolean;
}

/** Parses argv against the spec; `--help` prints usage and exits 0. */
export function parse<O extends NonNullable<ParseArgsConfig['options']>>(argv: string[], spec: CommandSpec<O>) {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${spec.usage.trim()}\n`);
    process.exit(0);
  }
  try {
    return parseArgs({
      args: argv,
      options: spec.options,
      allowPositionals: spec.allowPositionals ?? false,
      strict: true,
    });
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${spec.usage.trim()}`);
  }
}

/**
 * Parses a whole number option of plain digits, naming the flag when it is not one: Number() would read "" as 0,
 * "1e9" as a billion and "0x10" as 16, and `ctl scale M ""` scaled a model to zero.
 */
export function intOption(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = /^\d{1,15}$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n))
    throw new UsageError(`${flag} must be a whole number written in digits (e.g. 3), got ${quoteInput(value, 32)}`);
  return n;
}

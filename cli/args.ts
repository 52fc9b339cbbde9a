/** Shared option parsing for CLI commands: `--help` that teaches, and errors that say what to type. */
import { parseArgs, type ParseArgsConfig } from 'node:util';

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

/** Parses a whole positive number option, naming the flag when it is not one. */
export function intOption(value: string | undefined, flag: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`${flag} must be a whole number, got "${value}"`);
  return n;
}

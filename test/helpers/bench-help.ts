/**
 * `npm run bench:NAME -- --help` for a benchmark without options of its own to describe: imported first, before
 * anything heavy, it prints the benchmark's leading doc comment (what it measures, how, its options and its goal)
 * and exits.
 */
import { readFileSync } from 'node:fs';

/** The text of a source file's leading `/** … *\/` comment, without its stars, or undefined. */
export function leadingDoc(source: string): string | undefined {
  const m = /^\s*\/\*\*([\s\S]*?)\*\//.exec(source);
  if (!m) return undefined;
  return m[1]!
    .split('\n')
    .map((l) => l.replace(/^\s*\* ?/, ''))
    .join('\n')
    .trim();
}

if (process.argv.slice(2).some((a) => a === '--help' || a === '-h')) {
  const script = process.argv[1];
  process.stdout.write(`${(script && leadingDoc(readFileSync(script, 'utf8'))) || 'no description'}\n`);
  process.exit(0);
}

/**
 * Where the checkout is, and how to run one of llmgw's own entry files as a child process, whether this code runs
 * from its TypeScript (through tsx) or from the compiled build in dist/build/ (npm run build, plain JavaScript).
 */
import { resolve } from 'node:path';

/** True when this is the compiled build (dist/build/lib/paths.js), not the TypeScript through tsx. */
export const COMPILED = /[\\/]dist[\\/]build[\\/]lib$/.test(__dirname);

/** The checkout's root: .tools/, bin/, test/fixtures/ and package.json are here. */
export const PROJECT_ROOT = COMPILED ? resolve(__dirname, '../../..') : resolve(__dirname, '..');

/**
 * The argv that runs `file` (relative to the root, without extension, e.g. 'cli/sim-engine') under this Node: the
 * compiled .js in a build, else the .ts with tsx's CommonJS loader (`--require tsx/cjs` rather than `--import tsx`:
 * the project is CommonJS, and it starts twice as fast).
 */
export function ownEntryArgv(file: string): string[] {
  return COMPILED
    ? [process.execPath, resolve(__dirname, '..', `${file}.js`)]
    : [process.execPath, '--require', require.resolve('tsx/cjs'), resolve(PROJECT_ROOT, `${file}.ts`)];
}

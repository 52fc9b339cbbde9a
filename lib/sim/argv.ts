/** How a node runs the sim engine as a child process. */
import { ownEntryArgv } from '../paths';
import { releaseSelfArgv } from '../release';

/**
 * The argv prefix of the sim engine: node with tsx's CommonJS loader and the entrypoint, all absolute
 * so it works from any working directory. `--require tsx/cjs` rather than `--import tsx`: the project
 * is CommonJS, and it starts twice as fast. Measured spawn → `serving` on stderr (Node 20, tsx 4.23):
 * about 260 ms with a cold tsx cache, about 120 ms warm (`--import tsx` is about 250 ms warm). From a release
 * artefact: its own Node and bundled program, `sim-engine`.
 */
export function simEngineArgv(): string[] {
  return releaseSelfArgv('sim-engine') ?? ownEntryArgv('cli/sim-engine');
}

/** How a node runs the sim engine as a child process. */
import { resolve } from 'node:path';

/**
 * The argv prefix of the sim engine: node with tsx's loader and the entrypoint, as absolute paths
 * so it works from any working directory (about 0.6 s from spawn to serving, tsx compile included).
 */
export function simEngineArgv(): string[] {
  return [process.execPath, '--require', require.resolve('tsx/cjs'), resolve(__dirname, '../../workers/sim-engine.ts')];
}

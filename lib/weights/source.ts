/**
 * What a catalog `source` names, and which ranks need its weights on their node. Pure (no Node built-ins, and
 * so is the engine registry it reads), so the replica workflow may import it.
 */
import { ENGINE_SPECS } from '../engines/registry';
import type { EngineName } from '../types';
import { classifySource } from './classify';

export { classifySource, SHA256_RE, type WeightsSource } from './classify';

/**
 * True when this rank of a replica must have the model's weights on its own node before it starts: the source
 * is a URL or a path (sim:// and engine-resolved ids have nothing to fetch), and the rank reads them itself
 * (the engine's spec says which ranks do: llama.cpp's and the sim engine's workers get everything from rank 0).
 */
export function needsWeights(source: string, engine: EngineName, rank: number): boolean {
  const kind = classifySource(source).kind;
  if (kind !== 'url' && kind !== 'path') return false;
  return ENGINE_SPECS[engine].rankNeedsWeights(rank);
}

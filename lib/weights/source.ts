/**
 * What a catalog `source` names, and which ranks need its weights on their node. Pure (no Node built-ins, and
 * so is the engine registry it reads), so the replica workflow may import it.
 */
import { ENGINE_SPECS } from '../engines/registry';
import type { EngineName } from '../types';

/** A catalog source, classified. */
export type WeightsSource =
  /** the sim engine's own models: no file to fetch */
  | { kind: 'sim'; source: string }
  /** one file at an http(s) URL, fetched once per node into its weights cache */
  | { kind: 'url'; url: string }
  /** a file or directory already on the node (an absolute path, or file:///abs/path) */
  | { kind: 'path'; path: string }
  /** anything else (e.g. a Hugging Face id `org/name`): handed to the engine as it is, the engine resolves it */
  | { kind: 'engine'; source: string };

/** Classifies a catalog `source`. */
export function classifySource(source: string): WeightsSource {
  if (source.startsWith('sim://')) return { kind: 'sim', source };
  if (/^https?:\/\//i.test(source)) return { kind: 'url', url: source };
  if (source.startsWith('file://')) return { kind: 'path', path: decodeURIComponent(source.slice('file://'.length)) };
  if (source.startsWith('/')) return { kind: 'path', path: source };
  return { kind: 'engine', source };
}

/** A sha256 as the catalog gives it: 64 hex digits. */
export const SHA256_RE = /^[0-9a-f]{64}$/i;

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

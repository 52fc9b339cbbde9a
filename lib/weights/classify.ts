/**
 * What a catalog `source` names, without the engine registry (lib/weights/source.ts adds which ranks need the
 * weights): config/load.ts checks a catalog with it, and `llmgw ctl` loads the config without loading every engine.
 */

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

/**
 * The cluster page's files: one HTML shell, one script, one stylesheet, hand-written and served from llmgw's own
 * package (no CDN, no build step). Read once at start; in a release they sit in `page/` beside the program.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { release } from '../../../lib/release';

/** A served file: its bytes and content type. */
export interface Asset {
  body: Buffer;
  type: string;
}

/** The page's files by URL name (`index.html`, `app.js`, `app.css`). */
export const ASSET_FILES = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
} as const;

/** Where the files are: this checkout's gateway/control/page/assets, or a release's page/ directory. */
export function assetDir(): string {
  const r = release();
  return r ? join(dirname(r.program), 'page') : join(__dirname, 'assets');
}

/** Reads every file of the page (a missing one fails the control plane's start, not a browser's request). */
export function loadAssets(dir = assetDir()): Record<keyof typeof ASSET_FILES, Asset> {
  const out = {} as Record<keyof typeof ASSET_FILES, Asset>;
  for (const [name, type] of Object.entries(ASSET_FILES) as [keyof typeof ASSET_FILES, string][])
    out[name] = { body: readFileSync(join(dir, name)), type };
  return out;
}

'use strict';
// The compiled build's freshness (scripts/build.ts writes it, bin/llmgw.js checks it): the newest mtime and the
// count of the files under the source folders. Plain JavaScript, because it runs before anything is compiled.
const { readdirSync, statSync } = require('node:fs');
const { join } = require('node:path');

/** Every folder whose files go into the program (and package.json for its version and dependencies). */
const SOURCE_DIRS = ['workflows', 'activities', 'workers', 'gateway', 'cli', 'config', 'lib'];

/** @returns {{ newestMtimeMs: number, files: number }} */
function sourceStamp(root) {
  let newestMtimeMs = statSync(join(root, 'package.json')).mtimeMs;
  let files = 1;
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else {
        files++;
        const m = statSync(p).mtimeMs;
        if (m > newestMtimeMs) newestMtimeMs = m;
      }
    }
  };
  for (const d of SOURCE_DIRS) walk(join(root, d));
  return { newestMtimeMs, files };
}

module.exports = { sourceStamp, SOURCE_DIRS };

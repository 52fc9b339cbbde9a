'use strict';
// What every bin/ launcher runs: the compiled build (npm run build → dist/build/) while no source file changed since
// it was built, else the TypeScript CLI through tsx, so a checkout needs no build step and never runs a stale one.
const { readFileSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');

function currentBuild() {
  if (process.env.LLMGW_NO_BUILD === '1') return null;
  let recorded;
  try {
    recorded = JSON.parse(readFileSync(join(root, 'dist/build/sources.json'), 'utf8'));
  } catch {
    return null; // not built: the common case in a checkout
  }
  const now = require('./build-stamp.js').sourceStamp(root);
  const same = now.newestMtimeMs === recorded.newestMtimeMs && now.files === recorded.files;
  return same ? join(root, 'dist/build/cli/main.js') : null;
}

const built = currentBuild();
if (built) require(built);
else {
  require('tsx/cjs');
  require('../cli/main.ts');
}

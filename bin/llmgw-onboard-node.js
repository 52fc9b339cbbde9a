#!/usr/bin/env node
// llmgw-onboard-node: the same as `llmgw onboard-node` (run from a checkout through tsx, like bin/llmgw.js).
process.argv.splice(2, 0, 'onboard-node');
require('tsx/cjs');
require('../cli/main.ts');

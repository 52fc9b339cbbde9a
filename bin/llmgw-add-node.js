#!/usr/bin/env node
// llmgw-add-node: the same as `llmgw add-node` (run from a checkout through tsx, like bin/llmgw.js).
process.argv.splice(2, 0, 'add-node');
require('tsx/cjs');
require('../cli/main.ts');

#!/usr/bin/env node
// llmgw-provision-node: the same as `llmgw provision-node` (run from a checkout through tsx, like bin/llmgw.js).
process.argv.splice(2, 0, 'provision-node');
require('tsx/cjs');
require('../cli/main.ts');

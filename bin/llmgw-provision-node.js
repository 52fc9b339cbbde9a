#!/usr/bin/env node
// llmgw-provision-node: the same as `llmgw provision-node` (bin/entry.js: the compiled build when current, else through tsx).
process.argv.splice(2, 0, 'provision-node');
require('./entry.js');

#!/usr/bin/env node
// llmgw-add-node: the same as `llmgw add-node` (bin/entry.js: the compiled build when current, else through tsx).
process.argv.splice(2, 0, 'add-node');
require('./entry.js');

#!/usr/bin/env node
// llmgw-onboard-node: the same as `llmgw onboard-node` (bin/entry.js: the compiled build when current, else through tsx).
process.argv.splice(2, 0, 'onboard-node');
require('./entry.js');

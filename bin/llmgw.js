#!/usr/bin/env node
// The llmgw command: the compiled build when it is current (npm run build), else the TypeScript CLI through tsx.
require('./entry.js');

#!/usr/bin/env node
// The llmgw command: runs the TypeScript CLI through tsx so a checkout needs no build step.
require('tsx/cjs');
require('../cli/main.ts');

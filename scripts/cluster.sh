#!/usr/bin/env bash
# The local cluster (README): set-up, the compiled build (about a second; every role and ctl starts from it), then
# `llmgw cluster` on embedded defaults. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
npm run --silent build
exec node bin/llmgw.js cluster "$@"

#!/usr/bin/env bash
# The local cluster (README): set-up, then `llmgw cluster` on embedded defaults. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node bin/llmgw.js cluster "$@"

#!/usr/bin/env bash
# The test command (README, .ci/run): set-up, typecheck, lint, format check, then every jest suite against the
# real Temporal dev server binary and the local MariaDB. Ends with one PASS/FAIL line and the wall time.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh || { echo "FAIL: setup"; exit 1; }
status=0
echo "[test] tsc --noEmit";  npx tsc --noEmit -p . || status=1
echo "[test] eslint";        npx eslint . || status=1
echo "[test] prettier --check"; npx prettier --check . --log-level warn || { status=1; echo "  run: npm run format"; }
echo "[test] jest";          npx jest --ci "$@" || status=1
# The fault suite saturates both cores on purpose, so it runs alone, after the others (unless jest was given paths).
if [ $# = 0 ]; then echo "[test] jest test/faults (alone)"; LLMGW_FAULTS=1 npx jest --ci test/faults || status=1; fi
secs=$(( $(date +%s) - start ))
if [ $status = 0 ]; then echo "PASS: typecheck, lint and tests in ${secs}s"; else echo "FAIL: see above (${secs}s)"; fi
exit $status

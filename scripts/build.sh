#!/usr/bin/env bash
# Installs the dependencies (idempotent) and builds everything in build/ (Release, -O3).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

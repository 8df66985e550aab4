#!/usr/bin/env bash
# Fresh machine to test results: install, build, run the whole doctest suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"

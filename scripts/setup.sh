#!/usr/bin/env bash
# Installs every dependency of the project from Debian's registry; skips what is already there (idempotent).
set -euo pipefail
packages=(libcaf-dev libxtensor-dev libxtensor-blas-dev doctest-dev libopenblas-dev zlib1g-dev libdnnl-dev
          libcli11-dev nlohmann-json3-dev libgloo-dev libisal-dev dataset-fashion-mnist fortunes cmake g++ make libssl-dev openssl
          python3-numpy libpcre2-dev)
# --bench adds what only the peer benchmarks use (Open MPI for scripts/bench_allreduce.sh); the runtime never
# links it.
if [ "${1:-}" = "--bench" ]; then packages+=(openmpi-bin libopenmpi-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

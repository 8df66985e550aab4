#!/usr/bin/env bash
# All-reduce bus bandwidth for 1-64 MB between 2 processes on this machine: our ring group over CAF
# (bench_allreduce) with plain TCP (--insecure: the same transport and security as MPI's btl tcp, the pair the
# 0.8x target compares) and with mutual TLS (what a group uses outside a trusted network), next to Open MPI's
# MPI_Allreduce over loopback TCP and over its default shared-memory transport. Installs Open MPI (benchmark
# only) through setup.sh --bench.
# Usage: scripts/bench_allreduce.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-10}"
./scripts/setup.sh --bench
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target bench_allreduce >/dev/null
mkdir -p build/bench
mpicc -O2 -o build/bench/mpi_allreduce bench/mpi_allreduce.c
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
echo "== ours: ring group over CAF, plain TCP loopback (--insecure)"
./build/bench/bench_allreduce --insecure --repeats "$repeats"
echo "== ours: ring group over CAF, mutual TLS over loopback"
./build/bench/bench_allreduce --repeats "$repeats"
echo "== Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), TCP loopback (--mca btl tcp,self)"
mpirun "${root[@]}" --oversubscribe -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
  build/bench/mpi_allreduce "$repeats"
echo "== Open MPI, default transport (shared memory between the 2 processes)"
mpirun "${root[@]}" --oversubscribe -np 2 build/bench/mpi_allreduce "$repeats"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

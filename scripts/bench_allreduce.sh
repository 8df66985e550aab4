#!/usr/bin/env bash
# All-reduce bus bandwidth for 1-64 MB among 2, 4 and 8 processes (or others) on this machine, every backend side
# by side (Note [collective backends]): our ring (data links) with plain TCP (--insecure: the same transport and
# security as MPI's btl tcp) and with mutual TLS; gloo (plain TCP only); Open MPI's MPI_Allreduce over loopback
# TCP and over its default shared-memory transport. Installs Open MPI (benchmark only) through setup.sh --bench.
# The ring and gloo run in `bench_network allreduce`, Open MPI in bench/mpi_allreduce.c (built here with mpicc).
# Usage: scripts/bench_allreduce.sh [REPEATS] [PROCESS_COUNTS, default "2 4 8"]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-10}"
counts="${2:-2 4 8}"
./scripts/setup.sh --bench
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target bench_network >/dev/null
mkdir -p build/bench
mpicc -O2 -o build/bench/mpi_allreduce bench/mpi_allreduce.c
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
for n in $counts; do
  echo "== $n processes: ours, ring group on data links, plain TCP loopback (--insecure)"
  ./build/bench/bench_network allreduce --processes "$n" --insecure --repeats "$repeats"
  echo "== $n processes: ours, ring group on data links, mutual TLS over loopback"
  ./build/bench/bench_network allreduce --processes "$n" --repeats "$repeats"
  echo "== $n processes: gloo, plain TCP loopback"
  ./build/bench/bench_network allreduce --processes "$n" --backend gloo --repeats "$repeats"
  echo "== $n processes: Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), TCP loopback (--mca btl tcp,self)"
  mpirun "${root[@]}" --oversubscribe -np "$n" --mca btl tcp,self --mca btl_tcp_if_include lo \
    build/bench/mpi_allreduce "$repeats"
  echo "== $n processes: Open MPI, default transport (shared memory)"
  mpirun "${root[@]}" --oversubscribe -np "$n" build/bench/mpi_allreduce "$repeats"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

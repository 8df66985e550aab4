#!/usr/bin/env bash
# The many-core figures in one command on a lent machine (docs/performance.md, "Cores, measured on a 16-core
# machine"): such a machine is lent for minutes, each start costing minutes, so the whole sweep is one command of at
# most 530 s (SWEEP_SECONDS) that writes each part's output under OUT as it goes; a part that runs past its limit is
# cut (`timeout`, and what it started is killed) and the next one starts. Needs the bundle of
# scripts/device_bundle.sh in .device/.
#
#   here:      ./scripts/build.sh && scripts/device_bundle.sh
#   device:    run with carry [".device"]:  scripts/sweep_16_cores.sh "$OUT"   (it unpacks the bundle)
#
# What it measures, in order of need (every part prints its own table and JSON line):
#   1. bench_scaling (its sweep) of the ranks with several threads each (P x threads, D x threads, T x threads), which
#      were measured beside an idle OpenMP team (Note [idle teams] in tensor/compute.hpp), and the
#      single process on every core beside them: the heavy MLP, the 4-layer and the 16-layer GPT;
#   2. the nodes' figure (bench_network): 4 node processes of 4 threads against 4 stages of 4 threads in one process;
#   3. PyTorch on the same models and splits of the cores (where python3 has torch);
#   4. bench_ops (its ops) at 1 and all threads (each op's parallel efficiency).
set -uo pipefail
out="${1:?usage: scripts/sweep_16_cores.sh OUT_DIR}"
mkdir -p "$out"
ap=.device/ap
[ -x "$ap" ] || { echo "no .device/ap: run scripts/device_bundle.sh here first, then carry .device" >&2; exit 1; }
[ -d .device/lib ] || bash .device/unpack  # the programs and their libraries, packed
cores=$(nproc)
per() { local v=$((cores / $1)); [ "$v" -ge 1 ] || v=1; echo "$v"; }  # cores / N, at least 1
budget=${SWEEP_SECONDS:-530}  # the whole sweep's limit: under run's 600 s a command, with time to copy OUT back
part() {  # part NAME SECONDS COMMAND...: COMMAND under a limit (cut to what the budget has left), output in OUT/NAME.txt
  local name=$1 limit=$2; shift 2
  local left=$((budget - SECONDS))
  [ "$limit" -le "$left" ] || limit=$left
  if [ "$limit" -lt 10 ]; then echo "== $name skipped: the budget of $budget s is spent" | tee -a "$out/sweep.log"; return; fi
  echo "== $name ($(date +%T), limit ${limit} s, load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/sweep.log"
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.txt" 2>&1
  echo "   exit $? after $SECONDS s of the sweep" | tee -a "$out/sweep.log"
  pkill -9 -f "$PWD/.device/bin/" 2>/dev/null; pkill -9 -f torch_cpu_bench.py 2>/dev/null  # what a cut part left
  sleep 1
  grep -v '^{' "$out/$name.txt" | tail -n 25
}
{ lscpu; echo; free -g; echo; python3 -c 'import torch; print("torch", torch.__version__)' 2>&1; } > "$out/machine.txt"
echo "sweep on $cores cores" | tee "$out/sweep.log"
many="1 process, $cores threads;P=4, $(per 4) threads;P=8, $(per 8) threads;D=4, $(per 4) threads"
many="$many;D=$cores,;T=8, $(per 8) threads;P=4, $cores cores by stage cost;P=1, $cores threads"
for model in mlp:60 gpt4:70 gpt16:130; do
  part "scaling_${model%:*}" "${model#*:}" env AP_BIN=bench_scaling "$ap" --models "${model%:*}" --steps 2 --rounds 1 --no-torch --only "$many"
done
part network_4x4 80 env AP_BIN=bench_network "$ap" --insecure --training-only --stages 4 --threads $(per 4) \
  --batch 1024 --steps 10
if python3 -c 'import torch' >/dev/null 2>&1; then
  t=.device/torch_cpu_bench.py
  part torch_single_mlp 30 python3 "$t" single mlp:784-2048-2048-2048-10 --threads "$cores" --batch 1024 --steps 5
  part torch_single_gpt4 30 python3 "$t" single gpt:4,256,8,128 --threads "$cores" --batch 64 --steps 5
  part torch_single_gpt16 45 python3 "$t" single gpt:16,256,8,128 --threads "$cores" --batch 64 --steps 4 --warmup 1
  part torch_pipe_mlp 45 python3 "$t" pipe mlp:784-2048-2048-2048-10 --stages 4 --threads $(per 4) --batch 1024 \
    --steps 5 --microbatches 8
  part torch_pipe_gpt16 60 python3 "$t" pipe gpt:16,256,8,128 --stages 4 --threads $(per 4) --batch 64 \
    --steps 3 --warmup 1 --microbatches 8
fi
part ops 40 env AP_BIN=bench_ops "$ap" --threads "1,$cores" --repeats 3
echo "done after $SECONDS s" | tee -a "$out/sweep.log"

#!/usr/bin/env bash
# Single-process speed, an older commit against this tree, in one run: builds the single-process benchmark at OLD
# (default 93921da, before the oneDNN core: bench_single_process there, `bench_ops step` since) in a temporary
# worktree, then alternates old / new 1 thread / new every core, REPEATS times each, and prints the medians and
# ratios (the JSON lines of both have the same fields). Needs ./scripts/build.sh first.
#   scripts/bench_old_vs_new.sh [OLD_COMMIT] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:-93921da}
repeats=${2:-3}
work=$(mktemp -d /tmp/actorpipe-old-XXXXXX)
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/src" "$old"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
old_cmd=("$work/build/bench/bench_single_process"); old_target=bench_single_process
[ -f "$work/src/bench/bench_single_process.cpp" ] || { old_cmd=("$work/build/bench/bench_ops" step); old_target=bench_ops; }
cmake --build "$work/build" -j"$(nproc)" --target "$old_target" >/dev/null
for i in $(seq "$repeats"); do
  "${old_cmd[@]}" > "$work/old-$i.txt"
  ./build/bench/bench_ops step --threads 1 > "$work/new1-$i.txt"
  ./build/bench/bench_ops step --threads "$(nproc)" > "$work/newall-$i.txt"
  echo "round $i done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
python3 - "$work" <<'PY'
import glob, json, os, statistics, sys
runs = {}
for path in glob.glob(sys.argv[1] + '/*.txt'):
    who = os.path.basename(path).split('-')[0]
    line = [l for l in open(path) if l.startswith('{')][-1]
    for m in json.loads(line)['models']:
        runs.setdefault((m['model'], who), []).append(m)
print(f"{'model':6} {'variant':8} {'samples/s (runs)':>32} {'median':>8} {'vs old':>7} {'train/bare GF':>14}")
for model in ('small', 'heavy'):
    base = statistics.median(r['samples_per_s'] for r in runs[(model, 'old')])
    for who in ('old', 'new1', 'newall'):
        rs = runs[(model, who)]
        med = statistics.median(r['samples_per_s'] for r in rs)
        ratio = statistics.median(r['ratio_cpu'] for r in rs)
        print(f"{model:6} {who:8} {str([round(r['samples_per_s']) for r in rs]):>32} {med:8.0f} {med / base:7.2f} {ratio:14.3f}")
PY

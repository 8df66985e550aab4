#!/usr/bin/env bash
# GPT-2 124M: `actorpipe train --model gpt2` beside the same model written in libtorch (bench/libtorch_gpt2.cpp),
# on the same token file, in one run. Needs Debian's libtorch-dev (apt-get install libtorch-dev), which nothing
# else in the project needs; builds both (-j2), writes the repository's text as 1 M byte tokens
# (scripts/make_repo_tokens.py), then:
#   throughput  gpt2 at context 1,024, batch 4, fp32, one process, 2 threads: the two programs alternate,
#               ROUNDS times each, STEPS steps a process; each process's first step is warmup; the medians of
#               the other steps' seconds, tokens/s, the ratio, how long 1 M tokens take, each process's peak
#               resident memory. Then the same at the curve's model and batch (SHORT_STEPS steps a process).
#               With --pipeline ours on 2 stages (1F1B, 4 microbatches) joins the rotation; with --bf16 both
#               sides' bf16 (ours --dtype bf16, libtorch's CPU autocast) do.
#   curve       the first CURVE_STEPS steps of gpt2:context=CURVE_CONTEXT at batch CURVE_BATCH on each side,
#               AdamW lr 6e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0, warmup a tenth of the steps (20),
#               cosine to 6e-5 at the last step; both read the same windows in the same order (seed 1); a
#               table of both losses every 10 steps, the validation loss on the file's last 10%, each side's
#               median step; then ours again for SAME_INIT_STEPS steps from libtorch's initial weights
#               (--save-init, --init-from), where the two differ by rounding alone.
#
#   scripts/compare_libtorch.sh [--skip-throughput] [--skip-curve] [--pipeline] [--bf16] [--quick]
# Environment: ROUNDS (3), STEPS (3), SHORT_STEPS (8), CURVE_STEPS (200), SAME_INIT_STEPS (50), CURVE_CONTEXT
# (64), CURVE_BATCH (4), THREADS (2), OUT (build/compare_libtorch: logs and the token file); MODEL (gpt2) and
# CURVE_MODEL (gpt2:context=CURVE_CONTEXT) to check the script itself on a smaller model.
set -euo pipefail
cd "$(dirname "$0")/.."
throughput=1 curve=1 pipeline=0 bf16=0
for a in "$@"; do
  case "$a" in
    --skip-throughput) throughput=0 ;;
    --skip-curve) curve=0 ;;
    --pipeline) pipeline=1 ;;
    --bf16) bf16=1 ;;
    --quick) ROUNDS=${ROUNDS:-1} STEPS=${STEPS:-2} SHORT_STEPS=${SHORT_STEPS:-2} CURVE_STEPS=${CURVE_STEPS:-20} SAME_INIT_STEPS=${SAME_INIT_STEPS:-10} ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "compare_libtorch: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done
rounds=${ROUNDS:-3} steps=${STEPS:-3} short_steps=${SHORT_STEPS:-8} threads=${THREADS:-2}
curve_steps=${CURVE_STEPS:-200} same_init_steps=${SAME_INIT_STEPS:-50} curve_context=${CURVE_CONTEXT:-64} curve_batch=${CURVE_BATCH:-4}
out=${OUT:-build/compare_libtorch}
model=${MODEL:-gpt2} curve_model=${CURVE_MODEL:-gpt2:context=$curve_context}
if [ "$steps" -lt 2 ] || [ "$short_steps" -lt 2 ]; then
  echo "compare_libtorch: STEPS and SHORT_STEPS must be at least 2 (a process's first step is warmup)" >&2
  exit 2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target actorpipe >/dev/null
if ! grep -q "libtorch_gpt2" build/bench/Makefile 2>/dev/null && ! grep -rqs "libtorch_gpt2" build/build.ninja; then
  echo "compare_libtorch: CMake found no Torch, so bench/libtorch_gpt2 is not built: apt-get install libtorch-dev" >&2
  exit 1
fi
cmake --build build -j2 --target libtorch_gpt2 >/dev/null
ours=build/cli/actorpipe
theirs=build/bench/libtorch_gpt2
mkdir -p "$out"
tokens="$out/repo_tokens.bin"
python3 scripts/make_repo_tokens.py --output "$tokens" --tokens 1000000 >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
     "commit $(git rev-parse --short HEAD); $(date -u +%Y-%m-%d)"

# run NAME LOG COMMAND...: runs one process under /usr/bin/time, its per-step log in LOG, its peak RSS and the
# load average beside it in $out/NAME.meta.
run() {
  local name=$1 log=$2; shift 2
  local load_before; load_before=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%M" -o "$out/$name.rss" "$@" --log "$log" > "$out/$name.out" 2>&1 ||
    { echo "compare_libtorch: $name failed:" >&2; tail -5 "$out/$name.out" >&2; exit 1; }
  echo "$load_before $(cut -d' ' -f1 /proc/loadavg) $(tail -1 "$out/$name.rss")" > "$out/$name.meta"
}

common=(--data "$tokens" --threads "$threads" --optimizer adamw --lr 3e-4 --validation-windows 1)
if [ "$throughput" = 1 ]; then
  variants=("ours-fp32" "libtorch-fp32")
  [ "$pipeline" = 1 ] && variants+=("ours-2stages-fp32")
  [ "$bf16" = 1 ] && variants+=("ours-bf16" "libtorch-bf16")
  # long: GPT-2's context, STEPS steps a process; short: the curve's model, SHORT_STEPS steps a process.
  for setting in long short; do
    if [ "$setting" = long ]; then m=$model n=$steps; else m=$curve_model n=$short_steps; fi
    for r in $(seq "$rounds"); do
      for v in "${variants[@]}"; do
        dtype=${v##*-}
        case "$v" in
          ours-2stages-*) cmd=("$ours" train --stages 2 --microbatches 4 --schedule 1f1b) ;;
          ours-*) cmd=("$ours" train) ;;
          libtorch-*) cmd=("$theirs") ;;
        esac
        batch=4
        [ "$setting" = short ] && batch=$curve_batch
        run "tp-$setting-$v-$r" "$out/tp-$setting-$v-$r.jsonl" "${cmd[@]}" --model "$m" --batch-size "$batch" \
          --max-steps "$n" --dtype "$dtype" "${common[@]}"
        echo "throughput $m, round $r: $v done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
      done
    done
  done
fi

if [ "$curve" = 1 ]; then
  warmup=$(( curve_steps / 10 > 0 ? curve_steps / 10 : 1 ))
  schedule=(--model "$curve_model" --data "$tokens" --batch-size "$curve_batch"
            --optimizer adamw --lr 6e-4 --beta1 0.9 --beta2 0.95 --weight-decay 0.1 --clip-grad-norm 1
            --warmup-steps "$warmup" --lr-schedule cosine --min-lr 6e-5 --decay-steps "$curve_steps" --seed 1
            --validation-windows 64 --threads "$threads")
  run curve-ours "$out/curve-ours.jsonl" "$ours" train "${schedule[@]}" --max-steps "$curve_steps"
  echo "curve: ours done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  run curve-libtorch "$out/curve-libtorch.jsonl" "$theirs" "${schedule[@]}" --max-steps "$curve_steps" --save-init "$out/curve-init.bin"
  echo "curve: libtorch done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  # Ours again from libtorch's initial weights (llm.c's checkpoint): the same computation, rounding apart.
  # --decay-steps stays CURVE_STEPS, so every step's lr is the same as in the two runs above.
  run curve-same "$out/curve-same.jsonl" "$ours" train "${schedule[@]}" --max-steps "$same_init_steps" \
    --init-from "$out/curve-init.bin"
  echo "curve: ours from libtorch's weights done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
fi

python3 - "$out" "$throughput" "$curve" "$curve_context" "$curve_batch" "$model" "$curve_model" <<'PY'
import glob, json, os, statistics, sys
out, throughput, curve = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
context, batch = int(sys.argv[4]), int(sys.argv[5])

def steps(path):
    return [json.loads(l) for l in open(path) if l.startswith("{") and '"step"' in l and '"loss"' in l]

def meta(path):
    before, after, rss_kb = open(path).read().split()
    return float(before), float(after), int(rss_kb)

def last_json(path):
    return json.loads([l for l in open(path) if l.startswith("{")][-1])

if throughput:
    rows = {}
    for log in sorted(glob.glob(out + "/tp-*.jsonl")):
        setting, variant = os.path.basename(log)[3:].rsplit("-", 1)[0].split("-", 1)
        s = steps(log)[1:]
        m = meta(log[:-6] + ".meta")
        r = rows.setdefault((setting, variant), {"s": [], "rss": [], "load": [], "tokens": 0})
        r["s"] += [x["step_s"] for x in s]
        r["tokens"] = round(s[0]["tokens_per_s"] * s[0]["step_s"])  # a step's tokens
        r["rss"].append(m[2] / 1e6)
        r["load"] += [m[0], m[1]]
    for setting, name in (("long", sys.argv[6]), ("short", sys.argv[7])):
        if not any(k[0] == setting for k in rows):
            continue
        print(f"\nthroughput: {name}; the median over each process's steps after its first")
        print(f"{'variant':20} {'median step s':>13} {'tokens/s':>9} {'vs libtorch':>11} {'steps':>5} {'peak RSS GB':>11} {'load':>9}")
        for dtype in ("fp32", "bf16"):
            base = rows.get((setting, "libtorch-" + dtype))
            for variant in sorted(v for (t, v) in rows if t == setting and v.endswith(dtype)):
                r = rows[(setting, variant)]
                med = statistics.median(r["s"])
                ratio = statistics.median(base["s"]) / med if base else float("nan")
                print(f"{variant:20} {med:13.2f} {r['tokens'] / med:9.1f} {ratio:10.2f}x {len(r['s']):5}"
                      f" {max(r['rss']):11.1f} {min(r['load']):4.1f}-{max(r['load']):<4.1f}"
                      f"  1 M tokens: {1e6 * med / r['tokens'] / 3600:.1f} h")

if curve:
    ours, theirs = steps(out + "/curve-ours.jsonl"), steps(out + "/curve-libtorch.jsonl")
    tokens = context * batch
    print(f"\nloss curve: gpt2:context={context}, batch {batch} ({tokens} tokens a step), the same windows on both sides")
    print(f"{'step':>5} {'lr':>9} {'ours':>8} {'libtorch':>8} {'ours-lt':>8}   (mean of the 10 steps ending here: ours, libtorch)")
    n = min(len(ours), len(theirs))
    for i in list(range(0, n, 10)) + ([n - 1] if (n - 1) % 10 else []):
        a, b = ours[i]["loss"], theirs[i]["loss"]
        window = range(max(0, i - 9), i + 1)
        ma = statistics.mean(ours[j]["loss"] for j in window)
        mb = statistics.mean(theirs[j]["loss"] for j in window)
        print(f"{i:5} {ours[i]['lr']:9.2e} {a:8.4f} {b:8.4f} {a - b:+8.4f}   {ma:.4f} {mb:.4f}")
    tail = range(max(0, n - 50), n)
    print(f"mean of the last {len(tail)} steps: ours {statistics.mean(ours[j]['loss'] for j in tail):.4f}, "
          f"libtorch {statistics.mean(theirs[j]['loss'] for j in tail):.4f}")
    same = steps(out + "/curve-same.jsonl")
    print(f"\nfrom the same initial weights (libtorch's, through llm.c's checkpoint), {len(same)} steps:")
    print(f"{'step':>5} {'ours':>8} {'libtorch':>8} {'ours-lt':>8}")
    for i in sorted(set(list(range(0, min(10, len(same)))) + list(range(0, len(same), 10)) + [len(same) - 1])):
        print(f"{i:5} {same[i]['loss']:8.4f} {theirs[i]['loss']:8.4f} {same[i]['loss'] - theirs[i]['loss']:+8.4f}")
    lo, lt = last_json(out + "/curve-ours.out"), last_json(out + "/curve-libtorch.out")
    print(f"validation loss (nats/token): ours {lo['validation_loss']:.4f}, libtorch {lt['validation_loss']:.4f}")
    for name, s in (("ours", ours), ("libtorch", theirs)):
        med = statistics.median(x["step_s"] for x in s[1:])
        print(f"{name}: median step {med:.2f} s, {tokens / med:.1f} tokens/s, {n} steps in "
              f"{sum(x['step_s'] for x in s) / 60:.1f} min of steps; an epoch of 1 M tokens: "
              f"{1e6 / (tokens / med) / 3600:.1f} h")
PY

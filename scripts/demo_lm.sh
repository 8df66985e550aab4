#!/usr/bin/env bash
# Fresh machine to a small language model: install, build, train a GPT on the fortunes (bytes) on a 2-stage
# actor pipeline (ZB-H1), printing the validation loss as it falls, then sample text from its checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
checkpoint="${TMPDIR:-/tmp}/actorpipe_demo_lm.safetensors"
./build/cli/actorpipe train --model gpt:layers=4,dim=128,heads=4,context=64 --stages 2 --microbatches 4 \
  --schedule zb-h1 --batch-size 32 --optimizer adamw --lr 2e-3 --weight-decay 0.01 --epochs 1 --max-steps 1500 \
  --eval-every 250 --validation-windows 128 --checkpoint "$checkpoint" "$@"
echo "--- sampled from $checkpoint:"
./build/cli/actorpipe generate --checkpoint "$checkpoint" --prompt "The " --tokens 300 --temperature 0.8 --seed 7

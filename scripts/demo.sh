#!/usr/bin/env bash
# Fresh machine to a trained model: install, build, train Fashion-MNIST on a 4-stage actor pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
# Four blocks (a Linear and its ReLU) for four stages: no stage holds a lone activation
# (Note [whole blocks] in plan/partition.hpp).
./build/cli/actorpipe train --model 784-512-256-128-10 --stages 4 --microbatches 8 --schedule 1f1b \
  --epochs 10 --batch-size 128 --optimizer adam --lr 1e-3 "$@"

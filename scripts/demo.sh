#!/usr/bin/env bash
# Fresh machine to a trained model: install, build, train Fashion-MNIST on a 4-stage actor pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
# Eight blocks (a Linear and its ReLU; the last Linear alone) on four stages, split by measured layer time
# (Note [whole blocks] and Note [balanced split] in plan/partition.hpp): the first block (784 inputs, no input
# gradient) on stage 0, two 256-wide blocks on each other stage (the last with the output layer), so every
# stage has about the same work (train prints each stage's predicted and measured busy time). A model whose
# first layer holds most of the work (784-512-256-128-10: four blocks, one per stage whatever the method)
# leaves stage 0 about 30 times the work of stage 3.
./build/cli/actorpipe train --model 784-256-256-256-256-256-256-256-10 --stages 4 --partition time \
  --microbatches 8 --schedule 1f1b --epochs 10 --batch-size 128 --optimizer adam --lr 1e-3 "$@"

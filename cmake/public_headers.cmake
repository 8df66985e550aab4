# The public headers: what a project linking actorpipe::actorpipe may include, installed as
# <prefix>/include/actorpipe/<folder>/<name>.hpp (`#include <actorpipe/actors/pipeline.hpp>`). Everything
# else is internal and stays out of the package. A public header may include only public headers (and
# system, standard and CAF headers): tests/test_install_consumer.cpp compiles each installed header alone
# and fails on one that includes a header missing here.
set(actorpipe_public_headers
  # the pipeline facade, and the node entry point for a user's own node binary
  actors/pipeline.hpp
  actors/data_parallel_pipeline.hpp
  actors/stage_options.hpp
  actors/run_node.hpp
  # tensors and their compute
  tensor/tensor.hpp
  tensor/dtype.hpp
  tensor/bfloat16.hpp
  tensor/compute.hpp
  tensor/matmul.hpp
  tensor/nn_ops.hpp
  random/seeded_random.hpp
  # layers, the layer-kind registry (a user's own layers), Sequential, losses, optimizers
  model/layer.hpp
  model/layer_spec.hpp
  model/spec_text.hpp
  model/layer_registry.hpp
  model/block.hpp
  model/sequential.hpp
  model/loss.hpp
  model/optimizer.hpp
  model/lr_schedule.hpp
  model/linear.hpp
  model/relu.hpp
  model/gelu.hpp
  model/tanh.hpp
  model/sigmoid.hpp
  model/layer_norm.hpp
  model/rms_norm.hpp
  model/dropout.hpp
  model/token_embedding.hpp
  model/vocab_parallel.hpp
  model/position_embedding.hpp
  model/attention.hpp
  model/swiglu.hpp
  model/gpt_spec.hpp
  model/parallel_linear.hpp
  model/tensor_parallel.hpp
  model/sequence_parallel.hpp
  model/grad_clip.hpp
  model/weight_tie.hpp
  # collectives for data and tensor parallelism (across processes: collective/network_group.hpp, Note
  # [collective backends]: our ring or gloo)
  collective/process_group.hpp
  collective/local_group.hpp
  collective/network_group.hpp
  collective/ring_group.hpp
  collective/gloo_group.hpp
  collective/hierarchical_group.hpp
  collective/by_size_group.hpp
  collective/colocation.hpp
  collective/shard.hpp
  network/node_address.hpp
  # checkpoints, data, the training loop
  checkpoint/checkpoint.hpp
  checkpoint/safetensors.hpp
  checkpoint/named_tensors.hpp
  checkpoint/gpt2_weights.hpp
  data/dataset.hpp
  data/data_source.hpp
  data/open_data.hpp
  data/token_file.hpp
  data/token_windows.hpp
  data/npy.hpp
  data/csv.hpp
  data/synthetic.hpp
  data/fashion_mnist.hpp
  data/text_corpus.hpp
  tokenizer/bpe.hpp
  tokenizer/llmc_tokenizer.hpp
  training/trainer.hpp
  training/data_tensor_runner.hpp
  # the run configuration and the engine that trains it
  engine/run_config.hpp
  engine/engine.hpp
  engine/value_checks.hpp
  # schedules as data, the plan of a run, the stage event log, timeouts and the handshake's versions
  schedule/schedule.hpp
  schedule/schedule_file.hpp
  plan/stage_info.hpp
  plan/partition.hpp
  plan/microbatches.hpp
  plan/cores.hpp
  stage/event_log.hpp
  stage/stage_state.hpp
  failure/timeout.hpp
  failure/error.hpp
  actors/handshake.hpp
  network/transport_security.hpp
)

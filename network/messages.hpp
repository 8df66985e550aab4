// The messages stages and the coordinator exchange. forward_task and backward_task carry a tensor whose
// payload is serialised as one raw block, so it crosses a network quickly (toolchain notes).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/all.hpp>

#include "network/wire_format.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// A tensor travelling forward: the input of `chunk` for `microbatch` of optimizer step `step`.
// `first_sample` is the microbatch's first row in the batch (dropout masks depend on it).
// `source` is the sender's rank in the communicator (the coordinator is rank `stages`).
struct forward_task {
  int step = 0;
  int microbatch = 0;
  int chunk = 0;
  int source = 0;
  int first_sample = 0;
  tensor data;  // (rows, features)
};

// A gradient travelling backward: d loss / d (output of `chunk`) for `microbatch`.
struct backward_task {
  int step = 0;
  int microbatch = 0;
  int chunk = 0;
  int source = 0;
  int first_sample = 0;
  tensor data;  // (rows, features)
};

// The facade asks the coordinator to train one batch.
struct train_batch {
  int step = 0;
  tensor inputs;  // (samples, features)
  tensor labels;  // (samples) class indices, or (samples, outputs) regression targets
};

// A tensor sent with communicator::send (no pipeline meaning): who sent it, and the tensor.
struct tensor_message {
  int source = 0;
  tensor data;
};

// Every stage reports the end of its action list for a step: it has run all its actions.
struct stage_done {
  int stage = 0;
  int step = 0;
  int peak_stash = 0;  // the most activations this stage held at once during the step
};

// A stage could not run an action: which stage, which action, and why (the text names shapes and layers).
struct stage_failed {
  int stage = 0;
  int step = 0;
  std::string what;
};

// The coordinator's answer to a train request.
struct step_result {
  bool ok = false;
  float loss = 0.0f;
  std::string error;
  std::vector<int> peak_stash;  // per stage
};

// Named tensors (parameters of a stage), in the order of the stage's parameters().
struct named_tensors {
  std::vector<std::string> names;
  std::vector<tensor> values;
};

using begin_atom = caf::atom_constant<caf::atom("begin")>;      // coordinator -> retriever: step starts
using abort_atom = caf::atom_constant<caf::atom("abort")>;      // coordinator -> stage: drop the step
using done_atom = caf::atom_constant<caf::atom("done")>;        // processor -> retriever: task finished
using apply_atom = caf::atom_constant<caf::atom("apply")>;      // coordinator -> processor: optimizer step
using params_atom = caf::atom_constant<caf::atom("params")>;    // -> processor: its parameters
using weight_atom = caf::atom_constant<caf::atom("weight")>;    // retriever -> processor: run a W action
using take_atom = caf::atom_constant<caf::atom("take")>;        // receiver -> inbox: next tensor
using expire_atom = caf::atom_constant<caf::atom("expire")>;    // inbox -> itself: a receive timed out
using barrier_atom = caf::atom_constant<caf::atom("barrier")>;  // rank -> barrier actor
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;  // retriever -> itself: check the wait
using ok_atom = caf::atom_constant<caf::atom("ok")>;            // an acknowledgement

// Serialisation: see wire_format.hpp. Other inspectors (to_string) print the shape, not the payload.
template <class Inspector, class Task>
typename Inspector::result_type inspect_task(Inspector& f, Task& x, const char* name) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name(name), x.step, x.microbatch, x.chunk, x.source,
                                           x.first_sample); },
                            [&] { return wire_tensor(f, x.data); });
  } else {
    std::string shape = shape_string(x.data);
    return f(caf::meta::type_name(name), x.step, x.microbatch, x.chunk, x.source, x.first_sample, shape);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forward_task& x) { return inspect_task(f, x, "forward_task"); }
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, backward_task& x) {
  return inspect_task(f, x, "backward_task");
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_message& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name("tensor_message"), x.source); },
                            [&] { return wire_tensor(f, x.data); });
  } else {
    std::string shape = shape_string(x.data);
    return f(caf::meta::type_name("tensor_message"), x.source, shape);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_batch& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name("train_batch"), x.step); },
                            [&] { return wire_tensor(f, x.inputs); }, [&] { return wire_tensor(f, x.labels); });
  } else {
    std::string shapes = shape_string(x.inputs) + " " + shape_string(x.labels);
    return f(caf::meta::type_name("train_batch"), x.step, shapes);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, named_tensors& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name("named_tensors"), x.names); },
                            [&] { return wire_tensors(f, x.values); });
  } else {
    return f(caf::meta::type_name("named_tensors"), x.names);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_done& x) {
  return f(caf::meta::type_name("stage_done"), x.stage, x.step, x.peak_stash);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_failed& x) {
  return f(caf::meta::type_name("stage_failed"), x.stage, x.step, x.what);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.ok, x.loss, x.error, x.peak_stash);
}

// A stage's whole state for a checkpoint (Note [stage state] in stage_worker.hpp): its parameters under
// their global names ("3.weight"), its optimizer's state ("optimizer/3.weight.m") and the optimizer's steps.
// The processor answers state_atom with one, and loads one sent as (load_atom, stage_state).
struct stage_state {
  int stage = 0;
  std::int64_t optimizer_steps = 0;
  named_tensors tensors;
};

// The answer to (load_atom, stage_state): an empty `error` when the stage loaded it; otherwise the stage
// changed nothing and the text names the stage and the tensor (missing, unexpected or mis-shaped).
struct stage_state_loaded {
  int stage = 0;
  std::string error;
};

using state_atom = caf::atom_constant<caf::atom("state")>;  // -> processor: its stage_state
using load_atom = caf::atom_constant<caf::atom("load")>;    // -> processor: replace its state

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_state& x) {
  return f(caf::meta::type_name("stage_state"), x.stage, x.optimizer_steps, x.tensors);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_state_loaded& x) {
  return f(caf::meta::type_name("stage_state_loaded"), x.stage, x.error);
}

}  // namespace ap

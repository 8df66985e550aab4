// Every message between the actors, each registered for the network (actors/message_types.cpp). Tensors
// travel as one raw block (network/wire_format.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/all.hpp>

#include "checkpoint/named_tensors.hpp"
#include "failure/error.hpp"
#include "actors/stage_options.hpp"
#include "model/optimizer.hpp"
#include "failure/timeout.hpp"
#include "network/wire_format.hpp"
#include "schedule/schedule.hpp"
#include "stage/event_log.hpp"
#include "stage/stage_state.hpp"
#include "stage/tasks.hpp"
#include "tensor/tensor.hpp"

namespace ap {

// retriever -> processor: run the forward (F) that consumes `task`.
struct run_forward {
  forward_task task;
};

// retriever -> processor: run the backward of `task` as `kind`: full (B) or input-gradient (I, keeps the cache for W).
struct run_backward {
  op kind = op::backward;
  backward_task task;
};

// retriever -> processor: run the weight-gradient backward (W) of (microbatch, chunk).
struct run_weight {
  std::uint64_t step = 0;
  int microbatch = 0;
  int chunk = 0;
};

// retriever -> processor: start the data-parallel reduction of a chunk's gradients (Note [gradient reduction]).
struct run_reduce {
  std::uint64_t step = 0;
  int chunk = 0;
};

// processor -> sender: deliver `task` to the communicator rank `destination` (a stage, or the coordinator).
struct deliver_forward {
  int destination = 0;
  forward_task task;
};
struct deliver_backward {
  int destination = 0;
  backward_task task;
};

// processor -> retriever: a task finished, with the stage's peak stash, and on failure its code.
struct task_done {
  std::uint64_t step = 0;
  int peak_stash = 0;
  std::string error;
  std::uint64_t peak_stash_bytes = 0;
  error_code code = error_code::none;
};

// The facade: train one batch.
struct train_batch {
  std::uint64_t step = 0;
  tensor inputs;  // (samples, features)
  tensor labels;  // (samples) class indices, or (samples, outputs) regression targets
  // A replica's share of a larger batch: its first sample's global index (dropout masks follow it) and the whole
  // batch's rows (Note [loss scaling]); batch_rows 0: these labels' own.
  std::int64_t first_sample = 0;
  std::int64_t batch_rows = 0;
};

// A stage's sum of squared gradients for global clipping (Note [global gradient clipping]), or why not.
struct gradient_norm {
  double square_sum = 0.0;
  std::string error;
  error_code code = error_code::none;
};

// A tensor sent with communicator::send (no pipeline meaning).
struct tensor_message {
  int source = 0;
  tensor data;
};

// A stage finished its action list for the step.
struct stage_done {
  int stage = 0;
  std::uint64_t step = 0;
  int peak_stash = 0;  // the most activations held at once in the step
  std::uint64_t peak_stash_bytes = 0;  // their bytes
  // A node's stage sends its step's events, in microseconds on the node's steady clock; empty in-process
  // (Note [events from nodes]).
  std::vector<stage_event> events{};
};

// A stage could not run an action: which stage, which action, and why (Note [errors as codes]).
struct stage_failed {
  int stage = 0;
  std::uint64_t step = 0;
  std::string what;
  error_code code = error_code::internal;
};

// The coordinator's answer to a train request.
struct step_result {
  bool ok = false;
  float loss = 0.0f;
  std::string error;
  std::vector<int> peak_stash;  // per stage
  std::vector<float> microbatch_losses{};  // each microbatch's mean loss (Note [divergence])
  std::vector<std::uint64_t> peak_stash_bytes{};  // per stage
  error_code code = error_code::none;  // Note [errors as codes]; none when ok
};

// A failed step: its code and its text.
inline step_result failed_step(error_code code, std::string what) {
  step_result r;
  r.code = code;
  r.error = std::move(what);
  return r;
}

// A caf::error keeping its code: context element 0 is the text, element 1 the code.
inline caf::error coded_error(error_code code, const std::string& text) {
  return caf::make_error(caf::sec::runtime_error, text, static_cast<std::uint8_t>(code));
}
// The code of a coded_error; internal for any other caf::error.
inline error_code code_in(const caf::error& e) {
  if (!e) return error_code::internal;  // CAF 0.17 gives no error a context
  const caf::message& context = e.context();
  if (context.size() == 2 && context.match_element<std::string>(0) && context.match_element<std::uint8_t>(1)) {
    const auto number = context.get_as<std::uint8_t>(1);
    if (number < static_cast<std::uint8_t>(error_code::count)) return static_cast<error_code>(number);
  }
  return error_code::internal;
}
// Prints a coded_error as its text; any other as CAF does.
inline std::string coded_error_string(const caf::error& e) {
  if (!e) return caf::to_string(e);
  const caf::message& context = e.context();
  if (context.size() == 2 && context.match_element<std::string>(0) && context.match_element<std::uint8_t>(1))
    return caf::to_string(caf::make_error(caf::sec::runtime_error, context.get_as<std::string>(0)));
  return caf::to_string(e);
}

using clock_atom = caf::atom_constant<caf::atom("clock")>;  // -> node
using machine_atom = caf::atom_constant<caf::atom("machine")>;  // -> node
using echo_atom = caf::atom_constant<caf::atom("echo")>;  // -> node
using link_echo_atom = caf::atom_constant<caf::atom("linkecho")>;  // -> node
// Step numbers are std::uint64_t everywhere.
using begin_atom = caf::atom_constant<caf::atom("begin")>;    
using abort_atom = caf::atom_constant<caf::atom("abort")>;    
using apply_atom = caf::atom_constant<caf::atom("apply")>;    
using norm_atom = caf::atom_constant<caf::atom("norm")>;      
using tied_atom = caf::atom_constant<caf::atom("tied")>;      
using ring_atom = caf::atom_constant<caf::atom("ring")>;  // -> processor: its group endpoints / connect them
using params_atom = caf::atom_constant<caf::atom("params")>;  
using take_atom = caf::atom_constant<caf::atom("take")>;      
using expire_atom = caf::atom_constant<caf::atom("expire")>;  // inbox -> itself, a receive: timed out
using withdraw_atom = caf::atom_constant<caf::atom("withdraw")>;  // receiver -> inbox, barrier: cancel a receive
using barrier_atom = caf::atom_constant<caf::atom("barrier")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;  // retriever, coordinator -> itself: check a wait
using ok_atom = caf::atom_constant<caf::atom("ok")>;

// Serialisation: network/wire_format.hpp. Other inspectors (to_string) print the shape, not the payload.
template <class Inspector, class Task>
typename Inspector::result_type inspect_task(Inspector& f, Task& x, const char* name) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return caf::error::eval([&] { return f(caf::meta::type_name(name), x.step, x.microbatch, x.chunk, x.source,
                                           x.first_sample, x.ticket); },
                            [&] { return wire_tensor(f, x.data); });
  } else {
    std::string shape = shape_string(x.data);
    return f(caf::meta::type_name(name), x.step, x.microbatch, x.chunk, x.source, x.first_sample, x.ticket, shape);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, forward_task& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    // Labels first, so the activation stays the last raw block (read in place).
    return caf::error::eval([&] { return f(x.batch_rows); }, [&] { return wire_tensor(f, x.labels); },
                            [&] { return inspect_task(f, x, "forward_task"); });
  } else {
    return inspect_task(f, x, "forward_task");
  }
}
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
    return caf::error::eval([&] { return f(caf::meta::type_name("train_batch"), x.step, x.first_sample, x.batch_rows); },
                            [&] { return wire_tensor(f, x.inputs); }, [&] { return wire_tensor(f, x.labels); });
  } else {
    std::string shapes = shape_string(x.inputs) + " " + shape_string(x.labels);
    return f(caf::meta::type_name("train_batch"), x.step, shapes, x.first_sample, x.batch_rows);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_norm& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {  // wire: the code's number; printed: its name
    return f(caf::meta::type_name("gradient_norm"), x.square_sum, x.error, x.code);
  } else {
    std::string code = error_code_name(x.code);
    return f(caf::meta::type_name("gradient_norm"), x.square_sum, x.error, code);
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
typename Inspector::result_type inspect(Inspector& f, stage_event& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("stage_event"), x.time_us, x.stage, x.kind, x.task, x.step, x.microbatch, x.chunk);
  } else {  // printed: the op's letter
    std::string what = std::string(1, op_letter(x.task)) + (x.kind == event_kind::arrive  ? " arrive"
                                                            : x.kind == event_kind::start ? " start"
                                                                                          : " finish");
    return f(caf::meta::type_name("stage_event"), x.time_us, x.stage, what, x.step, x.microbatch, x.chunk);
  }
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_done& x) {
  return f(caf::meta::type_name("stage_done"), x.stage, x.step, x.peak_stash, x.peak_stash_bytes, x.events);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_failed& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("stage_failed"), x.stage, x.step, x.what, x.code);
  } else {
    std::string code = error_code_name(x.code);
    return f(caf::meta::type_name("stage_failed"), x.stage, x.step, x.what, code);
  }
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("step_result"), x.ok, x.loss, x.error, x.peak_stash, x.microbatch_losses,
             x.peak_stash_bytes, x.code);
  } else {
    std::string code = error_code_name(x.code);
    return f(caf::meta::type_name("step_result"), x.ok, x.loss, x.error, x.peak_stash, x.microbatch_losses,
             x.peak_stash_bytes, code);
  }
}

// Answer to (load_atom, stage_state): empty `error` when loaded; otherwise nothing changed and the text names
// the stage and tensor.
struct stage_state_loaded {
  int stage = 0;
  std::string error;
};

using state_atom = caf::atom_constant<caf::atom("state")>;
using load_atom = caf::atom_constant<caf::atom("load")>;  

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_state& x) {
  return f(caf::meta::type_name("stage_state"), x.stage, x.optimizer_steps, x.tensors);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_state_loaded& x) {
  return f(caf::meta::type_name("stage_state_loaded"), x.stage, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_forward& x) {
  return f(caf::meta::type_name("run_forward"), x.task);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_backward& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("run_backward"), x.kind, x.task);
  } else {
    std::string kind = name_of(x.kind).word;
    return f(caf::meta::type_name("run_backward"), kind, x.task);
  }
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_weight& x) {
  return f(caf::meta::type_name("run_weight"), x.step, x.microbatch, x.chunk);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_reduce& x) {
  return f(caf::meta::type_name("run_reduce"), x.step, x.chunk);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, deliver_forward& x) {
  return f(caf::meta::type_name("deliver_forward"), x.destination, x.task);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, deliver_backward& x) {
  return f(caf::meta::type_name("deliver_backward"), x.destination, x.task);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_done& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("task_done"), x.step, x.peak_stash, x.error, x.peak_stash_bytes, x.code);
  } else {
    std::string code = error_code_name(x.code);
    return f(caf::meta::type_name("task_done"), x.step, x.peak_stash, x.error, x.peak_stash_bytes, code);
  }
}

// The wire form of a stage_setup, coordinator -> node: layers as spec texts plus weights, and the stage's options
// (Note [stage options]). The node answers with the stage's retriever, processor and sender.
struct stage_spec {
  int stage = 0;
  int stages = 1;
  int total_chunks = 1;
  std::vector<int> chunk_ids;
  std::vector<std::vector<std::string>> layer_specs;  // per chunk: each layer's spec() text
  std::vector<std::uint64_t> first_layer;  // per chunk: its first layer's global index
  named_tensors weights;  // by global name
  std::uint8_t recompute = 0;  // Note [recomputation]
  std::vector<action> actions;  // this stage's row of the schedule
  stage_options options;
  stage_place place;
};

// A schedule action travels as its fields (printed as "1F0" by other inspectors).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, action& x) {
  if constexpr (is_wire_inspector<Inspector>::value) {
    return f(caf::meta::type_name("action"), x.stage, x.kind, x.microbatch, x.chunk);
  } else {
    std::string text = to_string(x);
    return f(caf::meta::type_name("action"), x.stage, text);
  }
}

// The one inspect of each part of a stage's settings (Note [stage options]); enums travel as codes.
inline std::string to_string(dtype x) { return dtype_name(x); }
inline std::string to_string(collective_backend x) { return collective_backend_name(x); }
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lr_schedule& x) {
  return f(caf::meta::type_name("lr_schedule"), x.kind, x.warmup_steps, x.decay_steps, x.min_lr, x.step_size, x.gamma);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_config& x) {
  return f(caf::meta::type_name("optimizer_config"), x.kind, x.lr, x.momentum, x.nesterov, x.beta1, x.beta2, x.eps,
           x.weight_decay, x.schedule);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_options& x) {
  return f(caf::meta::type_name("stage_options"), x.optimizer, x.timeout, x.compute_dtype, x.tensor_parallel, x.threads,
           x.replica, x.replicas, x.collectives, x.data_parallel_key, x.split_vocabulary,
           x.sequence_parallel);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_slot& x) {
  return f(caf::meta::type_name("node_slot"), x.first_rank, x.node_ranks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, colocated_rank& x) {
  return f(caf::meta::type_name("colocated_rank"), x.local_rank, x.local_size, x.process, x.processes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_place& x) {
  return f(caf::meta::type_name("stage_place"), x.slot, x.data_parallel_host, x.data_parallel_place, x.link_host,
           x.report_events);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_spec& x) {
  return f(caf::meta::type_name("stage_spec"), x.stage, x.stages, x.total_chunks, x.chunk_ids, x.layer_specs,
           x.first_layer, x.weights, x.recompute, x.actions, x.options, x.place);
}

}  // namespace ap

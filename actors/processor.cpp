// The processor of a stage: runs one task at a time, hands the result to the sender and tells the retriever it
// is free. Detached: it computes.
#include "actors/pipeline_actors.hpp"
#include "collective/ring_group.hpp"
#include "tensor/compute.hpp"

namespace ap {
namespace {

struct processor_state {
  processor_config config;
  std::unique_ptr<stage_compute> compute;
  std::uint64_t first_live_step = 0;  // Note [tasks after an abort]
  static inline const char* name = "processor";
};

using processor_self = processor_actor::stateful_pointer<processor_state>;

// The retriever that handed over the task (Note [typed stage interfaces]).
retriever_actor retriever_of(processor_self self) { return caf::actor_cast<retriever_actor>(self->current_sender()); }

tensor to_transfer_dtype(tensor t, dtype type) { return t.type() == type ? t : t.astype(type); }

// Runs one task: records start and finish, turns an exception into an error text and code for the retriever.
// Note [tasks after an abort]: a task and the coordinator's abort can arrive in either order; a task of an
// aborted step is dropped (it would leave a stashed activation behind), and the retriever still told.
template <class Work>
void run_task(processor_self self, op kind, std::uint64_t step, int microbatch, int chunk, Work work) {
  auto& st = self->state;
  if (step < st.first_live_step) {
    self->send(retriever_of(self), task_done{step, st.compute->peak_stashed(), {}, st.compute->peak_stashed_bytes()});
    return;
  }
  if (st.config.log) st.config.log->record(st.config.stage, event_kind::start, kind, step, microbatch, chunk);
  task_done done{step, 0, {}};
  try {
    work();
  } catch (const std::exception& e) {
    done.error = e.what();
    done.code = code_of(e);
  }
  if (st.config.log) st.config.log->record(st.config.stage, event_kind::finish, kind, step, microbatch, chunk);
  done.peak_stash = st.compute->peak_stashed();
  done.peak_stash_bytes = st.compute->peak_stashed_bytes();
  self->send(retriever_of(self), std::move(done));
}

// A task whose tensor came beside its message takes it from the inbox first, so the wait is not counted as
// compute (Note [activations on data links]).
template <class Task>
std::exception_ptr take_beside(processor_self self, Task& t) {
  auto& st = self->state;
  if (t.ticket == 0 || t.step < st.first_live_step) return nullptr;
  try {
    if (!st.config.inbox) throw std::logic_error("stage " + std::to_string(st.config.stage) + " has no activation inbox");
    t.data = st.config.inbox->take(t.ticket);
    t.ticket = 0;
  } catch (const std::exception&) {
    return std::current_exception();
  }
  return nullptr;
}

processor_actor::behavior_type processor(processor_self self, processor_config config,
                                         std::unique_ptr<stage_compute> compute) {
  self->state.config = std::move(config);
  self->state.compute = std::move(compute);
  return {
      [=](begin_atom, std::uint64_t step) {
        self->state.compute->reset_peak();
        if (self->state.config.inbox) self->state.config.inbox->forget_before(step);
      },
      [=](run_forward& r) {
        const std::exception_ptr missing = take_beside(self, r.task);
        const forward_task& t = r.task;
        run_task(self, op::forward, t.step, t.microbatch, t.chunk, [&] {
          if (missing) std::rethrow_exception(missing);
          auto& st = self->state;
          const int next = t.chunk + 1;
          const int destination = next < st.config.total_chunks ? stage_of_chunk(next, st.config.stages)
                                                                : coordinator_rank(st.config.stages);
          forward_task out{t.step, t.microbatch, next, st.config.stage, t.first_sample, tensor{}};
          if (next == st.config.total_chunks && st.compute->splits_vocabulary()) {
            // The logits stay on the ranks; the coordinator gets the loss (Note [loss in the last stage]).
            out.data = tensor::from_shape({1});
            out.data.data()[0] = st.compute->forward_loss(t.step, t.microbatch, t.chunk, t.first_sample, t.data, t.labels,
                                                          static_cast<std::size_t>(t.batch_rows));
            return self->send(st.config.sender, deliver_forward{destination, std::move(out)});
          }
          out.data = st.compute->forward(t.step, t.microbatch, t.chunk, t.first_sample, t.data);
          out.labels = t.labels;
          out.batch_rows = t.batch_rows;
          // Activations travel in the compute dtype, the model's output in float32 (Note [compute dtype]).
          if (next < st.config.total_chunks) out.data = to_transfer_dtype(std::move(out.data), st.config.transfer_dtype);
          self->send(st.config.sender, deliver_forward{destination, std::move(out)});
        });
      },
      [=](run_backward& r) {
        const std::exception_ptr missing = take_beside(self, r.task);
        const backward_task& t = r.task;
        run_task(self, r.kind, t.step, t.microbatch, t.chunk, [&] {
          if (missing) std::rethrow_exception(missing);
          auto& st = self->state;
          tensor dx = r.kind == op::backward_input ? st.compute->backward_input(t.microbatch, t.chunk, t.data)
                                                   : st.compute->backward(t.microbatch, t.chunk, t.data);
          if (t.chunk == 0) return;  // nobody needs it
          dx = to_transfer_dtype(std::move(dx), st.config.transfer_dtype);
          const int previous = t.chunk - 1;
          self->send(st.config.sender,
                     deliver_backward{stage_of_chunk(previous, st.config.stages),
                                      backward_task{t.step, t.microbatch, previous, st.config.stage, t.first_sample,
                                                    std::move(dx)}});
        });
      },
      [=](const run_weight& w) {
        run_task(self, op::backward_weight, w.step, w.microbatch, w.chunk,
                 [&] { self->state.compute->backward_weight(w.microbatch, w.chunk); });
      },
      [=](norm_atom, std::uint64_t) -> gradient_norm {
        gradient_norm answer;
        try {
          answer.square_sum = self->state.compute->gradient_square_sum();
        } catch (const std::exception& e) {
          answer.error = "stage " + std::to_string(self->state.config.stage) + ": " + e.what();
          answer.code = code_of(e);
        }
        return answer;
      },
      [=](tied_atom, std::uint64_t, const std::string& name) -> caf::result<named_tensors> {
        try {
          return named_tensors{{name}, {self->state.compute->tied_gradient(name)}};
        } catch (const std::exception& e) {
          return coded_error(code_of(e), "stage " + std::to_string(self->state.config.stage) + ": " + e.what());
        }
      },
      [=](tied_atom, std::uint64_t, const named_tensors& other) -> caf::result<ok_atom> {
        try {
          for (std::size_t i = 0; i < other.names.size(); ++i)
            self->state.compute->add_tied_gradient(other.names[i], other.values[i]);
        } catch (const std::exception& e) {
          return coded_error(code_of(e), "stage " + std::to_string(self->state.config.stage) + ": " + e.what());
        }
        return ok_atom::value;
      },
      [=](const run_reduce& r) {  // Note [gradient reduction]
        run_task(self, op::reduce_grad, r.step, all_microbatches, r.chunk,
                 [&] { self->state.compute->reduce_gradients(r.chunk); });
      },
      [=](apply_atom, std::uint64_t, float clip_factor) -> caf::result<ok_atom> {
        try {
          self->state.compute->apply_optimizer(clip_factor);
        } catch (const std::exception& e) {
          return coded_error(code_of(e), e.what());
        }
        return ok_atom::value;
      },
      [=](abort_atom, std::uint64_t step) {
        auto& st = self->state;
        st.first_live_step = std::max(st.first_live_step, step + 1);
        st.compute->abort();
      },
      [=](params_atom) -> named_tensors {
        return self->state.compute->whole_parameters();
      },
      [=](state_atom) -> stage_state { return self->state.compute->export_state(); },
      // This stage's group endpoints, one per tensor-parallel rank (Note [data-parallel nodes]).
      [=](ring_atom) -> std::vector<std::string> {  // strings: a CAF built-in type
        std::vector<std::string> endpoints;
        for (const auto& r : self->state.config.rings) endpoints.push_back(r->endpoint());
        return endpoints;
      },
      // ... and their connection (addresses[r * replicas + d]); blocks until all answered or the timeout. Answers
      // "" or why not.
      [=](ring_atom, const std::vector<std::string>& addresses) -> std::string {
        auto& rings = self->state.config.rings;
        try {
          if (rings.empty() || addresses.size() % rings.size() != 0)
            throw std::invalid_argument(std::to_string(addresses.size()) + " addresses for " +
                                        std::to_string(rings.size()) + " data-parallel groups");
          const std::size_t replicas = addresses.size() / rings.size();
          for (std::size_t r = 0; r < rings.size(); ++r) {
            rings[r]->connect(std::vector<std::string>(addresses.begin() + static_cast<long>(r * replicas),
                                                       addresses.begin() + static_cast<long>((r + 1) * replicas)));
          }
        } catch (const std::exception& e) {
          return "stage " + std::to_string(self->state.config.stage) + ": " + e.what();
        }
        return {};
      },
      [=](load_atom, const stage_state& state) -> stage_state_loaded {
        stage_state_loaded answer{self->state.config.stage, {}};
        try {
          self->state.compute->import_state(state);
        } catch (const std::exception& e) {
          answer.error = e.what();
        }
        return answer;
      },
  };
}

}  // namespace

processor_actor spawn_processor(caf::actor_system& system, processor_config config,
                                std::unique_ptr<stage_compute> compute) {
  return system.spawn<caf::detached>(processor, std::move(config), std::move(compute));
}

}  // namespace ap

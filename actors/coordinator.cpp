// The coordinator: splits a batch into microbatches, feeds the first stage, computes each microbatch's
// loss and gradient as soon as the last stage returns its output, and commits the step only when every
// stage has finished its actions (then every stage applies its optimizer; otherwise none does).
#include <memory>

#include "actors/actor_communicator.hpp"
#include "actors/node.hpp"
#include "actors/pipeline_actors.hpp"
#include "network/port_probe.hpp"
#include "plan/microbatches.hpp"
#include "model/loss.hpp"

namespace ap {
namespace {

struct coordinator_state {
  coordinator_config config;
  std::unique_ptr<actor_communicator> comm;
  std::unique_ptr<loss> loss_fn;
  // The step in flight.
  int step = -1;
  bool active = false;
  caf::response_promise promise;
  std::vector<tensor> labels;  // per microbatch
  std::vector<int> first_sample;
  std::size_t batch_size = 0;
  double loss_sum = 0.0;
  std::vector<float> microbatch_losses;  // each microbatch's mean loss, for the trainer's divergence check
  int outputs = 0, stages_done = 0, stages_applied = 0;
  std::vector<int> peak_stash;
  bool broken = false;  // a stage actor died: no further step can run
  std::string broken_reason;
  static inline const char* name = "coordinator";
};

using coordinator_actor = caf::stateful_actor<coordinator_state>;

void finish(coordinator_actor* self, step_result r) {
  auto& st = self->state;
  st.active = false;
  st.labels.clear();
  st.promise.deliver(std::move(r));
}

// The step fails: every stage drops it (caches, gradients, queued tasks), nothing is applied.
void fail(coordinator_actor* self, const std::string& what) {
  auto& st = self->state;
  if (!st.active) return;
  for (auto& r : st.config.retrievers) self->send(r, abort_atom::value, st.step);
  for (auto& p : st.config.processors) self->send(p, abort_atom::value, st.step);
  finish(self, step_result{false, 0.0f, "step " + std::to_string(st.step) + ": " + what, {}});
}

void commit(coordinator_actor* self) {
  auto& st = self->state;
  const int step = st.step;
  for (std::size_t i = 0; i < st.config.processors.size(); ++i)
    self->request(st.config.processors[i], st.config.timeout, apply_atom::value, step)
        .then(
            [=](ok_atom) {
              auto& s = self->state;
              if (!s.active || s.step != step) return;
              if (++s.stages_applied == s.config.stages)
                finish(self, step_result{true, static_cast<float>(s.loss_sum), {}, s.peak_stash, s.microbatch_losses});
            },
            [=](caf::error& e) {
              // Other stages may have applied this step already: no later step may run on mixed weights.
              auto& s = self->state;
              if (!s.broken) {
                s.broken = true;
                s.broken_reason = "stage " + std::to_string(i) + " did not confirm the optimizer step of step " +
                                  std::to_string(step) + " (" + caf::to_string(e) +
                                  "); the stages may disagree, rebuild the pipeline from a checkpoint";
              }
              fail(self, "applying the optimizer: " + s.broken_reason);
            });
}

// "stage 1 on node 127.0.0.1:4242 is gone (...)": which stage a stopped actor belonged to, where it ran, and
// why it stopped. A lost connection looks the same to CAF for a killed node and a stopped (SIGSTOP) or frozen
// one, whose heartbeats stopped: a probe of the node's port tells them apart (network/port_probe.hpp).
std::string describe_stopped(const coordinator_config& c, const caf::down_msg& m) {
  std::string who = "a stage actor", place;
  for (std::size_t s = 0; s < c.retrievers.size(); ++s)
    if (m.source == c.retrievers[s].address() || m.source == c.processors.at(s).address()) {
      who = "stage " + std::to_string(s);
      if (s < c.stage_places.size() && !c.stage_places[s].empty()) place = c.stage_places[s];
    }
  if (!place.empty()) who += " on " + place;
  const std::string reason = caf::to_string(m.reason);
  if (m.reason != caf::exit_reason::remote_link_unreachable) return who + " stopped (" + reason + ")";
  port_state port = port_state::unknown;
  if (place.rfind("node ", 0) == 0) try {
      const node_address a = parse_node_address(place.substr(5));
      port = probe_port(a.host, a.port, std::chrono::milliseconds(300));
    } catch (const std::exception&) {
    }
  return who + lost_connection_text(port, reason);
}

caf::behavior coordinator(coordinator_actor* self, coordinator_config config) {
  self->state.config = std::move(config);
  self->state.loss_fn = make_loss(self->state.config.loss);
  for (auto& a : self->state.config.retrievers) self->monitor(a);
  for (auto& a : self->state.config.processors) self->monitor(a);
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    st.broken = true;
    st.broken_reason = describe_stopped(st.config, m);
    fail(self, st.broken_reason);
  });
  return {
      [=](setup_atom, const std::vector<caf::actor>& endpoints) {
        auto& st = self->state;
        st.comm = std::make_unique<actor_communicator>(self->system(), coordinator_rank(st.config.stages), endpoints,
                                                       caf::actor{}, st.config.timeout);
      },
      [=](train_batch& batch) -> caf::result<step_result> {
        auto& st = self->state;
        const int step = batch.step;
        const tensor& inputs = batch.inputs;
        const tensor& labels = batch.labels;
        if (st.broken) return step_result{false, 0.0f, "step " + std::to_string(step) + ": " + st.broken_reason, {}};
        if (st.active) return step_result{false, 0.0f, "step " + std::to_string(step) + ": a step is in flight", {}};
        std::vector<microbatch_range> split;
        try {
          split = split_batch(inputs, labels, st.config.microbatches);
        } catch (const std::exception& e) {
          return step_result{false, 0.0f, "step " + std::to_string(step) + ": " + e.what(), {}};
        }
        st.promise = self->make_response_promise();
        st.step = step;
        st.active = true;
        st.batch_size = rows(inputs);
        st.loss_sum = 0.0;
        st.microbatch_losses.assign(split.size(), 0.0f);
        st.outputs = st.stages_done = st.stages_applied = 0;
        st.peak_stash.assign(static_cast<std::size_t>(st.config.stages), 0);
        st.labels.clear();
        st.first_sample.clear();
        // Note [enqueue before begin]: the first stage receives all its microbatches before the step
        // begins, so its queue holds them all when it starts (the seed's walkthrough).
        for (std::size_t i = 0; i < split.size(); ++i) {
          const auto& r = split[i];
          st.labels.push_back(slice_rows(labels, r.begin, r.end));
          st.first_sample.push_back(static_cast<int>(r.begin));
          st.comm->send_forward(forward_task{step, static_cast<int>(i), 0, 0, static_cast<int>(r.begin),
                                             slice_rows(inputs, r.begin, r.end)},
                                stage_of_chunk(0, st.config.stages));
        }
        for (auto& r : st.config.retrievers) self->send(r, begin_atom::value, step);
        return st.promise;
      },
      [=](forward_task& out) {  // a microbatch's output: its loss and gradient, at once
        auto& st = self->state;
        if (!st.active || out.step != st.step) return;
        const auto mb = static_cast<std::size_t>(out.microbatch);
        try {
          const float share = st.loss_fn->compute_loss(out.data, st.labels.at(mb), st.batch_size);
          st.loss_sum += share;
          st.microbatch_losses.at(mb) = share * static_cast<float>(st.batch_size) / static_cast<float>(rows(out.data));
          tensor grad = st.loss_fn->compute_gradient(out.data, st.labels[mb], st.batch_size);
          const int last = st.config.total_chunks - 1;
          st.comm->send_backward(backward_task{st.step, out.microbatch, last, 0, st.first_sample[mb], std::move(grad)},
                                 stage_of_chunk(last, st.config.stages));
          ++st.outputs;
        } catch (const std::exception& e) {
          fail(self, "loss of microbatch " + std::to_string(out.microbatch) + ": " + e.what());
        }
      },
      [=](stage_done& d) {
        auto& st = self->state;
        if (!st.active || d.step != st.step) return;
        st.peak_stash.at(static_cast<std::size_t>(d.stage)) = d.peak_stash;
        if (++st.stages_done == st.config.stages) commit(self);
      },
      [=](stage_failed& f) {
        if (f.step == self->state.step) fail(self, f.what);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& system, coordinator_config config) {
  return system.spawn(coordinator, std::move(config));
}

}  // namespace ap

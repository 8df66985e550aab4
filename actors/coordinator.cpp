// The coordinator: splits a batch into microbatches, feeds the first stage, computes each loss and gradient as
// the last stage's outputs return, and commits the step only when every stage finished (all apply, or none).
#include <algorithm>
#include <memory>
#include <thread>

#include "actors/actor_communicator.hpp"
#include "actors/node.hpp"
#include "actors/pipeline_actors.hpp"
#include "actors/recovery.hpp"
#include "actors/send_beside.hpp"
#include "network/guarded_transport.hpp"
#include "network/port_probe.hpp"
#include "plan/microbatches.hpp"
#include "model/grad_clip.hpp"
#include "model/loss.hpp"

namespace ap {
namespace {

struct coordinator_state {
  coordinator_config config;
  std::unique_ptr<actor_communicator> comm;
  std::unique_ptr<loss> loss_fn;
  std::unique_ptr<activation_outbox> outbox;
  std::uint64_t step = 0;  // meaningful while active
  bool active = false;
  caf::typed_response_promise<step_result> promise;
  std::vector<tensor> labels;  // per microbatch
  std::vector<int> first_sample;
  std::size_t batch_size = 0;
  double loss_sum = 0.0;
  std::vector<float> microbatch_losses;
  std::vector<tensor> gradients;  // held for config.whole_batch_backward
  double step_begin_us = 0.0;  // Note [events from nodes]
  std::vector<stage_event> node_events;  // this step's, on our clock
  int outputs = 0, stages_done = 0, stages_applied = 0;
  std::vector<int> peak_stash;
  std::vector<std::uint64_t> peak_stash_bytes;
  std::vector<bool> applied;
  bool applying = false;      // apply requests are out
  bool norming = false;       // gradient norm requests are out (Note [global gradient clipping])
  bool tying = false;         // tied gradients are being swapped (Note [tied gradients across stages])
  std::vector<named_tensors> tied;
  std::size_t tied_pending = 0;
  std::vector<double> norms;  // per stage; -1 until answered
  std::chrono::steady_clock::time_point apply_since;
  bool timer_armed = false;  // Note [one timer per retriever]
  bool broken = false;  // a stage actor died: no further step can run
  std::string broken_reason;
  error_code broken_code = error_code::none;
  static inline const char* name = "coordinator";
};

using coordinator_self = coordinator_actor::stateful_pointer<coordinator_state>;

double steady_now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Note [events from nodes]: a node's stage sends its step's events with stage_done on the node's steady clock.
// They move to our clock by the node's offset (estimate_clock_offset), corrected by any excess outside the step's
// begin and stage_done's arrival, and then enter the pipeline's log as if recorded here.
void take_node_events(coordinator_state& st, stage_done& d) {
  const auto s = static_cast<std::size_t>(d.stage);
  if (!st.config.log || d.events.empty() || s >= st.config.clock_offset_us.size()) return;
  double& offset = st.config.clock_offset_us[s];
  const double arrived = steady_now_us();
  double earliest = d.events.front().time_us, latest = earliest;
  for (const auto& e : d.events) earliest = std::min(earliest, e.time_us), latest = std::max(latest, e.time_us);
  if (latest - offset > arrived) offset += latest - offset - arrived;  // too early a clock
  else if (earliest - offset < st.step_begin_us) offset -= st.step_begin_us - (earliest - offset);  // too late a clock
  const double to_log = st.config.log->epoch_us();
  for (auto& e : d.events) {
    if (e.step != st.step) continue;  // an aborted step's
    e.time_us = e.time_us - offset - to_log;
    st.node_events.push_back(e);
  }
}

// Once every stage is done: the nodes' events in time order.
void log_node_events(coordinator_state& st) {
  std::stable_sort(st.node_events.begin(), st.node_events.end(),
                   [](const stage_event& a, const stage_event& b) { return a.time_us < b.time_us; });
  for (const auto& e : st.node_events) st.config.log->ingest(e);
  st.node_events.clear();
}

void finish(coordinator_self self, step_result r) {
  auto& st = self->state;
  st.active = false;
  st.labels.clear();
  st.gradients.clear();
  st.node_events.clear();
  st.promise.deliver(std::move(r));
}

// The step fails: every stage drops it, nothing is applied. `code` decides (Note [errors as codes]).
void fail(coordinator_self self, error_code code, const std::string& what) {
  auto& st = self->state;
  if (!st.active) return;
  for (auto& r : st.config.retrievers) self->send(r, abort_atom::value, st.step);
  for (auto& p : st.config.processors) self->send(p, abort_atom::value, st.step);
  finish(self, failed_step(code, "step " + std::to_string(st.step) + ": " + what));
}

// Other stages may have applied this step: no later step may run on mixed weights. The code is `collective` for
// a peer's abandoned step, `lost_node`/`lost_peer` for a lost node (recovery restores all), else `broken`.
void apply_failed(coordinator_self self, std::size_t stage, std::uint64_t step, const std::string& why, error_code cause) {
  auto& s = self->state;
  if (!s.broken) {
    s.broken = true;
    s.broken_code = cause == error_code::collective || restart_recovers(cause) ? cause : error_code::broken;
    s.broken_reason = "stage " + std::to_string(stage) + " did not confirm the optimizer step of step " +
                      std::to_string(step) + " (" + why + "); the stages may disagree, rebuild the pipeline from a checkpoint";
  }
  s.applying = false;
  fail(self, s.broken_code, "applying the optimizer: " + s.broken_reason);
}

void arm_timer(coordinator_self self, std::chrono::steady_clock::duration after) {
  self->state.timer_armed = true;
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(after) + std::chrono::milliseconds(1),
                     timeout_atom::value, std::uint64_t{0}, self->state.step);
}

// One timer checks all requests: a CAF 0.17 request timeout stays in the actor clock even when answered
// (Note [one timer per retriever]).
void apply(coordinator_self self, float clip_factor) {
  auto& st = self->state;
  const std::uint64_t step = st.step;
  st.applied.assign(st.config.processors.size(), false);
  st.applying = true;
  st.apply_since = std::chrono::steady_clock::now();
  if (!st.timer_armed) arm_timer(self, st.config.timeout);
  for (std::size_t i = 0; i < st.config.processors.size(); ++i)
    self->request(st.config.processors[i], caf::infinite, apply_atom::value, step, clip_factor)
        .then(
            [=](ok_atom) {
              auto& s = self->state;
              if (!s.active || s.step != step) return;
              s.applied[i] = true;
              if (++s.stages_applied == s.config.stages) {
                s.applying = false;
                finish(self, step_result{true, static_cast<float>(s.loss_sum), {}, s.peak_stash, s.microbatch_losses,
                                         s.peak_stash_bytes});
              }
            },
            [=](caf::error& e) { apply_failed(self, i, step, coded_error_string(e), code_in(e)); });
}

// With clip_grad_norm every stage sends its sum of squares; all apply with the same factor
// (Note [global gradient clipping]). Nothing is applied before every norm is in.
void commit(coordinator_self self) {
  auto& st = self->state;
  if (st.config.clip_grad_norm <= 0.0f) return apply(self, 1.0f);
  const std::uint64_t step = st.step;
  st.norms.assign(st.config.processors.size(), -1.0);
  st.norming = true;
  st.apply_since = std::chrono::steady_clock::now();
  if (!st.timer_armed) arm_timer(self, st.config.timeout);
  for (std::size_t i = 0; i < st.config.processors.size(); ++i)
    self->request(st.config.processors[i], caf::infinite, norm_atom::value, step)
        .then(
            [=](gradient_norm& n) {
              auto& s = self->state;
              if (!s.active || s.step != step || !s.norming) return;
              if (!n.error.empty()) {
                s.norming = false;
                return fail(self, n.code, "gradient norm: " + n.error);
              }
              s.norms[i] = n.square_sum;
              if (std::find(s.norms.begin(), s.norms.end(), -1.0) != s.norms.end()) return;
              s.norming = false;
              double sum = 0.0;
              for (double v : s.norms) sum += v;
              apply(self, clip_factor(sum, s.config.clip_grad_norm));
            },
            [=](caf::error& e) {
              auto& s = self->state;
              if (!s.active || s.step != step || !s.norming) return;
              s.norming = false;
              fail(self, error_code::internal, "gradient norm of stage " + std::to_string(i) + ": " + caf::to_string(e));
            });
}

// Note [tied gradients across stages]: when a tie's two copies are on different stages (GPT embedding and LM
// head), the coordinator gathers both gradients after every stage's actions and sends each the other's to add
// before the norm and optimizer step. A refusal or timeout fails the step.
void swap_tied(coordinator_self self) {
  auto& st = self->state;
  if (st.config.ties.empty()) return commit(self);
  const std::uint64_t step = st.step;
  const std::size_t n = st.config.ties.size();
  st.tied.assign(2 * n, named_tensors{});
  st.tied_pending = 2 * n;
  st.tying = true;
  st.apply_since = std::chrono::steady_clock::now();
  if (!st.timer_armed) arm_timer(self, st.config.timeout);
  const auto failed = [=](caf::error& e) {
    auto& s = self->state;
    if (!s.active || s.step != step || !s.tying) return;
    s.tying = false;
    fail(self, code_in(e), "tied weights: " + coded_error_string(e));
  };
  const auto added = [=](ok_atom) {
    auto& s = self->state;
    if (!s.active || s.step != step || !s.tying || --s.tied_pending > 0) return;
    s.tying = false;
    commit(self);
  };
  const auto got = [=](std::size_t slot, named_tensors& g) {
    auto& s = self->state;
    if (!s.active || s.step != step || !s.tying) return;
    s.tied[slot] = std::move(g);
    if (--s.tied_pending > 0) return;
    s.tied_pending = 2 * s.config.ties.size();
    for (std::size_t i = 0; i < s.config.ties.size(); ++i) {
      const stage_tie& t = s.config.ties[i];
      self->request(s.config.processors.at(static_cast<std::size_t>(t.owner_stage)), caf::infinite, tied_atom::value,
                    step, named_tensors{{t.owner}, {std::move(s.tied[2 * i + 1].values.at(0))}})
          .then(added, failed);
      self->request(s.config.processors.at(static_cast<std::size_t>(t.copy_stage)), caf::infinite, tied_atom::value,
                    step, named_tensors{{t.copy}, {std::move(s.tied[2 * i].values.at(0))}})
          .then(added, failed);
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const stage_tie& t = st.config.ties[i];
    self->request(st.config.processors.at(static_cast<std::size_t>(t.owner_stage)), caf::infinite, tied_atom::value, step, t.owner)
        .then([=](named_tensors& g) { got(2 * i, g); }, failed);
    self->request(st.config.processors.at(static_cast<std::size_t>(t.copy_stage)), caf::infinite, tied_atom::value, step, t.copy)
        .then([=](named_tensors& g) { got(2 * i + 1, g); }, failed);
  }
}

// "stage 1 on node 127.0.0.1:4242 is gone (...)". A port probe tells a killed node from a frozen one
// (network/port_probe.hpp).
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
      // The listening socket may outlive the lost connection: a refusal settles it, else ask up to three times.
      for (int attempt = 0; attempt < 3; ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250));
        port = probe_port(a.host, a.port, std::chrono::milliseconds(300));
        if (port == port_state::refused) break;
      }
    } catch (const std::exception&) {
    }
  return who + lost_connection_text(port, reason);
}

// A stage stopped by a lost node connection is a lost node (Note [recovery]); any other stop is not.
error_code stopped_code(const caf::down_msg& m) {
  return m.reason == caf::exit_reason::remote_link_unreachable ? error_code::lost_node : error_code::internal;
}

// A gradient for the last stage, on its activation link where it has one (send_beside).
void send_backward(coordinator_self self, backward_task t) {
  auto& st = self->state;
  const int last = stage_of_chunk(t.chunk, st.config.stages);
  send_beside(st.outbox.get(), st.config.links, t, last, {});
  st.comm->send_backward(std::move(t), last);
}

coordinator_actor::behavior_type coordinator(coordinator_self self, coordinator_config config) {
  self->state.config = std::move(config);
  self->state.loss_fn = make_loss(self->state.config.loss);
  self->state.outbox = outbox_for(coordinator_rank(self->state.config.stages), self->state.config.links,
                                  transport_tls_of(self->system()), self->state.config.timeout);
  for (auto& a : self->state.config.retrievers) self->monitor(a);
  for (auto& a : self->state.config.processors) self->monitor(a);
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    st.broken = true;
    st.broken_reason = describe_stopped(st.config, m);
    st.broken_code = stopped_code(m);
    fail(self, st.broken_code, st.broken_reason);
  });
  return {
      [=](setup_atom, const std::vector<caf::actor>& endpoints) {
        auto& st = self->state;
        st.comm = std::make_unique<actor_communicator>(self->system(), coordinator_rank(st.config.stages), endpoints,
                                                       caf::actor{}, st.config.timeout);
      },
      [=](train_batch& batch) -> caf::result<step_result> {
        auto& st = self->state;
        const std::uint64_t step = batch.step;
        const tensor& inputs = batch.inputs;
        const tensor& labels = batch.labels;
        if (st.broken) return failed_step(st.broken_code, "step " + std::to_string(step) + ": " + st.broken_reason);
        if (st.active) return failed_step(error_code::internal, "step " + std::to_string(step) + ": a step is in flight");
        std::vector<microbatch_range> split;
        try {
          split = split_batch(inputs, labels, st.config.microbatches);
        } catch (const std::exception& e) {
          return failed_step(code_of(e), "step " + std::to_string(step) + ": " + e.what());
        }
        st.promise = self->make_response_promise<step_result>();
        st.step = step;
        st.step_begin_us = steady_now_us();
        st.active = true;
        // A replica's share counts the whole batch (Note [loss scaling]).
        st.batch_size = batch.batch_rows > 0 ? static_cast<std::size_t>(batch.batch_rows) : st.loss_fn->batch_rows(labels);
        st.norming = st.tying = false;
        st.loss_sum = 0.0;
        st.microbatch_losses.assign(split.size(), 0.0f);
        st.gradients.assign(split.size(), tensor{});
        st.outputs = st.stages_done = st.stages_applied = 0;
        st.peak_stash.assign(static_cast<std::size_t>(st.config.stages), 0);
        st.peak_stash_bytes.assign(static_cast<std::size_t>(st.config.stages), 0);
        st.labels.clear();
        st.first_sample.clear();
        // Note [enqueue before begin]: the first stage gets all its microbatches before the step begins, so its queue
        // holds them all from the start.
        const int first_stage = stage_of_chunk(0, st.config.stages);
        for (std::size_t i = 0; i < split.size(); ++i) {
          const auto& r = split[i];
          st.labels.push_back(slice_rows(labels, r.begin, r.end));
          const int first = static_cast<int>(batch.first_sample + static_cast<std::int64_t>(r.begin));
          st.first_sample.push_back(first);
          forward_task t{step, static_cast<int>(i), 0, 0, first, slice_rows(inputs, r.begin, r.end)};
          if (st.config.stage_loss) {  // Note [loss in the last stage]
            t.labels = st.labels.back();
            t.batch_rows = static_cast<std::int64_t>(st.batch_size);
          }
          send_beside(st.outbox.get(), st.config.links, t, first_stage, {});
          st.comm->send_forward(std::move(t), first_stage);
        }
        for (auto& r : st.config.retrievers) self->send(r, begin_atom::value, step);
        return st.promise;
      },
      [=](forward_task& out) {  // a microbatch's output
        auto& st = self->state;
        if (!st.active || out.step != st.step) return;
        const auto mb = static_cast<std::size_t>(out.microbatch);
        // On CAF's scheduler thread: one intra-op thread (Note [serial actor threads]).
        try {
          const int last = st.config.total_chunks - 1;
          if (st.config.stage_loss) {  // Note [loss in the last stage]
            if (out.data.size() != 1) throw std::logic_error("the last stage sent " + shape_string(out.data) + ", not a loss");
            const float share = out.data.data()[0];
            st.loss_sum += share;
            st.microbatch_losses.at(mb) =
                share * static_cast<float>(st.batch_size) / static_cast<float>(st.loss_fn->batch_rows(st.labels.at(mb)));
            ++st.outputs;
            return send_backward(self, backward_task{st.step, out.microbatch, last, 0, st.first_sample[mb], tensor{}});
          }
          const auto output_rows = static_cast<float>(rows(out.data));
          auto [share, grad] = st.loss_fn->take_loss_and_gradient(std::move(out.data), st.labels.at(mb), st.batch_size);
          st.loss_sum += share;
          st.microbatch_losses.at(mb) = share * static_cast<float>(st.batch_size) / output_rows;
          ++st.outputs;
          if (st.config.whole_batch_backward) {
            // One gradient of the whole batch starts the backward (Note [sync-backward]).
            st.gradients.at(mb) = std::move(grad);
            if (st.outputs < static_cast<int>(st.gradients.size())) return;
            std::vector<const tensor*> parts;
            for (const tensor& g : st.gradients) parts.push_back(&g);
            tensor whole = concat_rows(parts);
            st.gradients.assign(st.gradients.size(), tensor{});
            send_backward(self, backward_task{st.step, all_microbatches, last, 0, 0, std::move(whole)});
            return;
          }
          send_backward(self, backward_task{st.step, out.microbatch, last, 0, st.first_sample[mb], std::move(grad)});
        } catch (const std::exception& e) {
          fail(self, code_of(e), "loss of microbatch " + std::to_string(out.microbatch) + ": " + e.what());
        }
      },
      [=](stage_done& d) {
        auto& st = self->state;
        if (!st.active || d.step != st.step) return;
        st.peak_stash.at(static_cast<std::size_t>(d.stage)) = d.peak_stash;
        st.peak_stash_bytes.at(static_cast<std::size_t>(d.stage)) = d.peak_stash_bytes;
        take_node_events(st, d);
        if (++st.stages_done == st.config.stages) {
          log_node_events(st);
          swap_tied(self);
        }
      },
      [=](stage_failed& f) {
        if (f.step == self->state.step) fail(self, f.code, f.what);
      },
      [=](timeout_atom, std::uint64_t, std::uint64_t) {
        auto& st = self->state;
        st.timer_armed = false;
        if (!st.active || !(st.applying || st.norming || st.tying)) return;
        const auto waited = std::chrono::steady_clock::now() - st.apply_since;
        if (waited < st.config.timeout) return arm_timer(self, st.config.timeout - waited);
        if (st.tying) {
          st.tying = false;
          return fail(self, error_code::timeout, "a stage sent no tied weight's gradient within " +
                                                     std::to_string(st.config.timeout.count()) + " ms");
        }
        if (st.norming) {
          st.norming = false;
          const auto late = std::find(st.norms.begin(), st.norms.end(), -1.0) - st.norms.begin();
          return fail(self, error_code::timeout, "stage " + std::to_string(late) + " sent no gradient norm within " +
                                std::to_string(st.config.timeout.count()) + " ms");
        }
        const auto late = std::find(st.applied.begin(), st.applied.end(), false) - st.applied.begin();
        apply_failed(self, static_cast<std::size_t>(late), st.step,
                     "no answer within " + std::to_string(st.config.timeout.count()) + " ms", error_code::timeout);
      },
  };
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, coordinator_config config) {
  return system.spawn(coordinator, std::move(config));
}

}  // namespace ap

#include "actors/pipeline.hpp"

#include <caf/all.hpp>

#include "actors/pipeline_actors.hpp"
#include "tensor/matmul.hpp"

namespace ap {

struct pipeline::impl {
  pipeline_options options;
  sequential model;  // the architecture, and the weights as of the last gather
  schedule plan;
  std::vector<layer_range> ranges;
  std::shared_ptr<event_log> log;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::vector<caf::actor> senders, processors, retrievers;
  caf::actor coordinator;
  long long last_id = -1;      // internal step ids strictly increase
  long long gathered_id = -2;  // model holds the weights after this step
  std::vector<int> peak_stash;
};

namespace {

void check_options(const sequential& model, const pipeline_options& o) {
  if (o.stages <= 0) throw std::invalid_argument("pipeline: stages must be positive, got " + std::to_string(o.stages));
  if (o.microbatches <= 0)
    throw std::invalid_argument("pipeline: microbatches must be positive, got " + std::to_string(o.microbatches));
  if (o.chunks_per_stage <= 0)
    throw std::invalid_argument("pipeline: chunks per stage must be positive, got " +
                                std::to_string(o.chunks_per_stage));
  if (model.empty()) throw std::invalid_argument("pipeline: the model has no layers");
  if (static_cast<std::size_t>(o.stages * o.chunks_per_stage) > model.size())
    throw std::invalid_argument("pipeline: " + std::to_string(o.stages) + " stages x " +
                                std::to_string(o.chunks_per_stage) + " chunks need at least as many layers, the model has " +
                                std::to_string(model.size()));
}

}  // namespace

pipeline::pipeline(const sequential& model, const pipeline_options& options) : impl_(std::make_unique<impl>()) {
  check_options(model, options);
  auto& d = *impl_;
  d.options = options;
  d.model = model.clone();
  const int total_chunks = options.stages * options.chunks_per_stage;
  d.ranges = options.layers_per_chunk.empty() ? uniform_chunk_ranges(model.size(), total_chunks)
                                               : chunk_ranges_from_counts(options.layers_per_chunk, model.size());
  if (static_cast<int>(d.ranges.size()) != total_chunks)
    throw std::invalid_argument("pipeline: " + std::to_string(d.ranges.size()) + " layer counts given for " +
                                std::to_string(total_chunks) + " chunks");
  d.plan = make_schedule(options.schedule, options.stages, options.microbatches, options.chunks_per_stage);
  if (auto v = validate(d.plan); !v.ok) throw std::invalid_argument("pipeline: invalid schedule: " + v.message);
  if (options.record_events) d.log = std::make_shared<event_log>();

  set_blas_threads(1);  // stages give the parallelism
  d.config.set("scheduler.max-threads", 2);
  d.system = std::make_unique<caf::actor_system>(d.config);
  auto& sys = *d.system;
  for (int s = 0; s < options.stages; ++s) {
    const stage_info info = get_stage_info(d.ranges, options.stages, s);
    std::vector<sequential> slices;
    for (const auto& r : info.layer_ranges_per_chunk) slices.push_back(model.slice(r.begin, r.end));
    auto worker = std::make_unique<stage_worker>(s, info.chunks, std::move(slices), options.optimizer);
    d.senders.push_back(spawn_sender(sys, s, options.timeout));
    d.processors.push_back(
        spawn_processor(sys, processor_config{s, options.stages, total_chunks, d.senders.back(), d.log}, std::move(worker)));
    d.retrievers.push_back(spawn_retriever(
        sys, retriever_config{s, d.plan.per_stage[static_cast<std::size_t>(s)], d.processors.back(), options.timeout, d.log}));
  }
  d.coordinator = spawn_coordinator(sys, coordinator_config{options.stages, total_chunks, options.microbatches, options.loss,
                                                            d.retrievers, d.processors, options.timeout});
  std::vector<caf::actor> endpoints = d.retrievers;
  endpoints.push_back(d.coordinator);
  for (auto& s : d.senders) caf::anon_send(s, setup_atom::value, endpoints);
  caf::anon_send(d.coordinator, setup_atom::value, endpoints);
}

pipeline::~pipeline() {
  auto& d = *impl_;
  auto stop = [](const caf::actor& a) { caf::anon_send_exit(a, caf::exit_reason::user_shutdown); };
  stop(d.coordinator);
  for (auto* group : {&d.retrievers, &d.processors, &d.senders})
    for (auto& a : *group) stop(a);
  // A detached actor's thread ends only when the last handle to it is gone: drop ours first.
  d.coordinator = nullptr;
  d.retrievers.clear(), d.processors.clear(), d.senders.clear();
  d.system.reset();  // waits until every actor has exited
}

float pipeline::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  auto& d = *impl_;
  const long long id = std::max(static_cast<long long>(step), d.last_id + 1);
  d.last_id = id;
  caf::scoped_actor self{*d.system};
  step_result result;
  self->request(d.coordinator, d.options.step_timeout, train_batch{static_cast<int>(id), inputs, labels})
      .receive([&](step_result& r) { result = std::move(r); },
               [&](caf::error& e) {
                 result.error = "step " + std::to_string(id) + ": no answer from the coordinator: " + caf::to_string(e);
               });
  if (!result.ok) throw pipeline_error(result.error);
  d.peak_stash = result.peak_stash;
  return result.loss;
}

sequential pipeline::gather_model() {
  auto& d = *impl_;
  if (d.gathered_id != d.last_id) {
    std::map<std::string, tensor*> mine;
    for (auto& p : d.model.parameters()) mine[p.name] = p.value;
    caf::scoped_actor self{*d.system};
    for (auto& proc : d.processors) {
      std::string failure;
      self->request(proc, d.options.timeout, params_atom::value)
          .receive(
              [&](named_tensors& nt) {
                for (std::size_t i = 0; i < nt.names.size(); ++i) *mine.at(nt.names[i]) = std::move(nt.values[i]);
              },
              [&](caf::error& e) { failure = caf::to_string(e); });
      if (!failure.empty()) throw pipeline_error("gathering parameters: " + failure);
    }
    d.gathered_id = d.last_id;
  }
  return d.model.clone();
}

tensor pipeline::predict(const tensor& inputs) {
  gather_model();
  return impl_->model.forward(inputs);
}

const schedule& pipeline::plan() const { return impl_->plan; }
const std::vector<layer_range>& pipeline::chunk_ranges() const { return impl_->ranges; }
std::vector<int> pipeline::last_peak_stash() const { return impl_->peak_stash; }
std::vector<stage_event> pipeline::events() const { return impl_->log ? impl_->log->events() : std::vector<stage_event>{}; }
void pipeline::clear_events() {
  if (impl_->log) impl_->log->clear();
}

}  // namespace ap

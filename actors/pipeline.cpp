#include "actors/pipeline.hpp"

#include <algorithm>
#include <set>

#include <caf/all.hpp>

#include "actors/node.hpp"
#include "actors/pipeline_actors.hpp"
#include "actors/stage_spawner.hpp"
#include "plan/partition.hpp"
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/named_tensors.hpp"
#include "tensor/compute.hpp"

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
  std::unique_ptr<caf::scoped_actor> owner;  // places stages on nodes; they stop them when it goes
  std::vector<std::string> places;           // per stage: "node host:port"; empty in one process
  std::vector<double> clock_offset_us, clock_bound_us;  // per stage on a node: Note [events from nodes]
  long long last_id = -1;      // internal step ids strictly increase
  long long gathered_id = -2;  // model holds the weights after this step
  std::vector<int> peak_stash;
  std::vector<float> microbatch_losses;  // of the last step

  // Also runs when the constructor throws half-way.
  ~impl() {
    auto stop = [](const caf::actor& a) {
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    };
    stop(coordinator);
    for (auto* group : {&retrievers, &processors, &senders})
      for (auto& a : *group) stop(a);
    // A detached actor's thread ends only when the last handle to it is gone: drop ours first.
    coordinator = nullptr;
    retrievers.clear(), processors.clear(), senders.clear();
    owner.reset();
    system.reset();  // waits until every actor has exited
  }
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

// A stage whose layers use a kind its node cannot build is refused before any stage is placed.
void check_layer_kinds(const stage_setup& setup, const std::vector<node_address>& nodes,
                       const std::vector<std::vector<std::string>>& kinds) {
  const auto n = static_cast<std::size_t>(setup.stage) % nodes.size();
  for (const auto& slice : setup.slices)
    for (std::size_t i = 0; i < slice.size(); ++i) {
      const std::string spec = slice.at(i).spec();
      const auto lacking = layer_kinds_lacking(layer_kinds_in(spec), kinds[n]);
      if (lacking.empty()) continue;
      throw std::runtime_error("node " + nodes[n].text() + " lacks layer kind '" + lacking[0] + "', used by stage " +
                               std::to_string(setup.stage) + " (layer " + std::to_string(slice.first_index() + i) +
                               " " + spec + "): run a node binary that registers it (ap::run_node)");
    }
}

// Stage s goes to node s % nodes.size(); throws pipeline_error naming the node and what failed.
// `clocks` gets each node's clock offset (Note [events from nodes]).
std::vector<stage_actors> place_on_nodes(caf::scoped_actor& owner, const std::vector<node_address>& nodes,
                                         std::vector<stage_setup>& setups, std::chrono::milliseconds timeout,
                                         std::vector<clock_offset>& clocks) {
  try {
    std::vector<caf::actor> handles;
    std::vector<std::vector<std::string>> kinds(nodes.size());  // per node: the layer kinds it can build
    for (std::size_t i = 0; i < nodes.size(); ++i) handles.push_back(connect_node(owner, nodes[i], timeout, &kinds[i]));
    for (std::size_t i = 0; i < nodes.size(); ++i) clocks.push_back(estimate_clock_offset(owner, handles[i], nodes[i], timeout));
    for (const auto& setup : setups) check_layer_kinds(setup, nodes, kinds);
    // Note [direct routes between nodes]: node i connects to the distinct nodes listed before it.
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      std::set<caf::node_id> seen{handles[i].node()};
      std::vector<node_address> peers;
      for (std::size_t j = 0; j < i; ++j)
        if (seen.insert(handles[j].node()).second) peers.push_back(nodes[j]);
      connect_peers(owner, handles[i], nodes[i], peers, timeout);
    }
    std::vector<stage_actors> placed;
    for (auto& setup : setups) {
      const auto n = static_cast<std::size_t>(setup.stage) % nodes.size();
      placed.push_back(place_stage(owner, handles[n], nodes[n], make_stage_spec(setup), timeout));
    }
    return placed;
  } catch (const std::runtime_error& e) {
    throw pipeline_error(std::string("pipeline: ") + e.what());
  }
}

}  // namespace

pipeline::pipeline(const sequential& model, const pipeline_options& options) : impl_(std::make_unique<impl>()) {
  check_options(model, options);
  auto& d = *impl_;
  d.options = options;
  d.model = model.clone();
  const int total_chunks = options.stages * options.chunks_per_stage;
  d.ranges = chunk_ranges_from_counts(options.layers_per_chunk.empty()
                                          ? partition_counts(partition_method::uniform, model, {}, total_chunks)
                                          : options.layers_per_chunk,
                                      model.size());
  if (static_cast<int>(d.ranges.size()) != total_chunks)
    throw std::invalid_argument("pipeline: " + std::to_string(d.ranges.size()) + " layer counts given for " +
                                std::to_string(total_chunks) + " chunks");
  d.plan = options.plan ? *options.plan
                        : make_schedule(options.schedule, options.stages, options.microbatches, options.chunks_per_stage);
  if (auto v = validate_for_run(d.plan, options.stages, options.microbatches, options.chunks_per_stage); !v.ok)
    throw std::invalid_argument("pipeline: invalid schedule: " + v.message);
  d.log = std::make_shared<event_log>(options.record_events, options.on_event);  // Note [bounded event log]

  std::vector<node_address> nodes;
  for (const auto& text : options.nodes) nodes.push_back(parse_node_address(text));  // std::invalid_argument

  set_compute_threads(1);  // stages give the parallelism
  d.config.set("scheduler.max-threads", 2);
  if (!nodes.empty()) enable_network(d.config);
  d.system = std::make_unique<caf::actor_system>(d.config);
  auto& sys = *d.system;
  std::vector<stage_setup> setups;
  for (int s = 0; s < options.stages; ++s) {
    const stage_info info = get_stage_info(d.ranges, options.stages, s);
    stage_setup setup{s, options.stages, total_chunks, info.chunks, {}, options.optimizer,
                      d.plan.per_stage[static_cast<std::size_t>(s)], options.timeout, d.log};
    for (const auto& r : info.layer_ranges_per_chunk) setup.slices.push_back(model.slice(r.begin, r.end));
    setups.push_back(std::move(setup));
  }
  const auto keep = [&d](const stage_actors& a) {  // kept at once: ~impl stops them if a later stage throws
    d.senders.push_back(a.sender);
    d.processors.push_back(a.processor);
    d.retrievers.push_back(a.retriever);
  };
  if (nodes.empty()) {
    for (auto& setup : setups) keep(spawn_stage(sys, std::move(setup)));
  } else {
    d.owner = std::make_unique<caf::scoped_actor>(sys);
    std::vector<clock_offset> clocks;
    for (const auto& a : place_on_nodes(*d.owner, nodes, setups, options.timeout, clocks)) keep(a);
    for (int s = 0; s < options.stages; ++s) {
      const std::size_t n = static_cast<std::size_t>(s) % nodes.size();
      d.places.push_back("node " + nodes[n].text());
      d.clock_offset_us.push_back(clocks[n].offset_us);
      d.clock_bound_us.push_back(clocks[n].bound_us);
    }
  }
  d.coordinator = spawn_coordinator(sys, coordinator_config{options.stages, total_chunks, options.microbatches, options.loss,
                                                            d.retrievers, d.processors, options.timeout, d.places,
                                                            whole_batch_backward(d.plan), d.log, d.clock_offset_us,
                                                            d.clock_bound_us});
  std::vector<caf::actor> endpoints = d.retrievers;
  endpoints.push_back(d.coordinator);
  for (std::size_t s = 0; s < d.senders.size(); ++s) {
    if (!d.owner) {
      caf::anon_send(d.senders[s], setup_atom::value, endpoints);
      continue;
    }
    // A remote sender confirms, so no task can reach it before its endpoints (they come from other processes).
    std::string failure;
    (*d.owner)->request(d.senders[s], options.timeout, setup_atom::value, endpoints)
        .receive([](ok_atom) {}, [&](caf::error& e) { failure = error_text(e); });
    if (!failure.empty())
      throw pipeline_error("pipeline: stage " + std::to_string(s) + " on " + d.places[s] +
                           " did not confirm its setup: " + failure);
  }
  caf::anon_send(d.coordinator, setup_atom::value, endpoints);
}

pipeline::~pipeline() = default;  // impl's destructor stops every actor

float pipeline::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  auto& d = *impl_;
  const long long id = std::max(static_cast<long long>(step), d.last_id + 1);
  // Cheap checks on the caller's thread before any stage runs: the text names the first layer and both
  // dtypes or widths, with no stage to blame (the stages would fail later with the same text, in a stage).
  try {
    d.model.check_input(inputs);
  } catch (const std::invalid_argument& e) {
    throw pipeline_error("step " + std::to_string(id) + ": inputs: " + e.what());
  }
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
  d.microbatch_losses = result.microbatch_losses;
  return result.loss;
}

sequential pipeline::gather_model() {
  auto& d = *impl_;
  if (d.gathered_id != d.last_id) {
    std::vector<named_tensors> sent(d.processors.size());
    tensor_sources sources;
    caf::scoped_actor self{*d.system};
    for (std::size_t s = 0; s < d.processors.size(); ++s) {
      std::string failure;
      self->request(d.processors[s], d.options.timeout, params_atom::value)
          .receive([&](named_tensors& nt) { sent[s] = std::move(nt); },
                   [&](caf::error& e) { failure = caf::to_string(e); });
      if (failure.empty()) failure = add_sources(sources, sent[s], "stage " + std::to_string(s));
      if (!failure.empty()) throw pipeline_error("gathering parameters: " + failure);
    }
    const std::string why = bind_named_tensors(parameter_targets(d.model.parameters(), "the model's parameter"),
                                               sources, "no parameter of the model");
    if (!why.empty()) throw pipeline_error("gathering parameters: " + why);
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
std::vector<float> pipeline::last_microbatch_losses() const { return impl_->microbatch_losses; }
std::vector<stage_event> pipeline::events() const { return impl_->log->events(); }
std::size_t pipeline::held_events() const { return impl_->log->event_count(); }
std::vector<double> pipeline::busy_seconds() const {
  auto busy = impl_->log->busy_us(impl_->options.stages);
  for (double& b : busy) b /= 1e6;
  return busy;
}
void pipeline::clear_events() { impl_->log->clear(); }

namespace {

std::string describe_layers(const std::vector<std::string>& specs) {
  std::string text;
  for (const auto& s : specs) text += (text.empty() ? "" : ";") + s;
  return "[" + text + "] (" + std::to_string(specs.size()) + " layers)";
}

// Every stage's stage_state, in stage order.
std::vector<stage_state> request_stage_states(caf::actor_system& system, const std::vector<caf::actor>& processors,
                                              std::chrono::milliseconds timeout, const std::string& path) {
  std::vector<stage_state> states;
  caf::scoped_actor self{system};
  for (std::size_t s = 0; s < processors.size(); ++s) {
    std::string failure;
    self->request(processors[s], timeout, state_atom::value)
        .receive([&](stage_state& st) { states.push_back(std::move(st)); },
                 [&](caf::error& e) { failure = caf::to_string(e); });
    if (!failure.empty())
      throw pipeline_error("checkpoint " + path + ": stage " + std::to_string(s) + " did not send its state: " + failure);
  }
  return states;
}

}  // namespace

void pipeline::save_checkpoint(const std::string& path, const training_state& state) {
  auto& d = *impl_;
  const std::vector<stage_state> states = request_stage_states(*d.system, d.processors, d.options.timeout, path);
  const auto refuse = [&](const std::string& what) { throw pipeline_error("checkpoint " + path + ": " + what); };
  // Note [stage state]: the stages' tensors have global names; together they are the whole model and the
  // state of one optimizer for all of it, which the checkpoint library saves like a single process's.
  tensor_sources sent;
  for (const stage_state& st : states) {
    if (st.optimizer_steps != states.front().optimizer_steps)
      refuse("stage " + std::to_string(st.stage) + "'s optimizer took " + std::to_string(st.optimizer_steps) +
             " steps, stage " + std::to_string(states.front().stage) + "'s " +
             std::to_string(states.front().optimizer_steps));
    if (const std::string why = add_sources(sent, st.tensors, "stage " + std::to_string(st.stage)); !why.empty())
      refuse(why);
  }
  const std::string prefix = checkpoint_optimizer_prefix;
  const bool has_state = std::any_of(sent.begin(), sent.end(), [&](const auto& named) { return named.first.rfind(prefix, 0) == 0; });
  std::unique_ptr<optimizer> opt = make_optimizer(d.options.optimizer);
  if (has_state) opt->init_state(d.model.parameters());
  opt->set_steps(states.empty() ? 0 : static_cast<long>(states.front().optimizer_steps));
  std::vector<tensor_target> targets = parameter_targets(d.model.parameters(), "the model's parameter");
  for (auto& t : optimizer_state_targets(opt->state(), prefix, "the optimizer's state")) targets.push_back(std::move(t));
  if (const std::string why = bind_named_tensors(
          targets, sent, "neither a parameter of the model nor state of a " + d.options.optimizer.kind + " optimizer");
      !why.empty())
    refuse(why);
  d.gathered_id = d.last_id;  // d.model now holds every stage's current weights
  ap::save_checkpoint(path, d.model, opt.get(), state);
}

training_state pipeline::load_checkpoint(const std::string& path) {
  auto& d = *impl_;
  // Everything is read and checked before any stage is sent anything, so a refused file changes nothing.
  const checkpoint_info info = read_checkpoint_info(path);
  if (info.layer_specs != d.model.layer_specs())
    throw std::runtime_error("checkpoint " + path + ": holds a different model: its layers are " +
                             describe_layers(info.layer_specs) + ", this pipeline's are " +
                             describe_layers(d.model.layer_specs()));
  const int stages = d.options.stages;
  std::vector<stage_state> states(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) states[static_cast<std::size_t>(s)] = stage_state{s, info.optimizer_steps, {}};
  training_state saved;
  for (std::size_t c = 0; c < d.ranges.size(); ++c) {
    // Each chunk's layers load through the checkpoint library into scratch copies (it checks the tensors,
    // shapes and optimizer kind), and travel to their stage under the same names.
    sequential slice = d.model.slice(d.ranges[c].begin, d.ranges[c].end);
    std::unique_ptr<optimizer> opt = make_optimizer(d.options.optimizer);
    saved = load_checkpoint_slice(path, slice, opt.get());
    if (saved.step != info.state.step || saved.epoch != info.state.epoch ||
        saved.batch_in_epoch != info.state.batch_in_epoch || saved.data_seed != info.state.data_seed)
      throw std::runtime_error("checkpoint " + path + ": the file changed while it was read (step " +
                               std::to_string(info.state.step) + ", then " + std::to_string(saved.step) + ")");
    named_tensors& out = states[static_cast<std::size_t>(stage_of_chunk(static_cast<int>(c), stages))].tensors;
    add_parameters(out, slice.parameters());
    add_optimizer_state(out, opt->state(), checkpoint_optimizer_prefix);
  }

  d.gathered_id = -2;  // the stages' weights change: gather them again
  std::string errors;
  caf::scoped_actor self{*d.system};
  for (int s = 0; s < stages; ++s) {
    std::string error;
    self->request(d.processors[static_cast<std::size_t>(s)], d.options.timeout, load_atom::value,
                  std::move(states[static_cast<std::size_t>(s)]))
        .receive([&](stage_state_loaded& answer) { error = answer.error; },
                 [&](caf::error& e) { error = "stage " + std::to_string(s) + ": " + caf::to_string(e); });
    if (!error.empty()) errors += (errors.empty() ? "" : "; ") + error;
  }
  // Only a stage that disagrees with the checks above (a bug) or does not answer gets here.
  if (!errors.empty())
    throw pipeline_error("checkpoint " + path + ": " + errors +
                         " (the other stages loaded it: load a checkpoint again before training)");
  return saved;
}

}  // namespace ap

#include "stage/stage_compute.hpp"

#include <algorithm>
#include <stdexcept>

#include "checkpoint/checkpoint.hpp"
#include "collective/process_group.hpp"
#include "model/grad_clip.hpp"
#include "model/sequence_parallel.hpp"
#include "model/tensor_parallel.hpp"
#include "model/vocab_parallel.hpp"
#include "collective/shard.hpp"
#include "model/layer_spec.hpp"
#include "tensor/elementwise.hpp"

namespace ap {

stage_compute::stage_compute(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices,
                             const optimizer_config& optimizer, int tensor_parallel, std::chrono::milliseconds timeout,
                             std::vector<compute_cores> cores)
    : stage_(stage), chunk_ids_(std::move(chunk_ids)), optimizer_(optimizer), tensor_parallel_(tensor_parallel),
      timeout_(timeout), cores_(std::move(cores)) {
  if (tensor_parallel < 1)
    throw std::invalid_argument("stage " + std::to_string(stage) + ": tensor-parallel degree must be at least 1, got " +
                                std::to_string(tensor_parallel));
  if (cores_.empty()) cores_.assign(static_cast<std::size_t>(tensor_parallel), compute_cores{});
  for (auto& s : slices)
    for (weight_tie& t : weight_ties(s)) ties_.push_back(std::move(t));
  if (cores_.size() != static_cast<std::size_t>(tensor_parallel))
    throw std::invalid_argument("stage " + std::to_string(stage) + ": " + std::to_string(cores_.size()) +
                                " core assignments for " + std::to_string(tensor_parallel) + " tensor-parallel ranks");
  if (tensor_parallel == 1) {
    ranks_.push_back(std::make_unique<stage_rank>(stage, chunk_ids_, std::move(slices), optimizer));
    return;
  }
  stage_state given{stage, 0, {}};
  for (auto& s : slices) {
    add_parameters(given.tensors, s.parameters());
    wholes_.push_back({s.layer_specs(), s.first_index(), s.compute_dtype(), s.recompute()});
  }
  slices.clear();
  threads_ = std::make_unique<lockstep_threads>(tensor_parallel, cores_);
  build_ranks();
  import_state(given);
}

// Note [reductions before the gradients go]: a reduction in flight writes into this stage's gradients from its
// group's thread. A stage destroyed mid-step (its actors stopped: the coordinator's connection lost) aborts its
// reductions and waits for them first, as abort() does; otherwise that thread could write into freed memory.
stage_compute::~stage_compute() {
  if (reductions_.empty()) return;
  try {
    abandon_reductions("stopped");
  } catch (...) {  // a destructor throws nothing; the waits themselves catch the collectives' errors
  }
}

void stage_compute::abandon_reductions(const std::string& what) {
  // The other replicas must not commit this step: their optimizer step fails at once (Note [data-parallel stage]).
  const std::string why = "replica " + std::to_string(replica_) + " stage " + std::to_string(stage_) + " " + what;
  for (auto& m : data_parallel_) m->abort(why);
  for (auto& h : reductions_) {  // they may still touch the gradients: wait, then drop them
    try {
      h.wait();
    } catch (const collective_error&) {
    }
  }
  reductions_.clear();
  reduced_chunks_.clear();
}

void stage_compute::build_ranks() {
  const int T = tensor_parallel_;
  ranks_.clear();
  group_ = std::make_unique<local_group>("tensor-parallel stage " + std::to_string(stage_), T, timeout_);
  layouts_.clear();
  split_layers_.clear();
  for (int r = 0; r < T; ++r) {
    std::vector<sequential> mine;
    std::shared_ptr<process_group> member(group_->member(r));
    for (const chunk_architecture& whole : wholes_) {
      const int id = chunk_ids_[static_cast<std::size_t>(&whole - wholes_.data())];
      const vocabulary_split vocab{vocabulary_split_, vocabulary_split_ && id == head_chunk_};
      mine.push_back(sequential::from_layer_specs(tensor_parallel_specs(whole.specs, vocab), whole.first_index));
      mine.back().set_compute_dtype(whole.compute);
      mine.back().set_recompute(whole.recompute);
      try {
        join_tensor_parallel(mine.back(), member);  // refuses a width T does not divide, naming the layer
      } catch (const std::exception& e) {
        throw std::invalid_argument("stage " + std::to_string(stage_) + ", tensor-parallel degree " + std::to_string(T) +
                                    ": " + e.what());
      }
      if (sequence_split_) enable_sequence_parallel(mine.back(), member);
      if (r == 0) {
        for (const auto& [name, layout] : sharded_layouts_by_name(mine.back())) layouts_[name] = layout;
        const std::string text = split_layers_text(mine.back());
        if (!text.empty()) split_layers_ += (split_layers_.empty() ? "" : ", ") + text;
      }
    }
    ranks_.push_back(std::make_unique<stage_rank>(stage_, chunk_ids_, std::move(mine), optimizer_));
  }
  loss_gradients_.assign(static_cast<std::size_t>(T), {});
  broken_ = false;
}

void stage_compute::rebuild_if_broken() {
  if (!broken_) return;
  const stage_state state = export_state();  // the shards' weights did not change in the failed action
  build_ranks();
  import_state(state);
}

void stage_compute::on_ranks(const std::function<void(int, stage_rank&)>& work) {
  if (tensor_parallel_ == 1) {
    use_compute_cores(cores_[0]);
    return work(0, *ranks_[0]);
  }
  rebuild_if_broken();
  std::vector<std::exception_ptr> errors = threads_->run([&](int r) {
    try {
      work(r, *ranks_[static_cast<std::size_t>(r)]);
    } catch (...) {
      // The other ranks may wait for this one in a collective: they fail at once instead.
      group_->member(r)->abort("tensor-parallel rank " + std::to_string(r) + " of stage " + std::to_string(stage_) +
                               " failed");
      throw;
    }
  });
  const int cause = first_cause(errors);  // Note [the cause, not a peer's view]
  if (cause < 0) return;
  broken_ = true;
  const failure f = failure_of(errors[static_cast<std::size_t>(cause)]);
  if (f.code == error_code::collective || f.code == error_code::lost_peer)
    std::rethrow_exception(errors[static_cast<std::size_t>(cause)]);
  throw_error(f.code, f.what + " (tensor-parallel rank " + std::to_string(cause) + ")");  // the same code and std type
}

tensor stage_compute::rank0_result(const std::function<tensor(stage_rank&)>& work) {
  tensor out;
  on_ranks([&](int r, stage_rank& w) {
    tensor mine = work(w);
    if (r == 0) out = std::move(mine);
  });
  return out;
}

void stage_compute::split_sequence() {
  if (tensor_parallel_ == 1) return;
  const stage_state state = export_state();
  sequence_split_ = true;
  build_ranks();
  import_state(state);
}

void stage_compute::split_vocabulary(int head_chunk) {
  if (tensor_parallel_ == 1) return;
  const auto at = std::find(chunk_ids_.begin(), chunk_ids_.end(), head_chunk);
  if (head_chunk >= 0 && at == chunk_ids_.end())
    throw std::invalid_argument("stage " + std::to_string(stage_) + " holds no chunk " + std::to_string(head_chunk));
  if (head_chunk >= 0) {
    const layer_spec head = parse_layer_spec(wholes_[static_cast<std::size_t>(at - chunk_ids_.begin())].specs.back());
    if (head.kind != "linear" || head.positional_fields() < 2)
      throw std::invalid_argument("stage " + std::to_string(stage_) + ": chunk " + std::to_string(head_chunk) +
                                  " ends in " + head.text + ", not a Linear head to split over the vocabulary");
    vocabulary_ = head.width(1);
  }
  const stage_state state = export_state();
  vocabulary_split_ = true;
  head_chunk_ = head_chunk;
  build_ranks();
  import_state(state);
}

tensor stage_compute::forward(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x) {
  if (vocabulary_split_ && chunk == head_chunk_)
    throw std::logic_error("stage " + std::to_string(stage_) + ": the vocabulary-split head's forward needs the labels");
  return rank0_result([&](stage_rank& w) { return w.forward(step, microbatch, chunk, first_sample, x); });
}

float stage_compute::forward_loss(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x,
                                  const tensor& labels, std::size_t batch_rows) {
  if (!vocabulary_split_ || chunk != head_chunk_)
    throw std::logic_error("stage " + std::to_string(stage_) + ": chunk " + std::to_string(chunk) +
                           " does not end in a vocabulary-split head");
  float share = 0.0f;
  on_ranks([&](int r, stage_rank& w) {
    const auto first = shard_rows(vocabulary_, ranks_.size(), static_cast<std::size_t>(r)).first;
    loss::loss_and_gradient result =
        vocab_parallel_cross_entropy(w.forward(step, microbatch, chunk, first_sample, x), first, vocabulary_, labels,
                                     batch_rows, *group_->member(r));
    loss_gradients_[static_cast<std::size_t>(r)][microbatch] = std::move(result.gradient);
    if (r == 0) share = result.loss;
  });
  return share;
}

const tensor& stage_compute::dy_for(int r, int microbatch, int chunk, const tensor& dy, tensor& taken) {
  if (!vocabulary_split_ || chunk != head_chunk_ || dy.dimension() != 0) return dy;
  auto& mine = loss_gradients_[static_cast<std::size_t>(r)];
  const auto it = mine.find(microbatch);
  if (it == mine.end())
    throw std::logic_error("stage " + std::to_string(stage_) + ": no loss gradient of microbatch " +
                           std::to_string(microbatch) + " for the head's backward");
  taken = std::move(it->second);
  mine.erase(it);
  return taken;
}

tensor stage_compute::backward(int microbatch, int chunk, const tensor& dy) {
  tensor out;
  on_ranks([&](int r, stage_rank& w) {
    tensor taken;
    tensor mine = w.backward(microbatch, chunk, dy_for(r, microbatch, chunk, dy, taken));
    if (r == 0) out = std::move(mine);
  });
  return out;
}

tensor stage_compute::backward_input(int microbatch, int chunk, const tensor& dy) {
  tensor out;
  on_ranks([&](int r, stage_rank& w) {
    tensor taken;
    tensor mine = w.backward_input(microbatch, chunk, dy_for(r, microbatch, chunk, dy, taken));
    if (r == 0) out = std::move(mine);
  });
  return out;
}

tensor stage_compute::backward_and_reduce(int microbatch, int chunk, const tensor& dy) {
  if (data_parallel_.empty()) return backward(microbatch, chunk, dy);
  mark_reduced(chunk);
  std::vector<std::vector<collective_handle>> started(ranks_.size());
  const auto keep_started = [&] {  // waited for by the optimizer step, or by abort() after a failure
    for (auto& mine : started)
      for (auto& h : mine) reductions_.push_back(std::move(h));
  };
  tensor out;
  try {
    on_ranks([&](int r, stage_rank& w) {
      const std::size_t rank = static_cast<std::size_t>(r);
      tensor taken;
      tensor mine = w.backward(microbatch, chunk, dy_for(r, microbatch, chunk, dy, taken), [&](layer& l) {
        for (parameter& p : l.parameters("")) started[rank].push_back(data_parallel_[rank]->all_reduce(*p.grad));
      });
      if (r == 0) out = std::move(mine);
    });
  } catch (...) {
    keep_started();
    throw;
  }
  keep_started();
  return out;
}

void stage_compute::backward_weight(int microbatch, int chunk) {
  on_ranks([&](int, stage_rank& w) { w.backward_weight(microbatch, chunk); });
}

void stage_compute::join_data_parallel(std::vector<std::shared_ptr<process_group>> members, int replica) {
  if (members.size() != ranks_.size())
    throw std::invalid_argument("stage " + std::to_string(stage_) + ": " + std::to_string(members.size()) +
                                " data-parallel members for " + std::to_string(ranks_.size()) + " tensor-parallel ranks");
  data_parallel_ = std::move(members);
  replica_ = replica;
}

void stage_compute::reduce_gradients(int chunk) {
  if (data_parallel_.empty()) return;
  mark_reduced(chunk);
  // Posted from this thread for every rank: starting a collective only queues it (Note [local collectives]).
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    for (parameter& p : ranks_[r]->chunk_parameters(chunk)) reductions_.push_back(data_parallel_[r]->all_reduce(*p.grad));
}

void stage_compute::mark_reduced(int chunk) {
  if (std::find(reduced_chunks_.begin(), reduced_chunks_.end(), chunk) != reduced_chunks_.end())
    throw std::logic_error("stage " + std::to_string(stage_) + ": gradients of chunk " + std::to_string(chunk) +
                           " reduced twice in one step");
  reduced_chunks_.push_back(chunk);
}

// Starts what the schedule did not (every chunk in order, the same in every replica), then waits for all.
void stage_compute::finish_reductions() {
  if (reductions_finished_) return;
  reductions_finished_ = true;  // until the optimizer step (or an abort) ends the step
  if (!data_parallel_.empty()) {
    for (int chunk : chunk_ids_)
      if (std::find(reduced_chunks_.begin(), reduced_chunks_.end(), chunk) == reduced_chunks_.end()) reduce_gradients(chunk);
    std::vector<collective_handle> pending = std::move(reductions_);
    reductions_.clear();
    reduced_chunks_.clear();
    for (auto& h : pending) h.wait();  // a failure throws collective_error naming the group and the rank
  }
  // Both copies in this stage are summed here, after the replicas' reductions (Note [tied weights]).
  if (!ties_.empty()) on_ranks([&](int, stage_rank& w) { tie_gradients(w.parameters(), ties_); });
}

namespace {

tensor& gradient_named(stage_rank& w, const std::string& name, int stage) {
  for (const parameter& p : w.parameters())
    if (p.name == name) return *p.grad;
  throw std::invalid_argument("stage " + std::to_string(stage) + " holds no tied weight '" + name + "'");
}

}  // namespace

tensor stage_compute::tied_gradient(const std::string& name) {
  finish_reductions();
  const auto split = layouts_.find(name);
  if (split == layouts_.end()) return gradient_named(*ranks_[0], name, stage_);
  std::vector<const tensor*> pieces;  // a split tied weight's gradient, gathered whole (Note [vocab-parallel])
  for (auto& w : ranks_) pieces.push_back(&gradient_named(*w, name, stage_));
  return gather_pieces(pieces, split->second);
}

void stage_compute::add_tied_gradient(const std::string& name, const tensor& other) {
  finish_reductions();
  const auto split = layouts_.find(name);
  if (split == layouts_.end()) {
    on_ranks([&](int, stage_rank& w) { add_tied(gradient_named(w, name, stage_), other); });
    return;
  }
  tensor whole = zeros(shape_of(tied_gradient(name)));  // the other copy's gradient in this weight's orientation
  add_tied(whole, other);
  on_ranks([&](int r, stage_rank& w) {
    tensor& mine = gradient_named(w, name, stage_);
    const tensor piece = piece_along(whole, split->second, static_cast<std::size_t>(r), ranks_.size());
    add_into(mine.data(), piece.data(), mine.size());
  });
}

double stage_compute::gradient_square_sum() {
  finish_reductions();
  double sum = 0.0;
  for (std::size_t r = 0; r < ranks_.size(); ++r)
    sum += ap::gradient_square_sum(ranks_[r]->parameters(), [&](const parameter& p) {
      return (r == 0 || layouts_.count(p.name) > 0) && !is_tied_copy(p.name, ties_);
    });
  return sum;
}

void stage_compute::apply_optimizer(float clip_factor, int part, int parts) {
  finish_reductions();
  if (!data_parallel_.empty()) {  // the commit every replica meets (Note [data-parallel stage])
    std::vector<tensor> votes(ranks_.size(), tensor::from_shape({1}));
    std::vector<collective_handle> handles;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      votes[r].data()[0] = 1.0f;
      handles.push_back(data_parallel_[r]->all_reduce(votes[r]));
    }
    for (auto& h : handles) h.wait();
  }
  reductions_finished_ = false;
  on_ranks([&](int, stage_rank& w) {
    if (clip_factor != 1.0f) scale_gradients(w.parameters(), clip_factor);
    w.apply_optimizer(static_cast<std::size_t>(part), static_cast<std::size_t>(parts));
  });
}

void stage_compute::take_parts(const std::vector<stage_compute*>& replicas, int replica, bool state) {
  const std::size_t parts = replicas.size();
  on_ranks([&](int r, stage_rank& w) {
    for (std::size_t d = 0; d < parts; ++d)
      if (d != static_cast<std::size_t>(replica)) w.take_part(*replicas[d]->ranks_.at(static_cast<std::size_t>(r)), d, parts, state);
  });
}

void stage_compute::abort() {
  if (!data_parallel_.empty())
    abandon_reductions("abandoned its step");
  reductions_finished_ = false;
  for (auto& w : ranks_) w->abort();
  for (auto& g : loss_gradients_) g.clear();
  if (tensor_parallel_ > 1) rebuild_if_broken();
}

int stage_compute::peak_stashed() const { return ranks_[0]->peak_stashed(); }

std::size_t stage_compute::peak_stashed_bytes() const {
  std::size_t bytes = 0;
  for (const auto& w : ranks_) bytes += w->peak_stashed_bytes();
  return bytes;
}

void stage_compute::reset_peak() {
  for (auto& w : ranks_) w->reset_peak();
}

named_tensors stage_compute::whole_parameters() {
  if (tensor_parallel_ == 1) {
    named_tensors out;
    add_parameters(out, ranks_[0]->parameters());
    return out;
  }
  const stage_state state = export_state();
  named_tensors out;
  for (std::size_t i = 0; i < state.tensors.names.size(); ++i)
    if (state.tensors.names[i].rfind(checkpoint_optimizer_prefix, 0) != 0) {
      out.names.push_back(state.tensors.names[i]);
      out.values.push_back(state.tensors.values[i]);
    }
  return out;
}

namespace {

// How a stage-state tensor is cut: as its parameter ("3.weight", or "optimizer/3.weight.m"); axis -1: whole.
shard_layout layout_of(const std::string& name, const std::map<std::string, shard_layout>& layouts) {
  const std::string prefix = checkpoint_optimizer_prefix;
  return sharded_layout_of(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name, layouts);
}

}  // namespace

stage_state stage_compute::export_state() {
  if (tensor_parallel_ == 1) return ranks_[0]->export_state();
  std::vector<stage_state> parts;
  for (auto& w : ranks_) parts.push_back(w->export_state());
  stage_state out = std::move(parts[0]);
  for (std::size_t i = 0; i < out.tensors.names.size(); ++i) {
    const shard_layout layout = layout_of(out.tensors.names[i], layouts_);
    if (layout.axis < 0) continue;
    std::vector<const tensor*> pieces{&out.tensors.values[i]};
    for (std::size_t r = 1; r < parts.size(); ++r) pieces.push_back(&parts[r].tensors.values.at(i));
    out.tensors.values[i] = gather_pieces(pieces, layout);
  }
  return out;
}

void stage_compute::import_state(const stage_state& state) {
  if (tensor_parallel_ == 1) return ranks_[0]->import_state(state);
  const std::size_t T = static_cast<std::size_t>(tensor_parallel_);
  // Rank 0 first: the ranks hold the same names and shapes, so what rank 0 refuses (changing nothing) or takes,
  // every rank would.
  for (std::size_t r = 0; r < T; ++r) {
    stage_state piece{state.stage, state.optimizer_steps, {}};
    for (std::size_t i = 0; i < state.tensors.names.size(); ++i) {
      const tensor& whole = state.tensors.values[i];
      const shard_layout layout = layout_of(state.tensors.names[i], layouts_);
      piece.tensors.names.push_back(state.tensors.names[i]);
      piece.tensors.values.push_back(layout.axis < 0 ? whole : piece_along(whole, layout, r, T));
    }
    ranks_[r]->import_state(piece);
  }
}

}  // namespace ap

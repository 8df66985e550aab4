#include "stage/stage_rank.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/named_tensors.hpp"
#include "collective/shard.hpp"
#include "schedule/schedule.hpp"

namespace ap {

stage_rank::stage_rank(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices,
                           const optimizer_config& optimizer)
    : stage_(stage), chunk_ids_(std::move(chunk_ids)), slices_(std::move(slices)), optimizer_config_(optimizer),
      optimizer_(make_optimizer(optimizer)) {
  if (chunk_ids_.size() != slices_.size())
    throw std::invalid_argument("stage " + std::to_string(stage) + ": " + std::to_string(chunk_ids_.size()) +
                                " chunk ids for " + std::to_string(slices_.size()) + " slices");
  for (auto& s : slices_) s.zero_grad();
}

std::string stage_rank::where(int chunk) const {
  for (std::size_t i = 0; i < chunk_ids_.size(); ++i)
    if (chunk_ids_[i] == chunk) {
      const auto& s = slices_[i];
      return "stage " + std::to_string(stage_) + " (chunk " + std::to_string(chunk) + ", " +
             to_string(layer_range{s.first_index(), s.first_index() + s.size()}) + ": " + s.describe() + ")";
    }
  return "stage " + std::to_string(stage_);
}

sequential& stage_rank::chunk_model(int chunk, const char* action, int microbatch) {
  for (std::size_t i = 0; i < chunk_ids_.size(); ++i)
    if (chunk_ids_[i] == chunk) return slices_[i];
  throw std::logic_error("stage " + std::to_string(stage_) + ": " + action + " microbatch " +
                         std::to_string(microbatch) + " for chunk " + std::to_string(chunk) +
                         ", which this stage does not hold");
}

sequential_cache stage_rank::take_cache(int microbatch, int chunk, const char* action) {
  auto it = caches_.find({microbatch, chunk});
  if (it == caches_.end())
    throw std::logic_error(where(chunk) + ": " + action + " microbatch " + std::to_string(microbatch) +
                           " has no stashed forward");
  sequential_cache cache = std::move(it->second);
  caches_.erase(it);
  return cache;
}

tensor stage_rank::forward(std::uint64_t step, int microbatch, int chunk, int first_sample, const tensor& x) {
  sequential& model = chunk_model(chunk, "forward", microbatch);
  if (caches_.count({microbatch, chunk}))
    throw std::logic_error(where(chunk) + ": forward microbatch " + std::to_string(microbatch) + " twice");
  sequential_cache cache;
  tensor y;
  try {
    y = model.forward(x, cache, forward_context{true, step,
                                                static_cast<std::size_t>(first_sample)});
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", forward microbatch " + std::to_string(microbatch) + ": " + e.what());
  }
  caches_.emplace(std::make_pair(microbatch, chunk), std::move(cache));
  peak_ = std::max(peak_, stashed());
  peak_bytes_ = std::max(peak_bytes_, stashed_bytes());
  return y;
}

std::size_t stage_rank::stashed_bytes() const {
  std::size_t n = 0;
  for (const auto& [key, cache] : caches_) n += ap::stashed_bytes(cache);
  return n;
}

// The chunk's caches of every microbatch, in batch row order, joined into one whole-batch cache
// (Note [joined caches]).
sequential_cache stage_rank::take_joined_cache(int chunk) {
  sequential& model = chunk_model(chunk, "backward", all_microbatches);
  std::vector<std::map<std::pair<int, int>, sequential_cache>::iterator> mine;
  for (auto it = caches_.begin(); it != caches_.end(); ++it)
    if (it->first.second == chunk) mine.push_back(it);  // the map orders them by microbatch
  if (mine.empty())
    throw std::logic_error(where(chunk) + ": whole-batch backward has no stashed forward");
  sequential_cache joined;
  for (std::size_t layer = 0; layer < model.size(); ++layer) {
    std::vector<const layer_cache*> column;
    for (auto it : mine) column.push_back(&it->second.layers.at(layer));
    std::optional<layer_cache> one = layer_cache::join(column);
    if (!one)
      throw std::runtime_error(where(chunk) + ", whole-batch backward: layer " +
                               std::to_string(model.first_index() + layer) + " " + model.at(layer).describe() +
                               " cannot join its microbatch caches (Note [joined caches]): use another schedule");
    joined.layers.push_back(std::move(*one));
  }
  for (auto it : mine) caches_.erase(it);
  return joined;
}

tensor stage_rank::backward(int microbatch, int chunk, const tensor& dy,
                            const std::function<void(layer&)>& layer_done) {
  sequential& model = chunk_model(chunk, "backward", microbatch);
  sequential_cache cache =
      microbatch == all_microbatches ? take_joined_cache(chunk) : take_cache(microbatch, chunk, "backward");
  try {
    return model.backward(dy, cache, /*need_input_grad=*/chunk != 0, layer_done);
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", backward microbatch " + std::to_string(microbatch) + ": " + e.what());
  }
}

tensor stage_rank::backward_input(int microbatch, int chunk, const tensor& dy) {
  sequential& model = chunk_model(chunk, "backward_input", microbatch);
  auto it = caches_.find({microbatch, chunk});
  if (it == caches_.end())
    throw std::logic_error(where(chunk) + ": backward_input microbatch " + std::to_string(microbatch) +
                           " has no stashed forward");
  tensor dx;
  try {
    dx = model.backward_input(dy, it->second, /*need_input_grad=*/chunk != 0);
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", backward_input microbatch " + std::to_string(microbatch) + ": " +
                             e.what());
  }
  // Until its W the microbatch holds its layers' dy's too (Note [memory model]).
  peak_bytes_ = std::max(peak_bytes_, stashed_bytes());
  return dx;
}

void stage_rank::backward_weight(int microbatch, int chunk) {
  sequential& model = chunk_model(chunk, "backward_weight", microbatch);
  sequential_cache cache = take_cache(microbatch, chunk, "backward_weight");
  if (cache.dys.empty())
    throw std::logic_error(where(chunk) + ": backward_weight microbatch " + std::to_string(microbatch) +
                           " before its backward_input");
  try {
    model.backward_weight(cache);
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", backward_weight microbatch " + std::to_string(microbatch) + ": " +
                             e.what());
  }
}

std::vector<parameter> stage_rank::parameters() {
  std::vector<parameter> all;
  for (auto& s : slices_) {
    auto p = s.parameters();
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

std::vector<parameter> stage_rank::chunk_parameters(int chunk) {
  return chunk_model(chunk, "reduce_grad", all_microbatches).parameters();
}

void stage_rank::apply_optimizer(std::size_t part, std::size_t parts) {
  optimizer_->step_part(parameters(), part, parts);
  for (auto& s : slices_) s.zero_grad();
}

namespace {

void copy_part(const tensor& from, tensor& into, std::size_t part, std::size_t parts) {
  if (from.shape() != into.shape() || from.type() != into.type() || from.type() != dtype::float32)
    throw std::logic_error("take_part: " + shape_string(from) + " into " + shape_string(into));
  const auto [first, last] = shard_rows(into.size(), parts, part);
  std::copy(from.data() + first, from.data() + last, into.data() + first);
}

}  // namespace

void stage_rank::take_part(stage_rank& owner, std::size_t part, std::size_t parts, bool state) {
  const std::vector<parameter> mine = parameters(), theirs = owner.parameters();
  if (mine.size() != theirs.size()) throw std::logic_error("take_part: the ranks hold different layers");
  for (std::size_t i = 0; i < mine.size(); ++i) copy_part(*theirs[i].value, *mine[i].value, part, parts);
  if (!state) return;
  const std::map<std::string, tensor*> their_state = owner.optimizer_->state();
  for (const auto& [key, t] : optimizer_->state()) copy_part(*their_state.at(key), *t, part, parts);
  // The steps need no copy: every part counted every step (optimizer::step_part).
}

void stage_rank::abort() {
  caches_.clear();
  for (auto& s : slices_) s.zero_grad();
}

stage_state stage_rank::export_state() {
  stage_state out;
  out.stage = stage_;
  out.optimizer_steps = optimizer_->steps();
  add_parameters(out.tensors, parameters());
  add_optimizer_state(out.tensors, optimizer_->state(), checkpoint_optimizer_prefix);
  return out;
}

void stage_rank::import_state(const stage_state& state) {
  const auto refuse = [&](const std::string& what) {
    throw std::runtime_error("stage " + std::to_string(stage_) + ": cannot load its state: " + what);
  };
  if (state.optimizer_steps < 0) refuse("negative optimizer steps " + std::to_string(state.optimizer_steps));
  tensor_sources given;
  if (const std::string why = add_sources(given, state.tensors); !why.empty()) refuse(why);
  const bool has_optimizer_tensors = std::any_of(given.begin(), given.end(), [](const auto& named) {
    return named.first.rfind(checkpoint_optimizer_prefix, 0) == 0;
  });

  // Bind into the parameters and a fresh optimizer (Note [binding named tensors]: all checked first).
  const std::vector<parameter> params = parameters();
  std::unique_ptr<optimizer> fresh = make_optimizer(optimizer_config_);
  if (state.optimizer_steps > 0 || has_optimizer_tensors) fresh->init_state(params);
  fresh->set_steps(static_cast<long>(state.optimizer_steps));
  std::vector<tensor_target> targets = parameter_targets(params, "its parameter");
  for (auto& t : optimizer_state_targets(fresh->state(), checkpoint_optimizer_prefix, "its optimizer state"))
    targets.push_back(std::move(t));
  std::string held;
  for (const auto& sl : slices_)
    held += (held.empty() ? "" : ", ") + to_string(layer_range{sl.first_index(), sl.first_index() + sl.size()});
  if (const std::string why = bind_named_tensors(
          targets, given, "neither a parameter of this stage (" + held + ") nor its optimizer state");
      !why.empty())
    refuse(why);
  optimizer_ = std::move(fresh);
  abort();
}

}  // namespace ap

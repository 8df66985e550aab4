#include "stage/stage_worker.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "checkpoint/checkpoint.hpp"

namespace ap {

stage_worker::stage_worker(int stage, std::vector<int> chunk_ids, std::vector<sequential> slices,
                           const optimizer_config& optimizer)
    : stage_(stage), chunk_ids_(std::move(chunk_ids)), slices_(std::move(slices)), optimizer_config_(optimizer),
      optimizer_(make_optimizer(optimizer)) {
  if (chunk_ids_.size() != slices_.size())
    throw std::invalid_argument("stage " + std::to_string(stage) + ": " + std::to_string(chunk_ids_.size()) +
                                " chunk ids for " + std::to_string(slices_.size()) + " slices");
  for (auto& s : slices_) s.zero_grad();
}

std::string stage_worker::where(int chunk) const {
  for (std::size_t i = 0; i < chunk_ids_.size(); ++i)
    if (chunk_ids_[i] == chunk) {
      const auto& s = slices_[i];
      return "stage " + std::to_string(stage_) + " (chunk " + std::to_string(chunk) + ", " +
             to_string(layer_range{s.first_index(), s.first_index() + s.size()}) + ": " + s.describe() + ")";
    }
  return "stage " + std::to_string(stage_);
}

sequential& stage_worker::chunk_model(int chunk, const char* action, int microbatch) {
  for (std::size_t i = 0; i < chunk_ids_.size(); ++i)
    if (chunk_ids_[i] == chunk) return slices_[i];
  throw std::logic_error("stage " + std::to_string(stage_) + ": " + action + " microbatch " +
                         std::to_string(microbatch) + " for chunk " + std::to_string(chunk) +
                         ", which this stage does not hold");
}

sequential_cache stage_worker::take_cache(int microbatch, int chunk, const char* action) {
  auto it = caches_.find({microbatch, chunk});
  if (it == caches_.end())
    throw std::logic_error(where(chunk) + ": " + action + " microbatch " + std::to_string(microbatch) +
                           " has no stashed forward");
  sequential_cache cache = std::move(it->second);
  caches_.erase(it);
  return cache;
}

tensor stage_worker::forward(int step, int microbatch, int chunk, int first_sample, const tensor& x) {
  sequential& model = chunk_model(chunk, "forward", microbatch);
  if (caches_.count({microbatch, chunk}))
    throw std::logic_error(where(chunk) + ": forward microbatch " + std::to_string(microbatch) + " twice");
  sequential_cache cache;
  tensor y;
  try {
    y = model.forward(x, cache, forward_context{true, static_cast<std::uint64_t>(step),
                                                static_cast<std::size_t>(first_sample)});
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", forward microbatch " + std::to_string(microbatch) + ": " + e.what());
  }
  caches_.emplace(std::make_pair(microbatch, chunk), std::move(cache));
  peak_ = std::max(peak_, stashed());
  return y;
}

tensor stage_worker::backward(int microbatch, int chunk, const tensor& dy) {
  sequential& model = chunk_model(chunk, "backward", microbatch);
  sequential_cache cache = take_cache(microbatch, chunk, "backward");
  try {
    return model.backward(dy, cache, /*need_input_grad=*/chunk != 0);
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", backward microbatch " + std::to_string(microbatch) + ": " + e.what());
  }
}

tensor stage_worker::backward_input(int microbatch, int chunk, const tensor& dy) {
  sequential& model = chunk_model(chunk, "backward_input", microbatch);
  auto it = caches_.find({microbatch, chunk});
  if (it == caches_.end())
    throw std::logic_error(where(chunk) + ": backward_input microbatch " + std::to_string(microbatch) +
                           " has no stashed forward");
  try {
    return model.backward_input(dy, it->second, /*need_input_grad=*/chunk != 0);
  } catch (const std::exception& e) {
    throw std::runtime_error(where(chunk) + ", backward_input microbatch " + std::to_string(microbatch) + ": " +
                             e.what());
  }
}

void stage_worker::backward_weight(int microbatch, int chunk) {
  sequential& model = chunk_model(chunk, "backward_weight", microbatch);
  sequential_cache cache = take_cache(microbatch, chunk, "backward_weight");
  if (cache.dys.empty())
    throw std::logic_error(where(chunk) + ": backward_weight microbatch " + std::to_string(microbatch) +
                           " before its backward_input");
  model.backward_weight(cache);
}

std::vector<parameter> stage_worker::parameters() {
  std::vector<parameter> all;
  for (auto& s : slices_) {
    auto p = s.parameters();
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

void stage_worker::apply_optimizer() {
  optimizer_->step(parameters());
  for (auto& s : slices_) s.zero_grad();
}

void stage_worker::abort() {
  caches_.clear();
  for (auto& s : slices_) s.zero_grad();
}

stage_state stage_worker::export_state() {
  stage_state out;
  out.stage = stage_;
  out.optimizer_steps = optimizer_->steps();
  for (const parameter& p : parameters()) {
    out.tensors.names.push_back(p.name);
    out.tensors.values.push_back(*p.value);
  }
  for (const auto& [key, t] : optimizer_->state()) {
    out.tensors.names.push_back(checkpoint_optimizer_prefix + key);
    out.tensors.values.push_back(*t);
  }
  return out;
}

void stage_worker::import_state(const stage_state& state) {
  const std::string who = "stage " + std::to_string(stage_);
  const auto refuse = [&](const std::string& what) { throw std::runtime_error(who + ": cannot load its state: " + what); };
  const named_tensors& given = state.tensors;
  if (given.names.size() != given.values.size())
    refuse(std::to_string(given.names.size()) + " names for " + std::to_string(given.values.size()) + " tensors");
  if (state.optimizer_steps < 0) refuse("negative optimizer steps " + std::to_string(state.optimizer_steps));
  std::map<std::string, const tensor*> by_name;
  bool has_optimizer_tensors = false;
  for (std::size_t i = 0; i < given.names.size(); ++i) {
    if (!by_name.emplace(given.names[i], &given.values[i]).second) refuse("tensor " + given.names[i] + " given twice");
    has_optimizer_tensors |= given.names[i].rfind(checkpoint_optimizer_prefix, 0) == 0;
  }

  // Check everything against a fresh optimizer holding the state this stage's parameters need ...
  const std::vector<parameter> params = parameters();
  std::unique_ptr<optimizer> fresh = make_optimizer(optimizer_config_);
  if (state.optimizer_steps > 0 || has_optimizer_tensors) fresh->init_state(params);
  fresh->set_steps(static_cast<long>(state.optimizer_steps));
  const std::map<std::string, tensor*> fresh_state = fresh->state();
  const auto source = [&](const std::string& name, const tensor& mine, const char* what) -> const tensor& {
    const auto it = by_name.find(name);
    if (it == by_name.end()) refuse("missing tensor " + name + " (" + what + ")");
    if (it->second->shape() != mine.shape())
      refuse("tensor " + name + " has shape " + shape_string(*it->second) + " but " + what + " has shape " +
             shape_string(mine));
    return *it->second;
  };
  for (const parameter& p : params) source(p.name, *p.value, "its parameter");
  for (const auto& [key, t] : fresh_state) source(checkpoint_optimizer_prefix + key, *t, "its optimizer state");
  if (by_name.size() != params.size() + fresh_state.size())
    for (const auto& [name, t] : by_name) {
      const bool mine = std::any_of(params.begin(), params.end(), [&](const parameter& p) { return p.name == name; }) ||
                        (name.rfind(checkpoint_optimizer_prefix, 0) == 0 &&
                         fresh_state.count(name.substr(std::string(checkpoint_optimizer_prefix).size())));
      if (mine) continue;
      std::string held;
      for (const auto& sl : slices_)
        held += (held.empty() ? "" : ", ") + to_string(layer_range{sl.first_index(), sl.first_index() + sl.size()});
      refuse("unexpected tensor " + name + ": neither a parameter of this stage (" + held +
             ") nor its optimizer state");
    }

  // ... and only then change anything.
  for (const parameter& p : params) {
    const tensor& t = source(p.name, *p.value, "its parameter");
    std::copy(t.data(), t.data() + t.size(), p.value->data());
  }
  for (const auto& [key, t] : fresh_state) {
    const tensor& saved = source(checkpoint_optimizer_prefix + key, *t, "its optimizer state");
    std::copy(saved.data(), saved.data() + saved.size(), t->data());
  }
  optimizer_ = std::move(fresh);
  abort();
}

}  // namespace ap

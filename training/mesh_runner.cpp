#include "training/mesh_runner.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "collective/shard.hpp"
#include "failure/error.hpp"
#include "model/grad_clip.hpp"
#include "model/layer_spec.hpp"
#include "model/tensor_parallel.hpp"
#include "tensor/compute.hpp"

namespace ap {

struct mesh_runner::worker {
  int replica = 0, rank = 0;
  sequential model;
  std::unique_ptr<optimizer> opt;
  std::shared_ptr<process_group> tp, dp;
  std::map<const tensor*, shard_layout> layouts;  // this rank's sharded parameter values (sharded_layouts)
  float loss_share = 0.0f;
  std::string error;
  error_code code = error_code::none;  // collective: a peer's failure seen from here, not a cause
};

namespace {

// Values of `from`'s parameters into `to`'s, which have the same names and shapes (before any split).
void copy_parameters(sequential& from, sequential& to) {
  auto a = from.parameters(), b = to.parameters();
  for (std::size_t i = 0; i < a.size(); ++i) *b[i].value = *a[i].value;
}

// How the parameter a state tensor ("3.weight.m") belongs to is cut; axis -1 when it is whole.
shard_layout state_layout(const std::string& state_name, const std::vector<parameter>& params,
                          const std::map<const tensor*, shard_layout>& layouts) {
  std::map<std::string, shard_layout> by_name;
  for (const parameter& p : params)
    if (auto it = layouts.find(p.value); it != layouts.end()) by_name[p.name] = it->second;
  return sharded_layout_of(state_name, by_name);
}

// "column_linear:12:10" for a split layer, "block (head_parallel_attention:16:4, ...)" for a composite
// holding split layers; empty for a whole one.
std::string split_parts_text(const std::string& spec) {
  const layer_spec s = parse_layer_spec(spec);
  if (s.parts.empty())
    return s.kind == "column_linear" || s.kind == "row_linear" || s.kind == "head_parallel_attention" ? spec : "";
  std::string inner;
  for (const std::string& part : s.parts) {
    std::string text = split_parts_text(part);
    if (text.empty()) continue;
    const std::size_t open = text.find(" (");  // a nested composite: its split parts only
    if (open != std::string::npos) text = text.substr(open + 2, text.size() - open - 3);
    inner += (inner.empty() ? "" : ", ") + text;
  }
  return inner.empty() ? "" : s.kind + " (" + inner + ")";
}

}  // namespace

mesh_runner::mesh_runner(sequential& model, const optimizer_config& optimizer, const std::string& loss,
                         mesh_options options)
    : model_(model), optimizer_config_(optimizer), whole_optimizer_(make_optimizer(optimizer)),
      loss_(make_loss(loss)), options_(options) {
  const int D = options.data_parallel, T = options.tensor_parallel;
  if (D < 1) throw std::invalid_argument("--data-parallel must be at least 1, got " + std::to_string(D));
  if (T < 1) throw std::invalid_argument("--tensor-parallel must be at least 1, got " + std::to_string(T));
  specs_ = T > 1 ? tensor_parallel_specs(model.layer_specs()) : model.layer_specs();
  for (int d = 0; d < D; ++d)
    tp_groups_.push_back(std::make_unique<local_group>("tensor-parallel replica " + std::to_string(d), T, options.timeout));
  for (int t = 0; t < T; ++t)
    dp_groups_.push_back(std::make_unique<local_group>("data-parallel rank " + std::to_string(t), D, options.timeout));
  for (int d = 0; d < D; ++d)
    for (int t = 0; t < T; ++t) {
      auto w = std::make_unique<worker>();
      w->replica = d;
      w->rank = t;
      w->model = sequential::from_layer_specs(specs_, model.first_index());
      copy_parameters(model, w->model);
      w->model.set_compute_dtype(model.compute_dtype());  // Note [compute dtype]
      w->tp = std::shared_ptr<process_group>(tp_groups_[d]->member(t));
      w->dp = std::shared_ptr<process_group>(dp_groups_[t]->member(d));
      if (T > 1) {
        const std::size_t joined = join_tensor_parallel(w->model, w->tp);  // refuses widths T does not divide
        if (joined == 0)
          throw std::invalid_argument("--tensor-parallel " + std::to_string(T) +
                                      ": the model has no Linear pair to split over the ranks, and no attention (Note "
                                      "[tensor-parallel specs]: two Linear layers with only an activation between them)");
      }
      w->layouts = sharded_layouts(w->model);
      w->opt = make_optimizer(optimizer);
      workers_.push_back(std::move(w));
    }
}

mesh_runner::~mesh_runner() = default;

std::string mesh_runner::describe() const {
  const int D = options_.data_parallel, T = options_.tensor_parallel;
  std::string text = std::to_string(D) + " data-parallel replica" + (D == 1 ? "" : "s") + " x " + std::to_string(T) +
                     " tensor-parallel rank" + (T == 1 ? "" : "s") + " = " + std::to_string(D * T) + " thread" +
                     (D * T == 1 ? "" : "s");
  // Each split layer by index, a composite with its split parts; equal neighbours (a GPT's blocks) as a range.
  std::string split;
  std::size_t i = 0;
  while (i < specs_.size()) {
    const std::string what = split_parts_text(specs_[i]);
    std::size_t end = i + 1;
    while (!what.empty() && end < specs_.size() && specs_[end] == specs_[i]) ++end;
    if (!what.empty())
      split += (split.empty() ? "" : ", ") + std::to_string(model_.first_index() + i) +
               (end - i > 1 ? "-" + std::to_string(model_.first_index() + end - 1) : "") + " " + what;
    i = end;
  }
  return text + (split.empty() ? std::string() : "; split: " + split);
}

float mesh_runner::train_step(const tensor& inputs, const tensor& labels, std::uint64_t step) {
  const std::size_t D = static_cast<std::size_t>(options_.data_parallel);
  const std::size_t samples = inputs.dimension() == 0 ? 0 : inputs.shape()[0];
  if (samples < D)
    throw std::invalid_argument("step " + std::to_string(step) + ": a batch of " + std::to_string(samples) +
                                " samples cannot feed " + std::to_string(D) + " data-parallel replicas");
  const std::size_t batch_rows = loss_->batch_rows(labels);
  model_.check_input(inputs);  // the whole model names a bad width or dtype before any thread starts
  std::vector<std::thread> threads;
  for (auto& wp : workers_)
    threads.emplace_back([&, w = wp.get()] {
      w->error.clear();
      w->code = error_code::none;
      try {
        set_compute_threads(1);
        const auto [first, last] = shard_rows(samples, D, static_cast<std::size_t>(w->replica));
        const tensor x = slice_rows(inputs, first, last), y = slice_rows(labels, first, last);
        sequential& m = w->model;
        m.zero_grad();
        std::vector<layer_cache> caches(m.size());
        const forward_context ctx{true, step, first};
        tensor h = x;
        for (std::size_t i = 0; i < m.size(); ++i)
          h = with_layer_named(m.first_index() + i, m.at(i), true, [&] { return m.at(i).forward(h, caches[i], ctx); });
        try {
          w->loss_share = loss_->compute_loss(h, y, batch_rows);
        } catch (const std::domain_error& e) {
          throw diverged_error("step " + std::to_string(step) + ": " + e.what());
        }
        tensor dy = loss_->compute_gradient(h, y, batch_rows);
        std::vector<collective_handle> reductions;  // Note [data parallelism]: one bucket per layer
        for (std::size_t i = m.size(); i-- > 0;) {
          tensor below;
          with_layer_named(m.first_index() + i, m.at(i), true, [&] {
            m.at(i).backward(dy, caches[i], i == 0 ? nullptr : &below);
            return 0;
          });
          caches[i].clear();
          if (D > 1)
            for (parameter& p : m.at(i).parameters("")) reductions.push_back(w->dp->all_reduce(*p.grad));
          dy = std::move(below);
        }
        for (auto& r : reductions) r.wait();
        const auto params = m.parameters();
        if (options_.clip_grad_norm > 0.0f) {  // Note [global gradient clipping]
          tensor sum = tensor::from_shape({1});
          sum.data()[0] = static_cast<float>(gradient_square_sum(
              params, [&](const parameter& p) { return w->rank == 0 || w->layouts.count(p.value) > 0; }));
          if (options_.tensor_parallel > 1) w->tp->all_reduce(sum).wait();
          scale_gradients(params, clip_factor(sum.data()[0], options_.clip_grad_norm));
        }
        w->opt->step(params);
      } catch (const collective_error& e) {
        w->error = e.what();
        w->code = error_code::collective;
      } catch (const std::exception& e) {
        w->error = e.what();
        w->code = code_of(e);
        w->tp->abort("replica " + std::to_string(w->replica) + " rank " + std::to_string(w->rank) + " failed");
        w->dp->abort("replica " + std::to_string(w->replica) + " rank " + std::to_string(w->rank) + " failed");
      }
    });
  for (auto& t : threads) t.join();
  // The cause, not a peer's view of it: an error other than a collective's first.
  const worker* failed = nullptr;
  for (auto& w : workers_)
    if (!w->error.empty() && (!failed || (failed->code == error_code::collective && w->code != error_code::collective)))
      failed = w.get();
  if (failed) {
    const std::string where = options_.data_parallel * options_.tensor_parallel > 1
                                  ? " (replica " + std::to_string(failed->replica) + ", tensor-parallel rank " +
                                        std::to_string(failed->rank) + ")"
                                  : "";
    throw_step_error(failed->code, failed->error + where);  // Note [errors as codes]: the std type follows the code
  }
  float total = 0.0f;
  for (auto& w : workers_)
    if (w->rank == 0) total += w->loss_share;
  return total;
}

void mesh_runner::gather_into_whole() {
  const int T = options_.tensor_parallel;
  auto whole = model_.parameters();
  std::vector<std::vector<parameter>> ranks;  // replica 0's ranks
  for (int t = 0; t < T; ++t) ranks.push_back(workers_[static_cast<std::size_t>(t)]->model.parameters());
  for (std::size_t k = 0; k < whole.size(); ++k) {
    const auto& layouts = workers_[0]->layouts;
    auto it = layouts.find(ranks[0][k].value);
    if (it == layouts.end()) {
      *whole[k].value = *ranks[0][k].value;
      continue;
    }
    std::vector<const tensor*> pieces;
    for (int t = 0; t < T; ++t) pieces.push_back(ranks[static_cast<std::size_t>(t)][k].value);
    gather_along(pieces, it->second, *whole[k].value);
  }
  // The optimizer state, the same way: each state tensor follows its parameter's split.
  const auto whole_params = model_.parameters();
  whole_optimizer_->init_state(whole_params);
  for (auto& w : workers_) w->opt->init_state(w->model.parameters());
  auto whole_state = whole_optimizer_->state();
  std::vector<std::map<std::string, tensor*>> rank_states;
  for (int t = 0; t < T; ++t) rank_states.push_back(workers_[static_cast<std::size_t>(t)]->opt->state());
  const auto rank0_params = workers_[0]->model.parameters();
  for (auto& [name, value] : whole_state) {
    const shard_layout layout = state_layout(name, rank0_params, workers_[0]->layouts);
    if (layout.axis < 0) {
      *value = *rank_states[0].at(name);
      continue;
    }
    std::vector<const tensor*> pieces;
    for (int t = 0; t < T; ++t) pieces.push_back(rank_states[static_cast<std::size_t>(t)].at(name));
    gather_along(pieces, layout, *value);
  }
  whole_optimizer_->set_steps(workers_[0]->opt->steps());
}

void mesh_runner::scatter_from_whole() {
  const std::size_t T = static_cast<std::size_t>(options_.tensor_parallel);
  auto whole = model_.parameters();
  auto whole_state = whole_optimizer_->state();
  for (auto& w : workers_) {
    auto mine = w->model.parameters();
    for (std::size_t k = 0; k < whole.size(); ++k) {
      auto it = w->layouts.find(mine[k].value);
      *mine[k].value = it == w->layouts.end() ? *whole[k].value
                                           : piece_along(*whole[k].value, it->second, static_cast<std::size_t>(w->rank), T);
    }
    w->opt->init_state(mine);
    for (auto& [name, value] : w->opt->state()) {
      const shard_layout layout = state_layout(name, mine, w->layouts);
      const tensor& from = *whole_state.at(name);
      *value = layout.axis < 0 ? from : piece_along(from, layout, static_cast<std::size_t>(w->rank), T);
    }
    w->opt->set_steps(whole_optimizer_->steps());
  }
}

tensor mesh_runner::predict(const tensor& inputs) {
  gather_into_whole();
  return model_.forward(inputs);
}

void mesh_runner::save_checkpoint(const std::string& path, const training_state& state) {
  gather_into_whole();
  ap::save_checkpoint(path, model_, whole_optimizer_.get(), state);
}

training_state mesh_runner::load_checkpoint(const std::string& path) {
  whole_optimizer_->init_state(model_.parameters());
  training_state state = ap::load_checkpoint(path, model_, whole_optimizer_.get());
  scatter_from_whole();
  return state;
}

}  // namespace ap

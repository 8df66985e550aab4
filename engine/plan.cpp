// The engine's plan: the model and its data (a user's, or a spec's and the configured files).
#include <algorithm>

#include "checkpoint/gpt2_weights.hpp"
#include "engine/engine_parts.hpp"
#include "data/fashion_mnist.hpp"
#include "data/text_corpus.hpp"
#include "model/gpt_spec.hpp"

namespace ap::engine_parts {

log_line::~log_line() {
  std::string text = text_.str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (sink_ && !text.empty()) sink_(text);
}

batch first_rows(const data_source& d, std::size_t rows) {
  return gather_in_order(d, 0, std::clamp<std::size_t>(rows, 1, std::max<std::size_t>(d.size(), 1)));
}

void model_from_init_file(run_config& o, train_plan& plan) {
  const bool model_given = std::find(o.given_keys.begin(), o.given_keys.end(), "model") != o.given_keys.end();
  if (o.init_from_file.empty() || !plan.model.empty() || model_given || o.model != run_config{}.model) return;
  gpt2_file_info info;
  try {
    info = read_gpt2_info(o.init_from_file);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument("--init-from: " + std::string(e.what()));
  }
  if (info.heads_from.empty())
    throw std::invalid_argument("--init-from " + o.init_from_file + ": the file does not say how many heads its "
                                "attention has (no n_head in its metadata or in a config.json beside it): give --model " +
                                gpt_spec_text(info.config) + " with heads=N");
  o.model = gpt_spec_text(info.config);
  say(plan) << "init-from: --model " << o.model << ", the shape of " << o.init_from_file << " (heads from "
            << info.heads_from << ")";
}

void plan_model(const run_config& o, train_plan& plan) {
  plan.language_model = o.language_model() || (plan.train_set && plan.train_set->is_sequence());
  if (!o.train.sequence_lengths.empty() && !plan.language_model)
    throw std::invalid_argument("--sequence-lengths needs a gpt model (windows of tokens), not '" + o.model + "'");
  if (plan.model.size() == 0) plan.model = sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed});
  if (o.language_model()) plan.context = parse_gpt_spec(o.model).context;
  else if (plan.language_model) plan.context = plan.train_set->sample_shape().back();  // a user's model and windows
  for (std::size_t length : o.train.sequence_lengths)
    if (plan.context > 0 && length > plan.context)
      throw std::invalid_argument("--sequence-lengths " + std::to_string(length) + " is longer than the model's " +
                                  std::to_string(plan.context) + " positions (the spec's key 'context')");
  if (!o.init_from_file.empty()) {
    load_gpt2_weights(o.init_from_file, plan.model, parse_gpt_spec(o.model));
    say(plan) << "init-from: the weights of " << o.init_from_file << " ("
              << gpt2_format_name(detect_gpt2_format(o.init_from_file)) << ")";
  }
  plan.compute_dtype = *parse_dtype(o.dtype);
  plan.model.set_compute_dtype(plan.compute_dtype);
  plan.model.set_recompute(parse_recompute_mode(o.recompute));
}

void plan_data(const run_config& o, train_plan& plan) {
  if (plan.train_set) return;
  data_config data = o.data;
  if (data.path.empty() && plan.language_model) {
    data.path = o.text_path.empty() ? default_text_path : o.text_path;
    data.format = "text";
  }
  if (data.path.empty()) data.path = default_fashion_mnist_dir;
  // Note [resumed trajectory]
  const std::uint64_t seed = o.resume_file.empty() ? o.train.seed : read_checkpoint_info(o.resume_file).state.data_seed;
  const std::size_t classes = plan.model.out_features().value_or(0);
  data_sets sets = open_data(data, plan.context, classes, seed, o.validation_windows);
  say(plan) << "data: " << sets.train->name() << ", " << sets.train->size() << " training samples"
            << (sets.validation ? ", " + std::to_string(sets.validation->size()) + " validation samples from " +
                                      sets.validation->name()
                                : std::string())
            << "\n";
  plan.train_set = std::move(sets.train);
  plan.test_set = std::move(sets.validation);
}

}  // namespace ap::engine_parts

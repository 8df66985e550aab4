// `actorpipe train`'s plan: the model and its data (Fashion-MNIST, or a GPT's windows of text).
#include <algorithm>
#include <iostream>

#include "cli/train_run.hpp"
#include "model/gpt_spec.hpp"

namespace ap::cli {
namespace {

// A GPT's training and validation sets: windows of the text's training part at offsets drawn from `seed` (as
// many as it has context-sized pieces), and the validation part's first windows in order.
void load_language_model_data(const train_options& o, std::uint64_t seed, train_plan& plan) {
  const gpt_config gpt = parse_gpt_spec(o.model);
  const text_corpus corpus = load_text_corpus(o.text_path);
  check_corpus_fills(corpus, gpt.context);
  std::cerr << "text: " << o.text_path << ", " << corpus.files << " files, " << corpus.train.size()
            << " training and " << corpus.validation.size() << " validation bytes\n";
  plan.context = gpt.context;
  plan.train_set = text_windows(corpus.train, gpt.context,
                                std::max<std::size_t>(1, corpus.train.size() / gpt.context), seed, "text train");
  plan.test_set = text_windows_in_order(corpus.validation, gpt.context, o.validation_windows, "text validation");
}

dataset first_samples(dataset d, std::size_t n) {
  if (n == 0 || n >= d.size()) return d;
  d.inputs = slice_rows(d.inputs, 0, n);
  d.labels = slice_rows(d.labels, 0, n);
  return d;
}

}  // namespace

train_plan plan_model(const train_options& o, std::optional<schedule> user_schedule) {
  train_plan plan;
  plan.user_schedule = std::move(user_schedule);
  plan.language_model = is_gpt_spec(o.model);
  if (!o.train.sequence_lengths.empty() && !plan.language_model)
    throw std::invalid_argument("--sequence-lengths needs a gpt model (windows of text), not '" + o.model + "'");
  if (plan.language_model) {
    // The windows a resumed run trains on are the checkpointed run's: Note [resumed trajectory].
    const std::uint64_t seed = o.resume_file.empty() ? o.train.seed : read_checkpoint_info(o.resume_file).state.data_seed;
    load_language_model_data(o, seed, plan);
    for (std::size_t length : o.train.sequence_lengths)
      if (length > plan.context)
        throw std::invalid_argument("--sequence-lengths " + std::to_string(length) + " is longer than the model's " +
                                    std::to_string(plan.context) + " positions (the spec's key 'context')");
  }
  plan.compute_dtype = *parse_dtype(o.dtype);  // checked by dtype_name()
  plan.model = sequential::from_spec(o.model, sequential_options{o.activation, o.init_seed});
  plan.model.set_compute_dtype(plan.compute_dtype);
  plan.model.set_recompute(parse_recompute_mode(o.recompute));  // checked by the option's choices
  return plan;
}

void plan_data(const train_options& o, train_plan& plan) {
  if (!plan.language_model) {
    plan.train_set = load_fashion_mnist("train", o.data_dir);
    plan.test_set = load_fashion_mnist("test", o.data_dir);
  }
  plan.train_set = first_samples(std::move(plan.train_set), o.train_limit);
}

}  // namespace ap::cli

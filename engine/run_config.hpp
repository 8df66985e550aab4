// One run's whole configuration, read from JSON (`train --config run.json`) or flags alike: every key is a flag of
// the same name, listed once in run_config.cpp and validated in one place (check_run_config).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "data/open_data.hpp"
#include "model/optimizer.hpp"
#include "training/data_tensor_runner.hpp"
#include "training/trainer.hpp"

namespace ap {

// A configuration as JSON, its keys in list order.
using config_document = nlohmann::ordered_json;

struct run_config {
  // Layer widths ("784-512-10") or a spec ("gpt:layers=4,dim=256,heads=8,context=128").
  std::string model = "784-512-256-10";
  std::string activation = "relu";
  std::uint64_t init_seed = 1;
  std::string loss = "cross_entropy";  // model/loss.hpp
  // Empty data.path: Fashion-MNIST for a classifier, `text_path` for a gpt (data/open_data.hpp).
  data_config data;
  std::string text_path;  // empty: the fortunes
  std::size_t eval_every = 0;  // 0: at the end only
  std::size_t validation_windows = 256;  // at most
  train_config train;
  optimizer_config optimizer;
  // The mesh: stages 0 trains in one process (D x T runner).
  int stages = 0;
  int threads = 0;  // Note [cores per rank]; 0: the cores divided
  data_tensor_options mesh;
  pipeline_options pipe;
  std::string partition = "params";  // Note [default partition]; layers_per_chunk overrides
  std::string schedule_file;  // replaces pipe.schedule
  long timeout_ms = default_timeout.count();
  long restart_wait_ms = 60000;
  int elastic = 0;  // Note [elastic runs]
  std::string dtype = "fp32";  // Note [compute dtype]
  std::string recompute = "none";  // Note [recomputation]
  std::string max_memory;  // e.g. "2G" (Note [memory budget])
  bool auto_config = false;  // Note [automatic configuration]
  int auto_trials = 3;             // Note [auto trials]
  std::string collectives = "auto";  // auto, ring, gloo or by-size (Note [collective backends])
  std::string rendezvous;  // "env": Note [environment rendezvous]
  long rendezvous_timeout_s = 120;  // Note [rendezvous fails fast]
  // Outputs; empty: none.
  std::string checkpoint_file, resume_file, export_file, trace_file, plot_file, timeline_file;
  std::string log_file;  // Note [metrics log]
  // GPT-2 weights to start from and to write at the end (Note [GPT-2 weight files]); empty: none.
  std::string init_from_file, export_as_file;
  bool stage_log = false;
  // The flags given on a command line: one that means nothing here is refused even at its default. Not a key.
  std::vector<std::string> given_keys;

  bool language_model() const;
};

// One key of the run configuration, as the flag and the JSON key of the same name.
struct config_key {
  std::string name;
  std::string help;
  // Checks a value given as text; returns "" or why not, without the key's name.
  std::function<std::string(const std::string&)> check;
  std::string group;  // for --help
  bool pipeline_only = false;
};

// The field a key sets, by type.
static_assert(std::is_same_v<std::size_t, std::uint64_t>, "a config field's uint64_t is its size_t");
using config_field = std::variant<std::string*, bool*, int*, long*, std::size_t*, float*, double*,
                                  std::vector<std::size_t>*, std::vector<std::string>*>;

// Every key of `c` with its field, in --help and print_config order: the one list.
void for_each_config_key(run_config& c, const std::function<void(const config_key&, config_field)>& visit);

// Sets the keys of `json` on `c`; `source` and `text` locate a bad key ("run.json:7: key 'batch-size': ...").
// Throws std::invalid_argument naming the key; `c` is then unchanged.
void apply_config_json(run_config& c, const config_document& json, const std::string& source = "",
                       const std::string& text = "", bool record_given = false);
// Reads a JSON file of keys over the defaults; std::invalid_argument names file and line.
run_config read_run_config(const std::string& path);
// Every key with its value; apply_config_json reads it back to the same config.
config_document config_json(const run_config& c);

// The checks between keys and of the files a run needs, before any work; std::invalid_argument names the key,
// `warn` gets what is unused. Returns the parsed schedule file, if any; a resumed checkpoint must match `model`.
std::optional<schedule> check_run_config(const run_config& c,
                                         const std::function<void(const std::string&)>& warn = {},
                                         const sequential* model = nullptr);

// Throws std::invalid_argument naming `key` and path unless a file can be created in `path`'s folder; "" passes.
void check_output_path(const std::string& key, const std::string& path);

}  // namespace ap

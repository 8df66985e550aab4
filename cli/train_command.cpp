// `actorpipe train`: flags (and --config FILE) to the engine; its result as one JSON line. The engine decides.
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "engine/engine.hpp"
#include "cli/rendezvous.hpp"

namespace ap::cli {
namespace {

// The progress line, rewritten in place on a terminal (a log file gets the epoch lines only).
class progress_printer {
 public:
  explicit progress_printer(const run_config& c) : on_(isatty(STDERR_FILENO) == 1 && !c.stage_log), epochs_(c.train.epochs) {}
  void step(const step_progress& p, float lr) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200) && p.steps_done != p.steps_total) return;
    last_ = now;
    std::cerr << "\r\033[K" << progress_line(p, epochs_) << "  lr " << lr << std::flush;
    shown_ = true;
  }
  void line(const std::string& text) {
    finish();
    std::cerr << text << "\n";
  }
  void finish() {
    if (shown_) std::cerr << "\r\033[K";
    shown_ = false;
  }

 private:
  bool on_;
  std::size_t epochs_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

void run_train(const run_config& config, bool print_config, std::function<std::vector<std::string>()> joined = {}) {
  auto progress = std::make_shared<progress_printer>(config);
  engine_callbacks callbacks;
  callbacks.joining_nodes = std::move(joined);
  callbacks.log = [progress](const std::string& line) { progress->line(line); };
  callbacks.on_step = [progress](const step_progress& p, float lr) { progress->step(p, lr); };
  engine e(config, callbacks);
  if (print_config) {  // without training
    run_config resolved = e.resolve();
    resolved.auto_config = false;
    std::cout << config_json(resolved).dump(2) << std::endl;
    return;
  }
  const run_result result = e.run();
  progress->finish();
  std::cout << result.to_json().dump() << std::endl;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<run_config>();
  auto* cmd = app.add_subcommand("train", "train a model: Fashion-MNIST, your .npy, CSV or token files, in one process "
                                          "or on a pipeline with --stages");
  // Every key of the run configuration is a flag of the same name, checked on its text by the key's own check (a
  // negative count is refused, naming the flag, instead of wrapping).
  auto flags = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  for_each_config_key(*o, [&](const config_key& k, config_field field) {
    const std::string flag = "--" + k.name;
    CLI::Option* option = std::visit(
        [&](auto* f) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(f)>;
          if constexpr (std::is_same_v<T, bool>) {
            return cmd->add_flag(flag, *f, k.help);
          } else {
            CLI::Option* added = cmd->add_option(flag, *f, k.help);
            if constexpr (!std::is_same_v<T, std::string> && !std::is_arithmetic_v<T>) added->delimiter(',');
            else added->capture_default_str();
            return added;
          }
        },
        field);
    if (k.check) option->check(CLI::Validator([check = k.check](std::string& text) { return check(text); }, "", ""));
    if (!k.group.empty()) option->group(k.group);
    flags->emplace_back(k.name, option);
  });
  auto config_file = std::make_shared<std::string>();
  auto print_config = std::make_shared<bool>(false);
  cmd->add_option("--config", *config_file,
                  "a JSON file of keys (the flags' names without dashes); flags given here override it")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-config", *print_config,
                "print the resolved configuration as JSON (--auto's choice included) and stop: a run repeats from it "
                "with --config");
  cmd->get_option("--schedule-file")->excludes(cmd->get_option("--schedule"));
  cmd->get_option("--rendezvous")->excludes(cmd->get_option("--nodes"));
  cmd->callback([o, flags, config_file, print_config] {
    // The file's keys over the defaults, then the given flags over them (run_config::given_keys).
    run_config c = config_file->empty() ? run_config{} : read_run_config(*config_file);
    config_document given = config_document::object();
    const config_document from_flags = config_json(*o);
    for (const auto& [name, option] : *flags)
      if (option->count() > 0) given[name] = from_flags.at(name);
    apply_config_json(c, given, "the command line", "", /*record_given=*/true);
    if (c.rendezvous.empty()) return run_train(c, *print_config);
    const rendezvous_env env = rendezvous_place();  // Note [environment rendezvous]
    const std::chrono::seconds wait(c.rendezvous_timeout_s);
    if (env.rank > 0) {
      node_run_options node;
      node.security = c.pipe.security;
      return run_rendezvous_node(env, node, wait, "train --rendezvous env (rank " + std::to_string(env.rank) + ")");
    }
    if (c.stages == 0 && !c.auto_config)
      throw std::invalid_argument("--rendezvous env: rank 0 trains a pipeline on the other ranks: it needs --stages N "
                                  "or --auto");
    // The configuration and transport are checked before waiting for anyone (Note [rendezvous fails fast]).
    check_run_config(c);
    check_transport_security(c.pipe.security, "train --rendezvous");
    run_rendezvous_coordinator(env, wait, c.elastic > 0, [&](std::vector<std::string> nodes, joined_nodes joined) {
      c.pipe.nodes = std::move(nodes);
      run_train(c, *print_config, std::move(joined));
    });
  });
}

}  // namespace ap::cli

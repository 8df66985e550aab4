// `actorpipe schedule`: generate (or read) a schedule, validate it, simulate it, and print one JSON line.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/commands.hpp"
#include "schedule/schedule_file.hpp"
#include "schedule/schedule.hpp"

namespace ap::cli {

namespace {

struct schedule_options {
  std::string name = "1f1b";
  int stages = 4;
  int microbatches = 8;
  int chunks = 1;
  std::string file;           // read a grid (or .csv) instead of generating
  double forward_cost = 1.0;  // per stage, all of its chunks
  double backward_cost = 2.0; // B; split schedules use I = W = B/2
  double transfer_cost = 0.0;
  bool reduce = false;        // add the data-parallel gradient reductions (R) of a replicated pipeline
  double reduce_cost = 0.0;   // one R's time on the stage's communication lane
  std::string svg_path, csv_path;
};

schedule load_or_generate(const schedule_options& o) {
  if (!o.file.empty()) return read_schedule_file(o.file);
  try {
    return make_schedule(o.name, o.stages, o.microbatches, o.chunks);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

void run(const schedule_options& o) {
  check_output_path("--svg", o.svg_path);  // before any work (cli/checks.hpp)
  check_output_path("--csv", o.csv_path);
  const schedule s = o.reduce ? with_gradient_reductions(load_or_generate(o)) : load_or_generate(o);
  std::cout << s.name << ": " << s.stages << " stages, " << s.microbatches << " microbatches, "
            << s.chunks_per_stage << " chunks per stage\n"
            << to_grid(s);
  if (!o.csv_path.empty()) write_text(o.csv_path, to_csv(s));

  nlohmann::json result = {{"schedule", s.name},         {"stages", s.stages},
                           {"microbatches", s.microbatches}, {"chunks", s.chunks_per_stage},
                           {"valid", false},             {"makespan", nullptr},
                           {"ideal", nullptr},           {"bubble", nullptr},
                           {"peak_stash", nlohmann::json::array()}};
  const validation check = validate(s);
  if (!check.ok) {
    std::cout << "invalid schedule\n";
    std::cerr << check.message;
    std::cout << result.dump() << std::endl;
    throw std::runtime_error("invalid schedule (see the marked grid above)");
  }
  std::cout << "valid\n";

  op_costs costs;
  costs.forward.assign(s.stages, o.forward_cost);
  costs.backward_input.assign(s.stages, o.backward_cost / 2);
  costs.backward_weight.assign(s.stages, o.backward_cost / 2);
  costs.transfer = o.transfer_cost;
  costs.reduce_grad = o.reduce_cost;
  const simulation sim = simulate(s, costs);
  if (!o.svg_path.empty()) write_text(o.svg_path, to_svg(s, sim));

  std::cout << "makespan " << sim.makespan << ", ideal " << sim.ideal << ", bubble " << 100.0 * sim.bubble
            << "% of ideal, peak stash per stage:";
  for (int peak : sim.peak_stash) std::cout << ' ' << peak;
  std::cout << '\n';
  result["valid"] = true;
  result["makespan"] = sim.makespan;
  result["ideal"] = sim.ideal;
  result["bubble"] = sim.bubble;
  result["peak_stash"] = sim.peak_stash;
  std::cout << result.dump() << std::endl;
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<schedule_options>();
  CLI::App* cmd = app.add_subcommand("schedule", "Print, validate and simulate a pipeline schedule");
  std::string names;
  for (const auto& n : schedule_names()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--schedule", o->name, "Schedule to generate: " + names)
      ->check(CLI::IsMember(schedule_names()))
      ->capture_default_str();
  cmd->add_option("--stages", o->stages, "Pipeline stages p")->capture_default_str()->check(whole_number(1, 1 << 20));
  cmd->add_option("--microbatches", o->microbatches, "Microbatches m")->capture_default_str()->check(whole_number(1, 1 << 20));
  cmd->add_option("--chunks", o->chunks, "Chunks per stage v (interleaved)")->capture_default_str()->check(whole_number(1, 1 << 20));
  cmd->add_option("--file", o->file, "Read a schedule grid (or CSV, by the .csv extension) instead of generating one");
  cmd->add_option("--forward-cost", o->forward_cost, "Forward time of one stage")->capture_default_str()->check(real_number(0, true));
  cmd->add_option("--backward-cost", o->backward_cost, "Backward (B) time of one stage; I = W = B/2")
      ->capture_default_str()->check(real_number(0, true));
  cmd->add_option("--transfer-cost", o->transfer_cost, "Time added to every cross-stage dependency")
      ->capture_default_str()->check(real_number(0, true));
  cmd->add_flag("--reduce", o->reduce,
                "Add each chunk's data-parallel gradient reduction R right after its last backward (what a pipeline "
                "with --data-parallel runs)");
  cmd->add_option("--reduce-cost", o->reduce_cost, "Time of one R, on its stage's communication lane (with --reduce)")
      ->capture_default_str()
      ->check(real_number(0, true));
  cmd->add_option("--svg", o->svg_path, "Write the simulated timeline as SVG");
  cmd->add_option("--csv", o->csv_path, "Write the schedule as CSV");
  cmd->callback([o] { run(*o); });
}

}  // namespace ap::cli

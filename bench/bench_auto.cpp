// bench_auto: does `actorpipe train --auto` choose well? For each model it runs `train --auto` and a grid of
// hand-picked configurations of the same run (one process at 1 thread and at every core, data and tensor
// parallelism on every core, 2-stage pipelines with each schedule and 4 or 8 microbatches), each as its own
// `actorpipe` process, alternating in rounds, and prints each one's median samples per second, the best of the
// grid, and --auto's ratio to it (the target: >= 0.9). --auto's planning (its measurements and trials)
// is timed apart: `wall_s` in the JSON line counts the training steps only.
// With `--nodes N` every run trains on N `actorpipe node` processes of this machine (plain TCP, started once),
// `train --auto --nodes ...` against a grid of pipelines on them (Note [auto on nodes]): one stage on one node
// with every core, with T = 2, two replicas on two nodes, and 2-stage pipelines over two nodes.
//
// Usage: bench_auto [--models mlp,heavy,gpt] [--steps N] [--rounds R] [--nodes N]   (run from anywhere: it
// finds ../cli/actorpipe next to itself, or the actorpipe packed beside it)
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../tests/node_process.hpp"
#include "bench_support.hpp"
#include "plan/cores.hpp"

namespace {

struct run_figures {
  double samples_per_s = 0.0;
  double total_s = 0.0;  // the whole process: data, planning, training
  std::string choice;    // --auto's
};

// Runs `command`, returns the JSON line it printed on stdout (its stderr goes to /dev/null).
run_figures run(const std::string& command) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>/dev/null").c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe.get())) out += buffer.data();
  run_figures f;
  f.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto start = out.rfind("\n{", out.size() > 1 ? out.size() - 2 : 0);
  const std::string line = out.substr(start == std::string::npos ? 0 : start + 1);
  if (line.empty() || line.front() != '{') throw std::runtime_error("no JSON line from: " + command);
  const auto j = nlohmann::json::parse(line);
  // The steady pace: the samples of a step over the median step (the first step's set-up left out).
  f.samples_per_s = j.at("samples_per_s").get<double>() * j.at("wall_s").get<double>() /
                    (j.at("steps").get<double>() * j.at("median_step_s").get<double>());
  if (j.contains("auto")) f.choice = j.at("auto").at("choice").get<std::string>();
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct model_run {
  std::string key, flags;  // the model's flags for `train`
};

std::vector<std::pair<std::string, std::string>> grid(int cores) {
  const std::string n = std::to_string(cores);
  std::vector<std::pair<std::string, std::string>> g = {
      {"single 1 thread", "--threads 1"},
      {"single " + n + " threads", "--threads " + n},
      {"D=" + n + " x 1 thread", "--data-parallel " + n + " --threads 1"},
      {"T=2 x " + std::to_string(std::max(1, cores / 2)) + (cores / 2 > 1 ? " threads" : " thread"),
       "--tensor-parallel 2 --threads " + std::to_string(std::max(1, cores / 2))},
  };
  const std::string t = std::to_string(std::max(1, cores / 2));
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int m : {4, 8})
      g.push_back({std::string("P=2 ") + schedule + " m=" + std::to_string(m) + " x " + t + (t == "1" ? " thread" : " threads"),
                   std::string("--stages 2 --partition time --schedule ") + schedule + " --microbatches " +
                       std::to_string(m) + " --threads " + t});
  return g;
}

// The grid on nodes of this machine, which share its cores (Note [cores on nodes]): pipelines only.
std::vector<std::pair<std::string, std::string>> node_grid(int cores) {
  const std::string n = std::to_string(cores), half = std::to_string(std::max(1, cores / 2));
  const std::string halves = half + (half == "1" ? " thread" : " threads");
  std::vector<std::pair<std::string, std::string>> g = {
      {"P=1 x " + n + " threads", "--stages 1 --microbatches 1 --threads " + n},
      {"P=1 T=2 x " + halves, "--stages 1 --microbatches 1 --tensor-parallel 2 --threads " + half},
      {"P=1 D=2 x " + halves + ", 2 nodes", "--stages 1 --microbatches 1 --data-parallel 2 --threads " + half},
  };
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int m : {4, 8})
      g.push_back({std::string("P=2 ") + schedule + " m=" + std::to_string(m) + " x " + halves,
                   std::string("--stages 2 --partition time --schedule ") + schedule + " --microbatches " +
                       std::to_string(m) + " --threads " + half});
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "mlp,heavy,gpt";
  int steps = 20, rounds = 3, node_count = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--models") models = value;
    else if (flag == "--steps") steps = std::stoi(value);
    else if (flag == "--rounds") rounds = std::stoi(value);
    else if (flag == "--nodes") node_count = std::stoi(value);
    else {
      std::cerr << "bench_auto: unknown flag " << flag << "\n";
      return 2;
    }
  }
  const std::vector<std::string> actorpipe = ap::bench::actorpipe_command();
  const int cores = static_cast<int>(ap::process_cores().size());
  std::vector<std::unique_ptr<ap::test::node_process>> nodes;
  std::string on_nodes;  // the flags that put a run on them
  for (int i = 0; i < node_count; ++i) {
    nodes.push_back(std::make_unique<ap::test::node_process>(actorpipe, std::vector<std::string>{"--insecure"}));
    on_nodes += (i == 0 ? " --insecure --nodes " : ",") + nodes.back()->address();
  }
  const std::map<std::string, model_run> known = {
      {"mlp", {"mlp 784-512-256-10, batch 128", "--model 784-512-256-10 --batch-size 128"}},
      {"heavy", {"mlp 784-2048-2048-2048-10, batch 512", "--model 784-2048-2048-2048-10 --batch-size 512"}},
      {"gpt", {"gpt:layers=4,dim=128,heads=4,context=64, batch 32",
               "--model gpt:layers=4,dim=128,heads=4,context=64 --batch-size 32"}},
  };
  nlohmann::json all;
  std::stringstream list(models);
  for (std::string key; std::getline(list, key, ',');) {
    const auto found = known.find(key);
    if (found == known.end()) {
      std::cerr << "bench_auto: unknown model " << key << " (mlp, heavy, gpt)\n";
      return 2;
    }
    const model_run& m = found->second;
    const std::string base = ap::bench::shell_line(actorpipe) + " train " + m.flags + " --max-steps " + std::to_string(steps) + on_nodes + " ";
    const auto configurations = nodes.empty() ? grid(cores) : node_grid(cores);
    std::vector<std::vector<double>> rates(configurations.size());
    std::vector<double> auto_rates, auto_total;
    std::map<std::string, int> choices;
    for (int r = 0; r < rounds; ++r) {
      const run_figures a = run(base + "--auto");
      auto_rates.push_back(a.samples_per_s), auto_total.push_back(a.total_s), ++choices[a.choice];
      for (std::size_t c = 0; c < configurations.size(); ++c)
        rates[c].push_back(run(base + configurations[c].second).samples_per_s);
    }
    std::printf("\n%s: %d steps, %d rounds, %d cores%s (median samples/s)\n", m.key.c_str(), steps, rounds, cores,
                nodes.empty() ? "" : (", " + std::to_string(nodes.size()) + " nodes").c_str());
    double best = 0.0;
    std::string best_name;
    nlohmann::json row;
    for (std::size_t c = 0; c < configurations.size(); ++c) {
      const double rate = median(rates[c]);
      std::printf("  %-34s %10.0f\n", configurations[c].first.c_str(), rate);
      row[configurations[c].first] = rate;
      if (rate > best) best = rate, best_name = configurations[c].first;
    }
    const double chosen = median(auto_rates);
    std::printf("  %-34s %10.0f  (%.2fx the grid's best, %s; whole --auto process %.1f s)\n", "--auto", chosen,
                chosen / best, best_name.c_str(), median(auto_total));
    for (const auto& [choice, times] : choices) std::printf("    --auto chose %dx: %s\n", times, choice.c_str());
    all[key] = {{"grid", row}, {"auto", chosen}, {"best", best_name}, {"ratio", chosen / best},
                {"auto_process_s", median(auto_total)}};
  }
  std::cout << all.dump() << std::endl;
  return 0;
}

// The dry-run simulator: times a schedule under per-stage op costs with the validator's dependencies.
#include <algorithm>
#include <stdexcept>

#include "schedule/dependencies.hpp"
#include "schedule/schedule.hpp"

namespace ap {

namespace {

// The cost of a whole stage (all its chunks) for one op; an empty vector means 1.0 everywhere.
std::vector<double> per_stage_costs(const std::vector<double>& given, int stages, const char* what) {
  if (given.empty()) return std::vector<double>(static_cast<std::size_t>(stages), 1.0);
  if (static_cast<int>(given.size()) != stages)
    throw std::invalid_argument(std::string("op_costs.") + what + " has " + std::to_string(given.size()) +
                                " entries for " + std::to_string(stages) + " stages");
  for (double c : given)
    if (!(c >= 0.0)) throw std::invalid_argument(std::string("op_costs.") + what + " has a negative or NaN cost");
  return given;
}

}  // namespace

// Every stage runs its list in order; an action starts when its stage is free and all it needs (Note
// [dependencies]) has finished, plus `transfer` from another stage. A chunk's action costs 1/v of the stage's
// cost. R runs on the stage's communication lane.
//
// Note [stash accounting]: peak_stash counts, per stage, the activations whose F has run and whose backward has
// not finished: B frees one; with the split backward W frees it (it still needs the stashed input), not I.
simulation simulate(const schedule& s, const op_costs& costs) {
  const validation check = validate(s);
  if (!check.ok) throw std::invalid_argument("cannot simulate an invalid schedule: " + check.message);
  const int p = s.stages, v = s.chunks_per_stage, m = s.microbatches, chunks = s.total_chunks();
  const auto forward = per_stage_costs(costs.forward, p, "forward");
  const auto input = per_stage_costs(costs.backward_input, p, "backward_input");
  const auto weight = per_stage_costs(costs.backward_weight, p, "backward_weight");
  auto cost_of = [&](const action& a) {
    // A whole-batch B costs all m microbatches' backwards (linear in the rows, as the ideal time assumes).
    if (a.microbatch == all_microbatches && !is_reduction(a)) return m * (input[a.stage] + weight[a.stage]) / v;
    switch (a.kind) {
      case op::forward: return forward[a.stage] / v;
      case op::backward: return (input[a.stage] + weight[a.stage]) / v;
      case op::backward_input: return input[a.stage] / v;
      case op::backward_weight: return weight[a.stage] / v;
      case op::reduce_grad: return costs.reduce_grad;
    }
    return 0.0;
  };

  simulation sim;
  std::vector<std::vector<simulation::span>> spans(static_cast<std::size_t>(p));
  detail::milestone_times done(m, chunks);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0);
  std::vector<double> lane_free_at(static_cast<std::size_t>(p), 0.0);  // R's lane (Note [gradient reduction])
  std::size_t remaining = 0;
  for (const auto& row : s.per_stage) remaining += row.size();
  while (remaining > 0) {  // terminates: the validator proved that some head is always ready
    for (int stage = 0; stage < p; ++stage) {
      const auto& row = s.per_stage[stage];
      while (next[stage] < row.size()) {
        const action& a = row[next[stage]];
        // R waits for the stage's communication lane, not for the compute (Note [gradient reduction]).
        double start = is_reduction(a) ? std::max(free_at[stage], lane_free_at[stage]) : free_at[stage];
        bool ready = true;
        for (const auto& r : detail::requirements_of(a, chunks, m)) {
          if (!done.reached(r)) { ready = false; break; }
          const bool remote = stage_of_chunk(r.chunk, p) != stage;
          start = std::max(start, done.time(r) + (remote ? costs.transfer : 0.0));
        }
        if (!ready) break;
        const double end = start + cost_of(a);
        done.finish(a, end);
        (is_reduction(a) ? lane_free_at : free_at)[stage] = end;
        spans[stage].push_back({stage, a, start, end});
        sim.makespan = std::max(sim.makespan, end);
        ++next[stage];
        --remaining;
      }
    }
  }
  for (auto& row : spans) sim.spans.insert(sim.spans.end(), row.begin(), row.end());

  double per_microbatch = 0.0;
  for (int stage = 0; stage < p; ++stage) per_microbatch += forward[stage] + input[stage] + weight[stage];
  sim.ideal = m * per_microbatch / p;
  sim.bubble = sim.ideal > 0.0 ? sim.makespan / sim.ideal - 1.0 : 0.0;

  // Note [stash accounting]
  for (const auto& row : s.per_stage) {
    int held = 0, peak = 0;  // a whole-batch B frees its chunk's m activations
    for (const action& a : row) {
      if (a.kind == op::forward) ++held;
      if (a.kind == op::backward || a.kind == op::backward_weight) held -= a.microbatch == all_microbatches ? m : 1;
      peak = std::max(peak, held);
    }
    sim.peak_stash.push_back(peak);
  }
  return sim;
}

}  // namespace ap

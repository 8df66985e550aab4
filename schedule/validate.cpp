// The validator: counts, placement, local order and deadlock-freedom, with the grid printed on failure.
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "schedule/dependencies.hpp"
#include "schedule/schedule.hpp"

namespace ap {

namespace {

// A failing spot: the stage's row, and the action's index in it (-1 when the problem is a missing action).
struct mark {
  int stage;
  int index;
};

// The reason, then the grid, marked actions in [ ] and "<-- ERROR HERE" after their rows.
validation failure(const schedule& s, const std::string& reason, const std::vector<mark>& marks) {
  std::string out = reason + "\n";
  for (std::size_t stage = 0; stage < s.per_stage.size(); ++stage) {
    bool row_marked = false;
    std::set<int> marked_indices;
    for (const auto& m : marks)
      if (m.stage == static_cast<int>(stage)) {
        row_marked = true;
        marked_indices.insert(m.index);
      }
    out += "stage " + std::to_string(stage) + ":";
    const auto& row = s.per_stage[stage];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool marked = marked_indices.count(static_cast<int>(i)) > 0;
      out += " " + std::string(marked ? "[" : "") + to_string(row[i]) + (marked ? "]" : "");
    }
    if (row_marked) out += "  <-- ERROR HERE";
    out += '\n';
  }
  return validation{false, out};
}

std::string describe(const action& a) {
  if (is_reduction(a)) return to_string(a) + " (R of chunk " + std::to_string(a.chunk) + "'s gradients)";
  const std::string of = a.microbatch == all_microbatches ? "the whole batch" : "microbatch " + std::to_string(a.microbatch);
  return to_string(a) + " (" + std::string(1, op_letter(a.kind)) + " of " + of + ", chunk " + std::to_string(a.chunk) + ")";
}

std::string where(int stage, std::size_t step) {
  return "stage " + std::to_string(stage) + " step " + std::to_string(step);
}

std::string describe(const detail::requirement& r, int stages) {
  static const char* names[] = {"the forward", "the input gradient (B/I)", "the weight gradient"};
  return std::string(names[static_cast<std::size_t>(r.what)]) + " of microbatch " + std::to_string(r.microbatch) +
         ", chunk " + std::to_string(r.chunk) + " on stage " + std::to_string(stage_of_chunk(r.chunk, stages));
}

// Per (microbatch, chunk): how many of each op were seen so far, in the stage's own order.
struct op_counts {
  int f = 0, b = 0, i = 0, w = 0;
};

}  // namespace

validation validate(const schedule& s) {
  const int p = s.stages, m = s.microbatches, v = s.chunks_per_stage;
  if (p < 1 || m < 1 || v < 1)
    return failure(s, "schedule sizes must be positive: stages=" + std::to_string(p) + ", microbatches=" +
                          std::to_string(m) + ", chunks_per_stage=" + std::to_string(v), {});
  if (static_cast<int>(s.per_stage.size()) != p)
    return failure(s, "the schedule declares " + std::to_string(p) + " stages but has " +
                          std::to_string(s.per_stage.size()) + " rows of actions", {});
  const int chunks = s.total_chunks();

  // 1. Placement and ranges, action by action.
  for (int stage = 0; stage < p; ++stage) {
    const auto& row = s.per_stage[stage];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const action& a = row[i];
      const std::vector<mark> here{{stage, static_cast<int>(i)}};
      const bool whole_batch = a.microbatch == all_microbatches && (a.kind == op::backward || is_reduction(a));
      if (!whole_batch && (a.microbatch < 0 || a.microbatch >= m))
        return failure(s, where(stage, i) + ": " + describe(a) + " has a microbatch out of range 0.." +
                              std::to_string(m - 1), here);
      if (a.chunk < 0 || a.chunk >= chunks)
        return failure(s, where(stage, i) + ": " + describe(a) + " has a chunk out of range 0.." +
                              std::to_string(chunks - 1), here);
      if (stage_of_chunk(a.chunk, p) != stage)
        return failure(s, where(stage, i) + ": " + describe(a) + " is on the wrong stage: chunk " +
                              std::to_string(a.chunk) + " lives on stage " +
                              std::to_string(stage_of_chunk(a.chunk, p)), here);
      if (a.stage != stage)
        return failure(s, where(stage, i) + ": " + describe(a) + " says stage " + std::to_string(a.stage) +
                              " but sits in stage " + std::to_string(stage) + "'s list", here);
    }
  }

  // One gradient message per batch, or one per microbatch, never both (Note [sync-backward]).
  if (whole_batch_backward(s))
    for (int stage = 0; stage < p; ++stage) {
      const auto& row = s.per_stage[stage];
      for (std::size_t i = 0; i < row.size(); ++i)
        if (row[i].kind != op::forward && !is_reduction(row[i]) && row[i].microbatch != all_microbatches)
          return failure(s, where(stage, i) + ": " + describe(row[i]) + " is a per-microbatch backward in a schedule "
                                "with whole-batch backwards (B*): every chunk's backward must then be B* (one "
                                "gradient for the whole batch travels between the stages)", {{stage, static_cast<int>(i)}});
    }

  // 2. Local order and duplicates, walking each stage in its own order.
  std::vector<op_counts> seen(static_cast<std::size_t>(m) * chunks);
  std::vector<int> reductions(static_cast<std::size_t>(chunks), 0);  // R per chunk (Note [gradient reduction])
  auto seen_of = [&](const action& a) -> op_counts& { return seen[static_cast<std::size_t>(a.microbatch) * chunks + a.chunk]; };
  for (int stage = 0; stage < p; ++stage) {
    const auto& row = s.per_stage[stage];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const action& a = row[i];
      const std::vector<mark> here{{stage, static_cast<int>(i)}};
      if (is_reduction(a)) {
        if (reductions[static_cast<std::size_t>(a.chunk)]++ > 0)
          return failure(s, where(stage, i) + ": " + describe(a) + " is a duplicate: chunk " +
                                std::to_string(a.chunk) + "'s gradients are already reduced", here);
        for (int mb = 0; mb < m; ++mb) {
          const op_counts& one = seen[static_cast<std::size_t>(mb) * chunks + a.chunk];
          if (one.b + one.w == 0)
            return failure(s, where(stage, i) + ": " + describe(a) + " runs before the weight gradient (B or W) of "
                                  "microbatch " + std::to_string(mb) + ": the gradients are not final yet", here);
        }
        continue;
      }
      op_counts scratch;  // a whole-batch B counts into every microbatch's entry instead
      op_counts& c = a.microbatch == all_microbatches ? scratch : seen_of(a);
      const std::string at = where(stage, i) + ": " + describe(a);
      switch (a.kind) {
        case op::forward:
          if (c.f > 0) return failure(s, at + " is a duplicate: this forward already ran", here);
          ++c.f;
          break;
        case op::backward:
          if (a.microbatch == all_microbatches) {  // every microbatch's backward at once
            for (int mb = 0; mb < m; ++mb) {
              op_counts& one = seen[static_cast<std::size_t>(mb) * chunks + a.chunk];
              if (one.b + one.i > 0)
                return failure(s, at + " is a duplicate: the backward of microbatch " + std::to_string(mb) +
                                      " already ran", here);
              if (one.f == 0)
                return failure(s, at + " runs before the forward of microbatch " + std::to_string(mb) +
                                      " (F before B)", here);
              ++one.b;
            }
            break;
          }
          [[fallthrough]];
        case op::backward_input:
          if (c.b + c.i > 0) return failure(s, at + " is a duplicate: this backward already ran", here);
          if (c.f == 0) return failure(s, at + " runs before its forward (F before B/I)", here);
          (a.kind == op::backward ? c.b : c.i)++;
          break;
        case op::reduce_grad:
          break;  // handled above
        case op::backward_weight:
          if (c.w > 0) return failure(s, at + " is a duplicate: this weight gradient already ran", here);
          if (c.b > 0) return failure(s, at + " mixes a W with a full backward B for the same microbatch", here);
          if (c.i == 0) return failure(s, at + " runs before its input gradient (I before W)", here);
          ++c.w;
          break;
      }
    }
  }

  // 3. Completeness: one F and either one B or one I and one W per (microbatch, chunk).
  for (int mb = 0; mb < m; ++mb)
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const op_counts& c = seen[static_cast<std::size_t>(mb) * chunks + chunk];
      const int stage = stage_of_chunk(chunk, p);
      const std::string what = "microbatch " + std::to_string(mb) + ", chunk " + std::to_string(chunk) +
                               " (stage " + std::to_string(stage) + ")";
      const std::vector<mark> row{{stage, -1}};
      if (c.f == 0) return failure(s, "missing action: the forward F of " + what, row);
      if (c.b == 0 && c.i == 0) return failure(s, "missing action: the backward (B, or I and W) of " + what, row);
      if (c.i > 0 && c.w == 0) return failure(s, "missing action: the weight gradient W of " + what, row);
    }

  // No R at all, or one per chunk (Note [gradient reduction]).
  const bool reduced = std::any_of(reductions.begin(), reductions.end(), [](int n) { return n > 0; });
  for (int chunk = 0; chunk < chunks && reduced; ++chunk)
    if (reductions[static_cast<std::size_t>(chunk)] == 0)
      return failure(s, "missing action: the gradient reduction R of chunk " + std::to_string(chunk) + " (stage " +
                            std::to_string(stage_of_chunk(chunk, p)) + "): a schedule reduces every chunk or none",
                     {{stage_of_chunk(chunk, p), -1}});

  // 4. Deadlock-freedom by symbolic execution (Note [dependencies]): each stage runs its list in order, a head as
  // soon as all it needs has run; stuck if no head can run before the end.
  detail::milestone_times done(m, chunks);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::size_t remaining = 0;
  for (const auto& row : s.per_stage) remaining += row.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int stage = 0; stage < p; ++stage) {
      const auto& row = s.per_stage[stage];
      while (next[stage] < row.size()) {
        const action& a = row[next[stage]];
        bool ready = true;
        for (const auto& r : detail::requirements_of(a, chunks, m)) ready = ready && done.reached(r);
        if (!ready) break;
        done.finish(a, 0.0);
        ++next[stage];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::vector<mark> stuck;
      std::string heads;
      for (int stage = 0; stage < p; ++stage)
        if (next[stage] < s.per_stage[stage].size()) {
          stuck.push_back({stage, static_cast<int>(next[stage])});
          const action& a = s.per_stage[stage][next[stage]];
          heads += (heads.empty() ? "" : "; ") + where(stage, next[stage]) + " " + to_string(a) + " waits for";
          for (const auto& r : detail::requirements_of(a, chunks, m))
            if (!done.reached(r)) heads += " " + describe(r, p);
        }
      return failure(s, "deadlock: no stage can make progress (" + heads +
                            "): each waits for an action that comes later in another stage's list", stuck);
    }
  }
  return {};
}

validation validate_for_run(const schedule& s, int stages, int microbatches, int chunks_per_stage) {
  const auto differs = [&](const char* what, int mine, const char* flag, int run) {
    return failure(s, "the schedule has " + std::to_string(mine) + " " + what + ", the run " + flag + " " +
                          std::to_string(run) + " (a schedule names its stages by rows, its microbatches and "
                          "chunks by the numbers in its actions)", {});
  };
  if (s.stages != stages) return differs("stages", s.stages, "--stages", stages);
  if (s.microbatches != microbatches) return differs("microbatches", s.microbatches, "--microbatches", microbatches);
  if (s.chunks_per_stage != chunks_per_stage)
    return differs("chunks per stage", s.chunks_per_stage, "--chunks", chunks_per_stage);
  return validate(s);
}

}  // namespace ap

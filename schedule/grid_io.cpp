// A schedule as text: the grid (a row of "1F0"-style actions per stage) and CSV, both round-tripping exactly.
#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "schedule/schedule.hpp"

namespace ap {

namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

bool is_blank(const std::string& s) { return trim(s).empty(); }

// Fills stages, microbatches and chunks_per_stage from the actions (m = largest microbatch + 1, v rounded up).
void infer_sizes(schedule& s) {
  s.stages = static_cast<int>(s.per_stage.size());
  int max_microbatch = 0, max_chunk = 0;
  for (const auto& row : s.per_stage)
    for (const auto& a : row) {
      max_microbatch = std::max(max_microbatch, a.microbatch);
      max_chunk = std::max(max_chunk, a.chunk);
    }
  s.microbatches = max_microbatch + 1;
  s.chunks_per_stage = s.stages > 0 ? (max_chunk + 1 + s.stages - 1) / s.stages : 1;
}

}  // namespace

std::string to_grid(const schedule& s) {
  std::string out;
  for (const auto& row : s.per_stage) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i ? " " : "") + to_string(row[i]);
    out += '\n';
  }
  return out;
}

// Rows are stages, in order. Lines starting with '#' are comments; trailing blank lines are ignored (a blank line
// in the middle is a stage without actions).
schedule parse_grid(const std::string& text, const std::string& name) {
  auto lines = split_lines(text);
  while (!lines.empty() && is_blank(lines.back())) lines.pop_back();
  schedule s;
  s.name = name;
  for (std::size_t n = 0; n < lines.size(); ++n) {
    if (trim(lines[n]).rfind('#', 0) == 0) continue;
    const int stage = static_cast<int>(s.per_stage.size());
    std::vector<action> row;
    std::istringstream tokens(lines[n]);
    std::string token;
    while (tokens >> token) {
      try {
        row.push_back(parse_action(token, stage));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("schedule grid line " + std::to_string(n + 1) + " (stage " +
                                    std::to_string(stage) + "), token '" + token + "': " + e.what());
      }
    }
    s.per_stage.push_back(std::move(row));
  }
  if (s.per_stage.empty()) throw std::invalid_argument("schedule grid is empty: expected one row of actions per stage");
  infer_sizes(s);
  return s;
}

std::string to_csv(const schedule& s) {
  std::string out = "stage,step,op,microbatch,chunk\n";
  for (std::size_t stage = 0; stage < s.per_stage.size(); ++stage)
    for (std::size_t step = 0; step < s.per_stage[stage].size(); ++step) {
      const action& a = s.per_stage[stage][step];
      out += std::to_string(stage) + ',' + std::to_string(step) + ',' + op_letter(a.kind) + ',' +
             (a.microbatch == all_microbatches ? std::string("*") : std::to_string(a.microbatch)) + ',' +
             std::to_string(a.chunk) + '\n';
    }
  return out;
}

// Rows in any order; within a stage the steps must be exactly 0, 1, 2, ...; stages = the largest stage + 1.
schedule parse_csv(const std::string& text, const std::string& name) {
  const auto lines = split_lines(text);
  std::size_t n = 0;
  while (n < lines.size() && is_blank(lines[n])) ++n;
  std::string header;
  for (char c : n < lines.size() ? lines[n] : std::string()) if (c != ' ' && c != '\t') header += c;
  if (header != "stage,step,op,microbatch,chunk")
    throw std::invalid_argument("schedule CSV line " + std::to_string(n + 1) + ": expected the header "
                                "'stage,step,op,microbatch,chunk', got '" + (n < lines.size() ? lines[n] : "") + "'");
  std::map<int, std::map<int, action>> by_stage;  // stage -> step -> action
  for (++n; n < lines.size(); ++n) {
    if (is_blank(lines[n])) continue;
    const std::string where = "schedule CSV line " + std::to_string(n + 1);
    std::vector<std::string> fields;
    std::istringstream row(lines[n]);
    std::string field;
    while (std::getline(row, field, ',')) fields.push_back(trim(field));
    if (!lines[n].empty() && lines[n].back() == ',') fields.push_back("");
    if (fields.size() != 5)
      throw std::invalid_argument(where + ": expected 5 fields (stage,step,op,microbatch,chunk), got " +
                                  std::to_string(fields.size()) + " in '" + lines[n] + "'");
    auto number = [&](std::size_t i, const char* column) {
      const std::string& f = fields[i];
      if (f.empty() || f.size() > 9 || !std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw std::invalid_argument(where + ": " + column + " '" + f + "' is not a non-negative integer");
      return std::stoi(f);
    };
    const int stage = number(0, "stage");
    const int step = number(1, "step");
    const std::string& letter = fields[2];
    const std::optional<op> kind = letter.size() == 1 ? op_of_letter(letter[0]) : std::nullopt;
    if (!kind) throw std::invalid_argument(where + ": op '" + letter + "' is not one of F, B, I, W, R");
    // "*": the whole batch, for a full backward B (Note [sync-backward]) and always for R.
    const bool whole_batch = fields[3] == "*";
    if (whole_batch && *kind != op::backward && *kind != op::reduce_grad)
      throw std::invalid_argument(where + ": microbatch '*' (the whole batch) is for a full backward B or R only");
    if (!whole_batch && *kind == op::reduce_grad)
      throw std::invalid_argument(where + ": a gradient reduction R is the whole batch's: its microbatch is '*'");
    const action a{stage, *kind, whole_batch ? all_microbatches : number(3, "microbatch"), number(4, "chunk")};
    if (!by_stage[stage].emplace(step, a).second)
      throw std::invalid_argument(where + ": stage " + std::to_string(stage) + " step " + std::to_string(step) +
                                  " appears twice");
  }
  if (by_stage.empty()) throw std::invalid_argument("schedule CSV has no actions");
  schedule s;
  s.name = name;
  s.per_stage.resize(static_cast<std::size_t>(by_stage.rbegin()->first) + 1);
  for (const auto& [stage, steps] : by_stage) {
    int expected = 0;
    for (const auto& [step, a] : steps) {
      if (step != expected)
        throw std::invalid_argument("schedule CSV: stage " + std::to_string(stage) + " has no step " +
                                    std::to_string(expected) + " (steps must be 0, 1, 2, ... without gaps)");
      s.per_stage[stage].push_back(a);
      ++expected;
    }
  }
  infer_sizes(s);
  return s;
}

}  // namespace ap

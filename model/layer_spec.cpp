#include "model/layer_spec.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/spec_text.hpp"

namespace ap {

namespace {

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw std::invalid_argument("bad layer spec '" + text + "': " + why);
}

bool kind_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (!first && ((c >= '0' && c <= '9') || c == '_'));
}

}  // namespace

bool is_kind_name(const std::string& name) {
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!kind_char(name[i], i == 0)) return false;
  return !name.empty();
}

layer_spec parse_layer_spec(const std::string& text) {
  layer_spec s;
  s.text = text;
  std::size_t i = 0;
  while (i < text.size() && kind_char(text[i], i == 0)) ++i;
  s.kind = text.substr(0, i);
  if (s.kind.empty())
    bad(text, "expected a layer kind (lower-case letters, digits and '_', starting with a letter) at the start");
  const std::size_t open = text.find('[');
  const std::size_t head_end = open == std::string::npos ? text.size() : open;
  if (i < head_end) {
    if (text[i] != ':') bad(text, "unexpected '" + std::string(1, text[i]) + "' at " + std::to_string(i) + " in the kind");
    s.fields = split_fields(text.substr(i + 1, head_end - i - 1), ':');
    for (const std::string& f : s.fields)
      if (f.find_first_of(",]") != std::string::npos)
        bad(text, "field '" + f + "' holds a ',' or ']' outside [...]");
  }
  if (open == std::string::npos) return s;

  // Parts: split at the commas of depth 1; the matching ']' must end the text.
  int depth = 0;
  std::string part;
  for (std::size_t k = open; k < text.size(); ++k) {
    const char c = text[k];
    if (c == '[' && depth++ == 0) continue;
    if (c == ']' && --depth == 0) {
      if (part.empty()) bad(text, "empty part before ']' at " + std::to_string(k));
      s.parts.push_back(part);
      if (k + 1 != text.size()) bad(text, "unexpected text '" + text.substr(k + 1) + "' after the closing ']'");
      return s;
    }
    if (c == ',' && depth == 1) {
      if (part.empty()) bad(text, "empty part before ',' at " + std::to_string(k));
      s.parts.push_back(part);
      part.clear();
      continue;
    }
    part += c;
  }
  bad(text, "'[' at " + std::to_string(open) + " is never closed");
}

std::vector<std::string> layer_kinds_in(const std::string& text) {
  std::vector<std::string> kinds;
  const auto visit = [&](const auto& self, const std::string& t) -> void {
    const layer_spec s = parse_layer_spec(t);
    if (std::find(kinds.begin(), kinds.end(), s.kind) == kinds.end()) kinds.push_back(s.kind);
    for (const std::string& p : s.parts) self(self, p);
  };
  visit(visit, text);
  return kinds;
}

void layer_spec::expect_fields(std::size_t n, const std::string& form) const {
  if (fields.size() != n || !parts.empty()) bad(text, "expected " + form);
}

void layer_spec::expect_parts(const std::string& form) const {
  if (!fields.empty() || parts.empty()) bad(text, "expected " + form);
}

std::size_t layer_spec::positional_fields() const {
  std::size_t n = 0;
  while (n < fields.size() && fields[n].find('=') == std::string::npos) ++n;
  return n;
}

std::optional<std::string> layer_spec::option(const std::string& key) const {
  for (std::size_t i = positional_fields(); i < fields.size(); ++i)
    if (fields[i].compare(0, key.size() + 1, key + "=") == 0) return fields[i].substr(key.size() + 1);
  return std::nullopt;
}

void layer_spec::expect_fields_and_options(std::size_t n, const std::string& form, const std::vector<std::string>& known,
                                           std::size_t most) const {
  const std::size_t positional = positional_fields();
  if (positional < n || positional > std::max(n, most) || !parts.empty()) bad(text, "expected " + form);
  std::vector<std::string> seen;
  for (std::size_t i = positional; i < fields.size(); ++i) {
    const std::size_t eq = fields[i].find('=');
    const std::string key = eq == std::string::npos ? fields[i] : fields[i].substr(0, eq);
    if (eq == std::string::npos)
      bad(text, "field '" + fields[i] + "' after an option must be KEY=VALUE too (expected " + form + ")");
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      bad(text, "unknown option '" + key + "' (known: " + (names.empty() ? "none" : names) + ")");
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) bad(text, "option '" + key + "' is given twice");
    seen.push_back(key);
  }
}

init_options parse_init_options(const layer_spec& s, const std::string& std_key) {
  init_options o;
  if (const auto v = s.option(std_key)) {
    o.std = parse_float(*v, s.text);
    if (!(o.std > 0.0f)) bad(s.text, "option '" + std_key + "' must be a positive number, got '" + *v + "'");
  }
  if (const auto v = s.option("bias")) {
    if (*v != "0" && *v != "1") bad(s.text, "option 'bias' must be 0 or 1, got '" + *v + "'");
    o.bias = *v == "1";
  }
  return o;
}

std::string init_options_text(const init_options& o, const std::string& std_key) {
  return (o.std > 0.0f ? ":" + std_key + "=" + format_float(o.std) : std::string()) + (o.bias ? "" : ":bias=0");
}

std::size_t layer_spec::width(std::size_t i) const { return parse_width(fields.at(i), text); }
float layer_spec::number(std::size_t i) const { return parse_float(fields.at(i), text); }
std::uint64_t layer_spec::seed(std::size_t i) const { return parse_seed(fields.at(i), text); }

}  // namespace ap

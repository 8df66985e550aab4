#include "model/gpt_spec.hpp"

#include <set>
#include <stdexcept>

#include "model/spec_text.hpp"

namespace ap {

bool is_gpt_spec(const std::string& text) { return text == "gpt" || text.rfind("gpt:", 0) == 0; }

gpt_config parse_gpt_spec(const std::string& text) {
  if (!is_gpt_spec(text))
    throw std::invalid_argument("bad model spec '" + text + "': a GPT model is written gpt:layers=8,dim=256,heads=8,context=128");
  gpt_config config;
  const auto bad = [&](const std::string& why) { return std::invalid_argument("bad model spec '" + text + "': " + why); };
  std::set<std::string> seen;
  if (text.size() > 4) {
    for (const std::string& item : split_fields(text.substr(4), ',')) {
      const auto eq = item.find('=');
      if (eq == std::string::npos) throw bad("'" + item + "' is not KEY=VALUE");
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      std::size_t* field = key == "layers" ? &config.layers
                           : key == "dim"   ? &config.dim
                           : key == "heads" ? &config.heads
                           : key == "context" ? &config.context
                                              : nullptr;
      if (!field) throw bad("unknown key '" + key + "' (known: layers, dim, heads, context)");
      if (!seen.insert(key).second) throw bad("key '" + key + "' is given twice");
      std::size_t parsed = 0, used = 0;
      try {
        parsed = value.empty() || value[0] == '-' || value[0] == '+' ? 0 : std::stoul(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != value.size() || parsed == 0)
        throw bad("key '" + key + "' must be a positive integer, got '" + value + "'");
      *field = parsed;
    }
  }
  if (config.dim % config.heads != 0)
    throw bad("key 'heads' (" + std::to_string(config.heads) + ") must divide key 'dim' (" + std::to_string(config.dim) + ")");
  return config;
}

std::string gpt_spec_text(const gpt_config& c) {
  return "gpt:layers=" + std::to_string(c.layers) + ",dim=" + std::to_string(c.dim) + ",heads=" +
         std::to_string(c.heads) + ",context=" + std::to_string(c.context);
}

std::string gpt_block_spec(std::size_t dim, std::size_t heads) {
  const std::string d = std::to_string(dim), h = std::to_string(4 * dim);
  return "block[residual[layernorm:" + d + ",attention:" + d + ":" + std::to_string(heads) + "],residual[layernorm:" +
         d + ",linear:" + d + ":" + h + ",gelu,linear:" + h + ":" + d + "]]";
}

std::vector<std::string> gpt_layer_specs(const gpt_config& c) {
  const std::string d = std::to_string(c.dim), v = std::to_string(c.vocabulary);
  std::vector<std::string> specs{"embedding:" + v + ":" + d, "position:" + std::to_string(c.context) + ":" + d};
  for (std::size_t i = 0; i < c.layers; ++i) specs.push_back(gpt_block_spec(c.dim, c.heads));
  specs.push_back("layernorm:" + d);
  specs.push_back("linear:" + d + ":" + v);
  return specs;
}

}  // namespace ap

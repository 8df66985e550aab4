#include "model/gpt_spec.hpp"

#include <cmath>
#include <set>
#include <stdexcept>

#include "model/attention.hpp"
#include "model/spec_text.hpp"

namespace ap {

namespace {

struct preset {
  const char* name;
  gpt_config config;
};

gpt_config gpt2_shape(std::size_t layers, std::size_t dim, std::size_t heads, std::size_t context) {
  gpt_config c;
  c.layers = layers, c.dim = dim, c.heads = heads, c.context = context, c.vocabulary = 50257, c.init = "gpt2", c.tied = true;
  return c;
}

gpt_config llama_shape(std::size_t layers, std::size_t dim, std::size_t heads, std::size_t kv_heads,
                       std::size_t context, std::size_t mlp) {
  gpt_config c = gpt2_shape(layers, dim, heads, context);
  c.vocabulary = 32000, c.bias = false, c.norm = "rms", c.pos = "rope", c.act = "swiglu", c.kv_heads = kv_heads;
  c.tied = false;  // LLaMA's head is a weight of its own
  c.mlp = mlp;
  return c;
}

const std::vector<preset>& presets() {
  static const std::vector<preset> all{{"gpt2", gpt2_shape(12, 768, 12, 1024)},
                                       {"gpt2-medium", gpt2_shape(24, 1024, 16, 1024)},
                                       {"gpt2-tiny", gpt2_shape(2, 64, 4, 64)},
                                       {"llama", llama_shape(12, 768, 12, 4, 1024, 0)},
                                       {"llama-tiny", llama_shape(2, 64, 4, 2, 64, 176)}};
  return all;
}

// The config a spec's name before ':' starts from; nullptr for a name that is not a GPT's.
const gpt_config* base_of(const std::string& name) {
  static const gpt_config plain;
  if (name == "gpt") return &plain;
  for (const preset& p : presets())
    if (name == p.name) return &p.config;
  return nullptr;
}

std::string name_of(const std::string& text) { return text.substr(0, text.find(':')); }

}  // namespace

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const preset& p : presets()) names.push_back(p.name);
  return names;
}

bool is_gpt_spec(const std::string& text) { return base_of(name_of(text)) != nullptr; }

gpt_config parse_gpt_spec(const std::string& text) {
  const gpt_config* base = base_of(name_of(text));
  if (!base) {
    std::string names;
    for (const std::string& n : gpt_preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw std::invalid_argument("bad model spec '" + text +
                                "': a GPT model is written gpt:layers=8,dim=256,heads=8,context=128, or a preset "
                                "(" + names + ") with keys to override after ':'");
  }
  gpt_config config = *base;
  const auto bad = [&](const std::string& why) { return std::invalid_argument("bad model spec '" + text + "': " + why); };
  std::set<std::string> seen;
  const std::size_t colon = text.find(':');
  if (colon != std::string::npos) {
    for (const std::string& item : split_fields(text.substr(colon + 1), ',')) {
      const auto eq = item.find('=');
      if (eq == std::string::npos) throw bad("'" + item + "' is not KEY=VALUE");
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      const auto choice = [&](std::string* field, const std::set<std::string>& allowed, const std::string& names) {
        if (!allowed.count(value)) throw bad("key '" + key + "' must be " + names + ", got '" + value + "'");
        *field = value;
      };
      std::size_t* number = key == "layers"    ? &config.layers
                            : key == "dim"     ? &config.dim
                            : key == "heads"   ? &config.heads
                            : key == "context" ? &config.context
                            : key == "vocab"   ? &config.vocabulary
                            : key == "mlp"     ? &config.mlp
                            : key == "kv_heads" ? &config.kv_heads
                                               : nullptr;
      const bool known = number || key == "bias" || key == "tied" || key == "gelu" || key == "norm" || key == "init" ||
                         key == "pos" || key == "act";
      if (!known)
        throw bad("unknown key '" + key +
                  "' (known: layers, dim, heads, context, vocab, bias, tied, gelu, norm, mlp, init, pos, kv_heads, act)");
      if (!seen.insert(key).second) throw bad("key '" + key + "' is given twice");
      if (key == "bias" || key == "tied") {
        std::string b;
        choice(&b, {"0", "1"}, "0 or 1");
        (key == "bias" ? config.bias : config.tied) = b == "1";
      } else if (key == "gelu") {
        choice(&config.gelu, {"tanh", "exact"}, "tanh or exact");
      } else if (key == "norm") {
        choice(&config.norm, {"layer", "rms"}, "layer or rms");
      } else if (key == "init") {
        choice(&config.init, {"kaiming", "gpt2"}, "kaiming or gpt2");
      } else if (key == "pos") {
        choice(&config.pos, {"learned", "rope"}, "learned or rope");
      } else if (key == "act") {
        choice(&config.act, {"gelu", "swiglu"}, "gelu or swiglu");
      } else {
        std::size_t parsed = 0, used = 0;
        try {
          parsed = value.empty() || value[0] == '-' || value[0] == '+' ? 0 : std::stoul(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != value.size() || parsed == 0)
          throw bad("key '" + key + "' must be a positive integer, got '" + value + "'");
        *number = parsed;
      }
    }
  }
  if (config.dim % config.heads != 0)
    throw bad("key 'heads' (" + std::to_string(config.heads) + ") must divide key 'dim' (" + std::to_string(config.dim) + ")");
  if (config.heads % config.kv_width() != 0)
    throw bad("key 'kv_heads' (" + std::to_string(config.kv_heads) + ") must divide key 'heads' (" +
              std::to_string(config.heads) + ")");
  if (config.pos == "rope" && (config.dim / config.heads) % 2 != 0)
    throw bad("key 'pos' (rope) needs an even head width, got key 'dim' (" + std::to_string(config.dim) +
              ") / key 'heads' (" + std::to_string(config.heads) + ") = " + std::to_string(config.dim / config.heads));
  return config;
}

std::string gpt_spec_text(const gpt_config& c) {
  const gpt_config plain;
  std::string text = "gpt:layers=" + std::to_string(c.layers) + ",dim=" + std::to_string(c.dim) + ",heads=" +
                     std::to_string(c.heads) + ",context=" + std::to_string(c.context);
  if (c.vocabulary != plain.vocabulary) text += ",vocab=" + std::to_string(c.vocabulary);
  if (c.bias != plain.bias) text += std::string(",bias=") + (c.bias ? "1" : "0");
  if (c.gelu != plain.gelu) text += ",gelu=" + c.gelu;
  if (c.norm != plain.norm) text += ",norm=" + c.norm;
  if (c.mlp_width() != c.default_mlp_width()) text += ",mlp=" + std::to_string(c.mlp_width());
  if (c.init != plain.init) text += ",init=" + c.init;
  if (c.tied != plain.tied) text += std::string(",tied=") + (c.tied ? "1" : "0");
  if (c.pos != plain.pos) text += ",pos=" + c.pos;
  if (c.kv_width() != c.heads) text += ",kv_heads=" + std::to_string(c.kv_width());
  if (c.act != plain.act) text += ",act=" + c.act;
  return text;
}

namespace {

// The options of each kind of layer, empty for init=kaiming (Note [GPT-2 initialisation]).
struct layer_options_text {
  std::string weights;   // ":std=0.02" on every Linear and embedding
  std::string residual;  // ":std=0.02/sqrt(2 layers)" on the projections into the residual stream
  std::string bias;      // ":bias=0" without biases
};

layer_options_text options_of(const gpt_config& c) {
  layer_options_text o;
  if (c.init == "gpt2") {
    const float base = 0.02f;
    o.weights = ":std=" + format_float(base);
    o.residual = format_float(float(double(base) / std::sqrt(2.0 * double(c.layers))));
  }
  if (!c.bias) o.bias = ":bias=0";
  return o;
}

std::string norm_spec(const gpt_config& c, const layer_options_text& o) {
  const std::string d = std::to_string(c.dim);
  return c.norm == "rms" ? "rmsnorm:" + d : "layernorm:" + d + o.bias;
}

}  // namespace

std::string gpt_block_spec(const gpt_config& c) {
  const layer_options_text o = options_of(c);
  const std::string d = std::to_string(c.dim), h = std::to_string(c.mlp_width());
  const std::string residual_std = o.residual.empty() ? "" : ":std=" + o.residual;
  const std::string attention = "attention:" + d + ":" + std::to_string(c.heads) + o.weights +
                                (o.residual.empty() ? "" : ":proj_std=" + o.residual) + o.bias +
                                (c.kv_width() != c.heads ? ":kv_heads=" + std::to_string(c.kv_width()) : "") +
                                (c.pos == "rope" ? ":rope=" + rope_base_text(default_rope_base) : "");
  if (c.act == "swiglu")  // adds into the residual stream
    return "block[residual[" + norm_spec(c, o) + "," + attention + "],residual[" + norm_spec(c, o) + ",swiglu_mlp:" +
           d + ":" + h + o.weights + (o.residual.empty() ? "" : ":down_std=" + o.residual) + o.bias + "]]";
  const std::string gelu = c.gelu == "exact" ? "gelu:exact" : "gelu";
  return "block[residual[" + norm_spec(c, o) + "," + attention + "],residual[" + norm_spec(c, o) + ",linear:" + d +
         ":" + h + o.weights + o.bias + "," + gelu + ",linear:" + h + ":" + d + residual_std + o.bias + "]]";
}

std::string gpt_block_spec(std::size_t dim, std::size_t heads) {
  gpt_config c;
  c.dim = dim, c.heads = heads;
  return gpt_block_spec(c);
}

std::vector<std::string> gpt_layer_specs(const gpt_config& c) {
  const layer_options_text o = options_of(c);
  const std::string d = std::to_string(c.dim), v = std::to_string(c.vocabulary);
  std::vector<std::string> specs{"embedding:" + v + ":" + d + o.weights};
  if (c.pos != "rope") specs.push_back("position:" + std::to_string(c.context) + ":" + d + o.weights);
  const std::string block = gpt_block_spec(c);
  for (std::size_t i = 0; i < c.layers; ++i) specs.push_back(block);
  specs.push_back(norm_spec(c, o));
  if (c.tied)  // no bias, as GPT-2's; the embedding's std, so the two draw alike (Note [tied weights])
    specs.push_back("linear:" + d + ":" + v + o.weights + ":bias=0:tie=0");
  else
    specs.push_back("linear:" + d + ":" + v + o.weights + o.bias);
  return specs;
}

}  // namespace ap

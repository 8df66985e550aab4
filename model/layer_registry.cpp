// The layer-kind registry and make_layer(): the one place that maps spec texts to layer types.
#include "model/layer_registry.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "model/attention.hpp"
#include "model/block.hpp"
#include "model/dropout.hpp"
#include "model/gelu.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/parallel_attention.hpp"
#include "model/parallel_linear.hpp"
#include "model/parallel_swiglu.hpp"
#include "model/position_embedding.hpp"
#include "model/relu.hpp"
#include "model/rms_norm.hpp"
#include "model/sigmoid.hpp"
#include "model/sleep_layer.hpp"
#include "model/spec_text.hpp"
#include "model/swiglu.hpp"
#include "model/tanh.hpp"
#include "model/token_embedding.hpp"
#include "model/vocab_parallel.hpp"

namespace ap {

namespace {

struct registry {
  std::mutex mutex;
  std::map<std::string, layer_factory> factories;
  std::map<std::string, tensor_parallel_traits> traits;
};

// Every registration, built-in or user, goes through here.
void add_kind(registry& r, const std::string& kind, layer_factory factory, tensor_parallel_traits traits = {}) {
  if (!is_kind_name(kind))  // so that it reads back through parse_layer_spec
    throw std::logic_error("cannot register layer kind '" + kind +
                           "': a kind is lower-case letters, digits and '_', starting with a letter");
  if (!factory) throw std::logic_error("cannot register layer kind '" + kind + "': no factory");
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.factories.emplace(kind, std::move(factory)).second)
    throw std::logic_error("layer kind '" + kind + "' is registered twice");
  r.traits.emplace(kind, std::move(traits));
}

void register_builtin_kinds(registry& r);

// Built on first use with the built-in kinds, so static-initialisation registrations find it. Never destroyed:
// static destructors elsewhere may still build layers.
registry& the_registry() {
  static registry* r = [] {
    auto* made = new registry;
    register_builtin_kinds(*made);
    return made;
  }();
  return *r;
}

template <class L>
layer_factory plain(const char* form) {
  return [form](const layer_spec& s) -> std::unique_ptr<layer> {
    s.expect_fields(0, form);
    return std::make_unique<L>();
  };
}

void register_builtin_kinds(registry& r) {
  const auto register_layer_kind = [&r](const std::string& kind, layer_factory f, tensor_parallel_traits t = {}) {
    add_kind(r, kind, std::move(f), std::move(t));
  };
  tensor_parallel_traits pairs;  // Note [Megatron pairing]
  pairs.column_kind = "column_linear";
  pairs.row_kind = "row_linear";
  register_layer_kind(
      "linear",
      [](const layer_spec& s) {
        s.expect_fields_and_options(2, "linear:IN:OUT[:std=S][:bias=0|1][:tie=LAYER]", {"std", "bias", "tie"});
        std::optional<std::size_t> tie;
        if (const auto v = s.option("tie")) tie = static_cast<std::size_t>(parse_seed(*v, s.text));
        return std::make_unique<linear>(s.width(0), s.width(1), parse_init_options(s), tie);
      },
      pairs);
  register_layer_kind("column_linear", [](const layer_spec& s) -> std::unique_ptr<layer> {
    s.expect_fields_and_options(2, "column_linear:IN:OUT[:BLOCKS|:W1+W2+...][:std=S][:bias=0|1][:tie=LAYER][:vocab=0|1]",
                                {"std", "bias", "tie", "vocab"}, 3);
    head_options head;
    if (const auto v = s.option("tie")) head.tie = static_cast<std::size_t>(parse_seed(*v, s.text));
    if (const auto v = s.option("vocab")) {
      if (*v != "0" && *v != "1") throw std::invalid_argument("bad layer spec '" + s.text + "': vocab must be 0 or 1");
      head.vocabulary = *v == "1";
    }
    if (s.positional_fields() == 3 && s.fields[2].find('+') != std::string::npos) {  // unequal (Note [shard blocks])
      if (head.vocabulary || head.tie)
        throw std::invalid_argument("bad layer spec '" + s.text + "': a vocabulary head or a tied weight is one block");
      std::vector<std::size_t> widths;
      std::size_t sum = 0;
      for (const std::string& w : split_fields(s.fields[2], '+')) widths.push_back(parse_width(w, s.text)), sum += widths.back();
      if (sum != s.width(1))
        throw std::invalid_argument("bad layer spec '" + s.text + "': the block widths " + s.fields[2] + " sum to " +
                                    std::to_string(sum) + ", not OUT (" + s.fields[1] + ")");
      return std::make_unique<column_parallel_linear>(s.width(0), widths, parse_init_options(s));
    }
    return std::make_unique<column_parallel_linear>(s.width(0), s.width(1), s.positional_fields() == 3 ? s.width(2) : 1,
                                                    parse_init_options(s), head);
  });
  register_layer_kind("row_linear", [](const layer_spec& s) {
    s.expect_fields_and_options(2, "row_linear:IN:OUT[:std=S][:bias=0|1]", {"std", "bias"});
    return std::make_unique<row_parallel_linear>(s.width(0), s.width(1), parse_init_options(s));
  });
  register_layer_kind("layernorm", [](const layer_spec& s) {
    s.expect_fields_and_options(1, "layernorm:WIDTH[:bias=0|1]", {"bias"});
    return std::make_unique<layer_norm>(s.width(0), parse_init_options(s).bias);
  });
  register_layer_kind("rmsnorm", [](const layer_spec& s) {  // whole on every tensor-parallel rank, as layernorm
    s.expect_fields(1, "rmsnorm:WIDTH");
    return std::make_unique<rms_norm>(s.width(0));
  });
  register_layer_kind("dropout", [](const layer_spec& s) {
    s.expect_fields(2, "dropout:P:SEED");
    const float p = s.number(0);
    if (!(p >= 0.0f && p < 1.0f))
      throw std::invalid_argument("bad layer spec '" + s.text + "': dropout probability must be in [0, 1)");
    return std::make_unique<dropout>(p, s.seed(1));
  });
  register_layer_kind("sleep", [](const layer_spec& s) {
    s.expect_fields(2, "sleep:FORWARD_MS:BACKWARD_MS");
    const float forward_ms = s.number(0), backward_ms = s.number(1);
    if (forward_ms < 0 || backward_ms < 0)
      throw std::invalid_argument("bad layer spec '" + s.text + "': sleep times must not be negative");
    return std::make_unique<sleep_layer>(forward_ms, backward_ms);
  });
  register_layer_kind("embedding", [](const layer_spec& s) {
    s.expect_fields_and_options(2, "embedding:VOCABULARY:DIM[:std=S]", {"std"});
    return std::make_unique<token_embedding>(s.width(0), s.width(1), parse_init_options(s).std);
  });
  register_layer_kind("vocab_embedding", [](const layer_spec& s) {  // Note [vocab-parallel]
    s.expect_fields_and_options(2, "vocab_embedding:VOCABULARY:DIM[:std=S]", {"std"});
    return std::make_unique<vocab_parallel_embedding>(s.width(0), s.width(1), parse_init_options(s).std);
  });
  register_layer_kind("position", [](const layer_spec& s) {
    s.expect_fields_and_options(2, "position:CONTEXT:DIM[:std=S]", {"std"});
    return std::make_unique<position_embedding>(s.width(0), s.width(1), parse_init_options(s).std);
  });
  tensor_parallel_traits heads;  // Note [head-parallel attention]
  heads.split_kind = "head_parallel_attention";
  const auto attention_factory = [](const char* form, auto make) {
    return [form, make](const layer_spec& s) -> std::unique_ptr<layer> {
      s.expect_fields_and_options(2, form, attention_option_keys());
      if (s.width(0) % s.width(1) != 0)
        throw std::invalid_argument("bad layer spec '" + s.text + "': heads (" + s.fields[1] + ") must divide dim (" +
                                    s.fields[0] + ")");
      return make(s.width(0), s.width(1), parse_attention_init(s));
    };
  };
  register_layer_kind(
      "attention",
      attention_factory("attention:DIM:HEADS[:std=S][:proj_std=P][:bias=0|1][:kv_heads=K][:rope=BASE]",
                        [](std::size_t d, std::size_t h, const attention_init& i) {
                          return std::make_unique<causal_self_attention>(d, h, i);
                        }),
      heads);
  register_layer_kind(
      "head_parallel_attention",
      attention_factory("head_parallel_attention:DIM:HEADS[:std=S][:proj_std=P][:bias=0|1][:kv_heads=K][:rope=BASE]",
                        [](std::size_t d, std::size_t h, const attention_init& i) {
                          return std::make_unique<head_parallel_attention>(d, h, i);
                        }));
  tensor_parallel_traits units;  // Note [tensor-parallel SwiGLU]
  units.split_kind = "parallel_swiglu_mlp";
  register_layer_kind(
      "swiglu_mlp",
      [](const layer_spec& s) {
        s.expect_fields_and_options(2, "swiglu_mlp:DIM:HIDDEN[:std=S][:down_std=P][:bias=0|1]", {"std", "down_std", "bias"});
        return std::make_unique<swiglu_mlp>(s.width(0), s.width(1), parse_swiglu_init(s));
      },
      units);
  register_layer_kind("parallel_swiglu_mlp", [](const layer_spec& s) {
    s.expect_fields_and_options(2, "parallel_swiglu_mlp:DIM:HIDDEN[:std=S][:down_std=P][:bias=0|1]",
                                {"std", "down_std", "bias"});
    return std::make_unique<parallel_swiglu_mlp>(s.width(0), s.width(1), parse_swiglu_init(s));
  });
  tensor_parallel_traits elementwise;
  elementwise.elementwise = true;
  register_layer_kind("relu", plain<relu>("relu"), elementwise);
  register_layer_kind(
      "gelu",
      [](const layer_spec& s) {
        if (!s.parts.empty() || s.fields.size() > 1 || (s.fields.size() == 1 && s.fields[0] != "exact" && s.fields[0] != "tanh"))
          throw std::invalid_argument("bad layer spec '" + s.text + "': expected gelu, gelu:tanh or gelu:exact");
        return std::make_unique<gelu>(s.fields.size() == 1 && s.fields[0] == "exact");
      },
      elementwise);
  register_layer_kind("tanh", plain<tanh_layer>("tanh"), elementwise);
  register_layer_kind("sigmoid", plain<sigmoid>("sigmoid"), elementwise);
  tensor_parallel_traits composite;
  composite.split_parts = true;
  register_layer_kind("block", [](const layer_spec& s) { return make_block(s, /*residual=*/false); }, composite);
  register_layer_kind("residual", [](const layer_spec& s) { return make_block(s, /*residual=*/true); }, composite);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

void register_layer_kind(const std::string& kind, layer_factory factory, tensor_parallel_traits traits) {
  add_kind(the_registry(), kind, std::move(factory), std::move(traits));
}

tensor_parallel_traits tensor_parallel_traits_of(const std::string& kind) {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.traits.find(kind);
  return it == r.traits.end() ? tensor_parallel_traits{} : it->second;
}

std::vector<std::string> registered_layer_kinds() {
  registry& r = the_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> kinds;
  for (const auto& [kind, f] : r.factories) kinds.push_back(kind);
  return kinds;
}

std::unique_ptr<layer> make_layer(const std::string& spec) {
  const layer_spec parsed = parse_layer_spec(spec);
  layer_factory factory;
  {
    registry& r = the_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto it = r.factories.find(parsed.kind); it != r.factories.end()) factory = it->second;
  }
  if (!factory)
    throw std::invalid_argument("bad layer spec '" + spec + "': unknown layer kind '" + parsed.kind +
                                "' (known: " + joined(registered_layer_kinds()) + ")");
  std::unique_ptr<layer> made = factory(parsed);
  if (!made) throw std::logic_error("the factory of layer kind '" + parsed.kind + "' built nothing for '" + spec + "'");
  return made;
}

}  // namespace ap

// The open registry of layer kinds: make_layer() builds a layer by its spec's kind. Built-in kinds register
// like user code (`static const ap::layer_kind_registration k{"scale", make_scale};`). A node refuses a kind
// it does not know, so a node running user layers is a binary with them linked in (actors/run_node.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/layer_spec.hpp"

namespace ap {

// Note [tensor-parallel split]: how a kind takes part in tensor parallelism, said when it registers, so a
// user's layer splits like a built-in one: it becomes another registered kind with the same fields.
struct tensor_parallel_traits {
  bool elementwise = false;  // a Megatron pair may span it (relu, gelu, tanh, sigmoid)
  std::string column_kind;   // as a pair's first layer (linear -> column_linear); empty: never paired
  std::string row_kind;      // as a pair's second layer (linear -> row_linear)
  std::string split_kind;    // on its own (attention -> head_parallel_attention); empty: whole
  bool split_parts = false;  // a composite whose parts are split on their own
};

// Builds the layer a parsed spec describes; throws std::invalid_argument naming spec.text on bad fields.
using layer_factory = std::function<std::unique_ptr<layer>(const layer_spec&)>;

// Registers `kind` (as is_kind_name). Throws std::logic_error naming it when taken or invalid. Thread-safe.
void register_layer_kind(const std::string& kind, layer_factory factory, tensor_parallel_traits traits = {});

// What `kind` said of itself when it registered; the default for an unknown kind.
tensor_parallel_traits tensor_parallel_traits_of(const std::string& kind);

// Every registered kind, sorted.
std::vector<std::string> registered_layer_kinds();

// Registers a kind during static initialisation, in the user's own source file (the linker drops a static
// library's unreferenced objects).
struct layer_kind_registration {
  layer_kind_registration(const std::string& kind, layer_factory factory, tensor_parallel_traits traits = {}) {
    register_layer_kind(kind, std::move(factory), std::move(traits));
  }
};

}  // namespace ap

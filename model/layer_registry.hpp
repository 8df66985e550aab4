// The open registry of layer kinds: make_layer() builds a layer from its spec text by looking up the
// text's kind here. The built-in kinds register through it like user code does, so a user's layer plugs
// into Sequential, the pipeline, checkpoints and nodes (which rebuild layers from spec texts) with no
// change anywhere else:
//
//   std::unique_ptr<ap::layer> make_scale(const ap::layer_spec& s) {
//     s.expect_fields(1, "scale:FACTOR");
//     return std::make_unique<scale>(s.number(0));
//   }
//   static const ap::layer_kind_registration scale_kind{"scale", make_scale};
//
// A node refuses a model that uses a kind it does not know (handshake.hpp), so a node that runs user
// layers is a binary with them linked in (ap::run_node, actors/run_node.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/layer.hpp"
#include "model/layer_spec.hpp"

namespace ap {

// Note [tensor-parallel split]: how a kind takes part in tensor parallelism (tensor_parallel_specs in
// model/tensor_parallel.hpp), said by the kind when it registers, so a user's layer splits like a built-in
// one. A layer that splits becomes another registered kind with the same fields (linear:8:16 ->
// column_linear:8:16), whose layer is a tensor_parallel_layer (model/parallel_linear.hpp):
//   ap::tensor_parallel_traits pairs;
//   pairs.column_kind = "my_column_linear";  // registered too, with the same fields
//   pairs.row_kind = "my_row_linear";
//   static const ap::layer_kind_registration my_linear{"my_linear", make_my_linear, pairs};
struct tensor_parallel_traits {
  bool elementwise = false;  // acts on each element alone: a Megatron pair may span it (relu, gelu, tanh, sigmoid)
  std::string column_kind;   // the kind it becomes as the first layer of a pair (linear -> column_linear); empty: never paired
  std::string row_kind;      // the kind it becomes as the second layer of a pair (linear -> row_linear)
  std::string split_kind;    // the kind it becomes on its own (attention -> head_parallel_attention); empty: whole
  bool split_parts = false;  // a composite (block[...], residual[...]) whose list of parts is split on its own
};

// Builds the layer a parsed spec describes; throws std::invalid_argument naming spec.text when the
// fields do not fit (layer_spec's helpers do).
using layer_factory = std::function<std::unique_ptr<layer>(const layer_spec&)>;

// Registers `kind` (lower-case letters, digits and '_', starting with a letter). Throws std::logic_error
// naming the kind when it is already registered or not a valid name. Safe from any thread.
void register_layer_kind(const std::string& kind, layer_factory factory, tensor_parallel_traits traits = {});

// What `kind` said of itself when it registered; the default (whole, not element-wise) for an unknown kind.
tensor_parallel_traits tensor_parallel_traits_of(const std::string& kind);

// Every registered kind, sorted.
std::vector<std::string> registered_layer_kinds();

// Registers a kind during static initialisation: `static const layer_kind_registration r{"scale", f};`
// in the user's own source file (not in a static library, whose unreferenced objects the linker drops).
struct layer_kind_registration {
  layer_kind_registration(const std::string& kind, layer_factory factory, tensor_parallel_traits traits = {}) {
    register_layer_kind(kind, std::move(factory), std::move(traits));
  }
};

}  // namespace ap

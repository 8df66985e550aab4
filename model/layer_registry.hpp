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

// Builds the layer a parsed spec describes; throws std::invalid_argument naming spec.text when the
// fields do not fit (layer_spec's helpers do).
using layer_factory = std::function<std::unique_ptr<layer>(const layer_spec&)>;

// Registers `kind` (lower-case letters, digits and '_', starting with a letter). Throws std::logic_error
// naming the kind when it is already registered or not a valid name. Safe from any thread.
void register_layer_kind(const std::string& kind, layer_factory factory);

// Every registered kind, sorted.
std::vector<std::string> registered_layer_kinds();

// Registers a kind during static initialisation: `static const layer_kind_registration r{"scale", f};`
// in the user's own source file (not in a static library, whose unreferenced objects the linker drops).
struct layer_kind_registration {
  layer_kind_registration(const std::string& kind, layer_factory factory) {
    register_layer_kind(kind, std::move(factory));
  }
};

}  // namespace ap

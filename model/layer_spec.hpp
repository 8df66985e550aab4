// A layer's spec text taken apart: "linear:784:512" is kind "linear" with fields {"784", "512"};
// "residual[layernorm:64,linear:64:64]" is kind "residual" with parts {"layernorm:64", "linear:64:64"}.
//
// Grammar: SPEC = KIND (":" FIELD)* ("[" SPEC ("," SPEC)* "]")?. KIND is lower-case letters, digits and '_',
// starting with a letter; a FIELD holds no ':', ',', '[' or ']'. Parts nest: "residual[block[gelu],tanh]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ap {

struct layer_spec {
  std::string text;                 // as written, for error messages: "linear:784:512"
  std::string kind;                 // "linear"
  std::vector<std::string> fields;  // after the kind: {"784", "512"}
  std::vector<std::string> parts;   // the sub-layer specs inside [...], in order; empty for a plain layer

  // Throws std::invalid_argument "bad layer spec 'TEXT': expected FORM" unless the spec has exactly
  // `fields` fields and no parts (a plain layer) ...
  void expect_fields(std::size_t fields, const std::string& form) const;
  // ... or no fields and at least one part (a block).
  void expect_parts(const std::string& form) const;

  // Field i read as a positive integer, a finite number, a non-negative integer; errors name the text.
  std::size_t width(std::size_t i) const;
  float number(std::size_t i) const;
  std::uint64_t seed(std::size_t i) const;
};

// Splits `text` by the grammar above (parts are split, not parsed: each is parsed when its layer is
// built). Throws std::invalid_argument naming the text and what is wrong: "bad layer spec 'residual[relu':
// '[' at 8 is never closed".
layer_spec parse_layer_spec(const std::string& text);

// Whether `name` is a whole KIND of the grammar above: lower-case letters, digits and '_', starting with a
// letter. Layer kinds and loss names (model/loss.hpp) are registered under such names.
bool is_kind_name(const std::string& name);

// Every kind `text` uses, its parts' kinds included, each once, in order of appearance.
std::vector<std::string> layer_kinds_in(const std::string& text);

}  // namespace ap

// A layer's spec text taken apart: "linear:784:512" is kind "linear" with fields {"784", "512"};
// "residual[layernorm:64,linear:64:64]" is kind "residual" with parts {"layernorm:64", "linear:64:64"}.
// Grammar: SPEC = KIND (":" FIELD)* ("[" SPEC ("," SPEC)* "]")?; KIND as is_kind_name; a FIELD holds no
// ':', ',', '[' or ']'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ap {

struct layer_spec {
  std::string text;                 // as written, for error messages
  std::string kind;                 // "linear"
  std::vector<std::string> fields;  // after the kind: {"784", "512"}
  std::vector<std::string> parts;   // the specs inside [...]; empty for a plain layer

  // Throws std::invalid_argument "bad layer spec 'TEXT': expected FORM" unless exactly `fields` fields, no parts ...
  void expect_fields(std::size_t fields, const std::string& form) const;
  // ... or no fields and some parts (a block).
  void expect_parts(const std::string& form) const;
  // `fields` positional fields (up to `most` if greater), then `known` KEY=VALUE options, each at most once
  // (Note [layer options]). Throws naming the text and the key.
  void expect_fields_and_options(std::size_t fields, const std::string& form, const std::vector<std::string>& known,
                                 std::size_t most = 0) const;
  // The fields before the first KEY=VALUE one.
  std::size_t positional_fields() const;
  // The value of option `key`; nullopt when absent.
  std::optional<std::string> option(const std::string& key) const;

  // Field i as a positive integer, a finite number, a non-negative integer; errors name the text.
  std::size_t width(std::size_t i) const;
  float number(std::size_t i) const;
  std::uint64_t seed(std::size_t i) const;
};

// Note [layer options]: a spec may end in KEY=VALUE options after its positional fields
// ("linear:768:3072:std=0.02:bias=0"), so every copy rebuilt from the text initialises as the original.
struct init_options {
  float std = 0.0f;  // > 0: weights normal(0, std); 0: the layer's default
  bool bias = true;  // false: no bias parameter
};
// "std" (a positive number) and "bias" (0 or 1) of `s`; errors name the text and key.
init_options parse_init_options(const layer_spec& s, const std::string& std_key = "std");
// ":std=S" and ":bias=0" when not default: what parse_init_options reads back.
std::string init_options_text(const init_options& o, const std::string& std_key = "std");

// Splits `text` by the grammar (parts are parsed when their layer is built). Throws std::invalid_argument
// naming the text and the fault: "bad layer spec 'residual[relu': '[' at 8 is never closed".
layer_spec parse_layer_spec(const std::string& text);

// Whether `name` is a KIND: lower-case letters, digits and '_', starting with a letter (also loss names).
bool is_kind_name(const std::string& name);

// Every kind `text` uses, each once, in order of appearance.
std::vector<std::string> layer_kinds_in(const std::string& text);

}  // namespace ap

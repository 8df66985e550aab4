// The element types a tensor can hold, with their names in one table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ap {

enum class dtype : std::uint8_t { float32 = 0, bfloat16 = 1 };
inline constexpr std::size_t dtype_count = 2;

// Bytes per element.
std::size_t dtype_size(dtype type);
// "float32", "bfloat16": the names --dtype takes and errors print.
const char* dtype_name(dtype type);
// safetensors' names: "F32", "BF16".
const char* safetensors_dtype_name(dtype type);
// By either name ("float32"/"fp32"/"f32"/"F32", "bfloat16"/"bf16"/"BF16"); else nullopt.
std::optional<dtype> parse_dtype(const std::string& text);
// The dtype a wire byte stands for; nullopt for an unknown code (a newer or corrupt peer).
std::optional<dtype> dtype_from_code(std::uint8_t code);

}  // namespace ap

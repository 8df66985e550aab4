#include "tensor/dtype.hpp"

namespace ap {

namespace {

struct dtype_row {
  dtype type;
  std::size_t size;
  const char* name;
  const char* safetensors_name;
  const char* short_name;
  const char* alias;
};

// One row per dtype, in enum order.
constexpr dtype_row dtype_table[] = {
    {dtype::float32, 4, "float32", "F32", "fp32", "f32"},
    {dtype::bfloat16, 2, "bfloat16", "BF16", "bf16", "bfloat"},
};
static_assert(sizeof(dtype_table) / sizeof(dtype_table[0]) == dtype_count, "one row per dtype");

const dtype_row& row(dtype type) { return dtype_table[static_cast<std::size_t>(type)]; }

}  // namespace

std::size_t dtype_size(dtype type) { return row(type).size; }
const char* dtype_name(dtype type) { return row(type).name; }
const char* safetensors_dtype_name(dtype type) { return row(type).safetensors_name; }

std::optional<dtype> parse_dtype(const std::string& text) {
  for (const dtype_row& r : dtype_table)
    if (text == r.name || text == r.safetensors_name || text == r.short_name || text == r.alias) return r.type;
  return std::nullopt;
}

std::optional<dtype> dtype_from_code(std::uint8_t code) {
  if (code >= dtype_count) return std::nullopt;
  return static_cast<dtype>(code);
}

}  // namespace ap

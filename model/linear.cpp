#include "model/linear.hpp"

#include <cmath>
#include <stdexcept>

#include "model/token_embedding.hpp"
#include "model/weight_tie.hpp"
#include "random/seeded_random.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/matmul.hpp"

namespace ap {

linear::linear(std::size_t in, std::size_t out, init_options init, std::optional<std::size_t> tie)
    : in_(in), out_(out), init_(init), tie_(tie), weight_(zeros({in, out})), bias_(zeros({out})), dweight_(zeros({in, out})),
      dbias_(zeros({out})) {
  if (in == 0 || out == 0)
    throw std::invalid_argument("Linear needs positive widths, got " + describe());
}

std::string linear::describe() const {
  return "Linear(" + std::to_string(in_) + "->" + std::to_string(out_) + ")";
}

std::string linear::spec() const {
  return "linear:" + std::to_string(in_) + ":" + std::to_string(out_) + init_options_text(init_) +
         (tie_ ? ":tie=" + std::to_string(*tie_) : std::string());
}

namespace {

shape_t with_last_axis(const tensor& x, std::size_t width) {
  shape_t shape = shape_of(x);
  if (shape.empty()) shape.push_back(width);
  shape.back() = width;
  return shape;
}

// C = alpha op(a) op(w) + beta C for a bfloat16 `a` and the weights as weight_bf16() holds them.
void product_with_weights(bool transpose_w, std::size_t m, std::size_t n, std::size_t k, const tensor& a,
                          const tensor& w, float beta, float* c) {
  if (w.type() == dtype::bfloat16)
    gemm(false, transpose_w, m, n, k, 1.0f, a.bf16_data(), w.bf16_data(), beta, c);
  else
    gemm_widened_b(false, transpose_w, m, n, k, 1.0f, a.bf16_data(), w.data(), beta, c);
}

}  // namespace

tensor linear::forward(const tensor& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, nullptr, cache);
}

tensor linear::forward_owned(tensor&& x, layer_cache& cache, const forward_context&) const {
  return forward_keeping(x, &x, cache);  // a float32 x becomes the stash, uncopied (Note [owned input])
}

tensor linear::forward_keeping(const tensor& x, tensor* owned, layer_cache& cache) const {
  if (cols(x) != in_)
    throw std::invalid_argument(describe() + " takes " + std::to_string(in_) + " features, got input of shape " +
                                shape_string(x));
  const std::size_t n = rows(x);
  tensor y = tensor::from_shape(with_last_axis(x, out_));  // (rows, out)
  float* py = y.data();
  const float* pb = bias_.data();
  saved& s = cache.emplace<saved>();
  if (s.dy_bf16.type() == dtype::bfloat16) s.dy_bf16 = tensor();  // one a backward_weight never took
  if (compute_dtype() == dtype::bfloat16) {  // bf16 x and W, fp32 accumulation and y (Note [compute dtype])
    stash_as(s.x, x, dtype::bfloat16);
    const tensor& xs = s.x;
    const tensor& w = weight_bf16();
    if (w.type() == dtype::bfloat16) {  // Note [bias in the product]
      gemm_bias(n, out_, in_, xs.bf16_data(), w.bf16_data(), pb, py);
    } else {  // weights kept widened (Note [bf16 weights kept widened]): the product adds into the bias
      fill_rows(py, n, pb, out_);
      product_with_weights(false, n, out_, in_, xs, w, 1.0f, py);
    }
    return y;
  }
  gemm_bias(n, out_, in_, x.data(), weight_.data(), pb, py);  // Note [bias in the product]
  stash_input(s.x, x, owned);
  return y;
}

// Note [bf16 weights kept widened]: where bf16 products widen both operands to fp32 (bf16_products_widen():
// no AVX-512, or the reference backend), a bfloat16 weight copy would be widened again at every product.
// There the copy is kept widened instead (float32 holding bfloat16 values, made once per weight update) and
// taken through gemm_widened_b (Note [widened bf16 operands] in tensor/matmul.hpp): same bits, twice the
// copy's memory. With AVX-512's bf16 kernels the copy stays bfloat16.
const tensor& linear::weight_bf16() const {
  const dtype held = bf16_products_widen() ? dtype::float32 : dtype::bfloat16;
  tensor& copy = weight_bf16_.value;
  if (weight_bf16_.version != weight_.version() || copy.type() != held || copy.shape() != weight_.shape()) {
    if (held == dtype::bfloat16) {
      assign_as(copy, weight_, dtype::bfloat16);
    } else {
      if (copy.type() != dtype::float32 || copy.shape() != weight_.shape()) copy = tensor::from_shape(weight_.shape());
      round_to_bfloat16(weight_.data(), copy.data(), weight_.size());
    }
    weight_bf16_.version = weight_.version();
  }
  return copy;
}

std::uint64_t linear::derived_bytes() const {
  if (compute_dtype() != dtype::bfloat16) return 0;
  return std::uint64_t{in_} * out_ * (bf16_products_widen() ? sizeof(float) : sizeof(bfloat16));
}

namespace {

void check_dy(const linear& l, const tensor& dy, const tensor& x, std::size_t out) {
  if (cols(dy) != out || rows(dy) != rows(x))
    throw std::invalid_argument(l.describe() + " backward: dy of shape " + shape_string(dy) +
                                " does not fit the forward input " + shape_string(x));
}

}  // namespace

void linear::backward_input(const tensor& dy, layer_cache& cache, tensor* dx) const {
  saved& s = cache.get<saved>(*this);
  const tensor& x = s.x;
  check_dy(*this, dy, x, out_);
  if (!dx) return;
  bool fresh = false;
  float* pdx = accumulate_into(*dx, shape_of(x), *this, &fresh);  // (rows, in)
  if (x.type() == dtype::bfloat16) {  // Note [compute dtype]
    s.dy_bf16 = dy.astype(dtype::bfloat16);
    product_with_weights(true, rows(dy), in_, out_, s.dy_bf16, weight_bf16(), fresh ? 0.0f : 1.0f, pdx);
    return;
  }
  gemm(false, true, rows(dy), in_, out_, 1.0f, dy.data(), weight_.data(), fresh ? 0.0f : 1.0f, pdx);
}

void linear::backward_weight(const tensor& dy, layer_cache& cache) {
  saved& s = cache.get<saved>(*this);
  const tensor& x = s.x;
  check_dy(*this, dy, x, out_);
  const std::size_t n = rows(dy);
  if (x.type() == dtype::bfloat16) {  // bf16 products summed into the fp32 gradient (Note [compute dtype])
    if (s.dy_bf16.type() != dtype::bfloat16 || s.dy_bf16.size() != dy.size())  // backward_input made none
      s.dy_bf16 = dy.astype(dtype::bfloat16);
    gemm(true, false, in_, out_, n, 1.0f, x.bf16_data(), s.dy_bf16.bf16_data(), 1.0f, dweight_.data());
    s.dy_bf16 = tensor();
  } else {
    gemm(true, false, in_, out_, n, 1.0f, x.data(), dy.data(), 1.0f, dweight_.data());
  }
  if (init_.bias) add_column_sums(dy.data(), n, out_, dbias_.data());  // Note [row-block sums]
}

std::vector<parameter> linear::parameters(const std::string& prefix) {
  if (!init_.bias) return {{prefix + "weight", &weight_, &dweight_}};
  return {{prefix + "weight", &weight_, &dweight_}, {prefix + "bias", &bias_, &dbias_}};
}

void linear::initialize(std::uint64_t seed) {
  std::fill(bias_.begin(), bias_.end(), 0.0f);
  if (tie_) {  // the owner's table, transposed (Note [tied weights])
    token_embedding table(out_, in_, init_.std);
    table.initialize(seed);
    weight_.fill(0.0f);
    add_tied(weight_, *table.parameters("").front().value);
    return;
  }
  if (init_.std > 0.0f) return fill_normal(weight_, init_.std, seed);  // Note [GPT-2 initialisation] in gpt_spec.hpp
  // Kaiming (He) uniform, U(-sqrt(6 / in), sqrt(6 / in)); biases zero.
  const float bound = std::sqrt(6.0f / static_cast<float>(in_));
  splitmix64 random(seed);
  float* w = weight_.data();
  for (std::size_t i = 0; i < weight_.size(); ++i) w[i] = symmetric_unit_float(random.next()) * bound;
  std::fill(bias_.begin(), bias_.end(), 0.0f);
}

}  // namespace ap

// Every op that runs on the calling thread's compute threads gives the same bits on 1, 2 and 3 threads
// (Note [op threads] in tensor/elementwise.hpp), and the ops whose loops were split by columns or blocks give
// the bits of the serial loops they replaced (or, for the blocked gradient norm, a sum within rounding of an
// exact one).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/attention.hpp"
#include "model/block.hpp"
#include "model/gelu.hpp"
#include "model/grad_clip.hpp"
#include "model/layer_norm.hpp"
#include "model/linear.hpp"
#include "model/loss.hpp"
#include "model/optimizer.hpp"
#include "model/position_embedding.hpp"
#include "model/relu.hpp"
#include "model/token_embedding.hpp"
#include "random/seeded_random.hpp"
#include "tensor/matmul.hpp"
#include "tensor/bfloat16.hpp"
#include "tensor/compute.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/fast_exp.hpp"

using namespace ap;

namespace {

const int thread_counts[] = {1, 2, 3};

tensor random_tensor(const shape_t& shape, std::uint64_t seed, float scale = 1.0f) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = symmetric_unit_float(random.next()) * scale;
  return t;
}

tensor random_ids(const shape_t& shape, std::size_t classes, std::uint64_t seed) {
  tensor t = tensor::from_shape(shape);
  splitmix64 random(seed);
  for (float& v : t) v = float(random.next() % classes);
  return t;
}

bool same_bits(const tensor& a, const tensor& b) {
  return a.shape() == b.shape() && a.type() == b.type() && std::memcmp(a.bytes(), b.bytes(), a.byte_size()) == 0;
}

// |a - b| <= tolerance * max|b| everywhere, same shapes.
bool close(const tensor& a, const tensor& b, float tolerance) {
  if (a.shape() != b.shape()) return false;
  float largest = 0.0f, worst = 0.0f;
  for (std::size_t i = 0; i < b.size(); ++i) {
    largest = std::max(largest, std::fabs(b.data()[i]));
    worst = std::max(worst, std::fabs(a.data()[i] - b.data()[i]));
  }
  return worst <= tolerance * largest;
}

// bias + A (m, k) B (k, n), summed in double by plain loops, and by how much an fp32 computation of each element
// may stray from it in any order of its sum: (k + 2) units of rounding of the sum of its terms' magnitudes (k + 1
// terms, each product rounded once). A bf16 product of two bf16 values is exact in fp32, so the bound holds for
// bf16 A and B too (given here as fp32).
struct product_reference {
  std::vector<double> value, bound;
  product_reference(const tensor& a, const tensor& b, const tensor& bias) {
    const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double sum = bias.data()[j], magnitude = std::fabs(bias.data()[j]);
        for (std::size_t q = 0; q < k; ++q) {
          const double term = double(a.data()[i * k + q]) * double(b.data()[q * n + j]);
          sum += term;
          magnitude += std::fabs(term);
        }
        value.push_back(sum);
        bound.push_back(double(k + 2) * std::ldexp(1.0, -24) * magnitude);
      }
  }
  // How many elements of c are out of bounds (the first few printed).
  std::size_t outside(const tensor& c) const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (std::fabs(double(c.data()[i]) - value[i]) <= bound[i]) continue;
      if (bad++ < 5) MESSAGE("c[" << i << "] = " << c.data()[i] << ", bias + A B = " << value[i]);
    }
    return bad;
  }
};

// What `run` returns on each thread count equals, bit for bit, what it returns on one; from output `exact`
// on, within a relative 1e-5 only (AMX's bf16 weight gradients: Note [rows split among the team]).
void check_threads(const std::string& what, const std::function<std::vector<tensor>()>& run,
                   std::size_t exact = std::size_t(-1)) {
  const int saved = compute_threads();
  set_compute_threads(1);
  const std::vector<tensor> one = run();
  for (int n : thread_counts) {
    set_compute_threads(n);
    const std::vector<tensor> got = run();
    INFO(what << " on " << n << " threads");
    REQUIRE(got.size() == one.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i);
      if (i < exact) CHECK(same_bits(got[i], one[i]));
      else CHECK(close(got[i], one[i], 1e-5f));
    }
  }
  set_compute_threads(saved);
}

tensor scalar(double v) {
  tensor t = tensor::from_shape({1});
  t.data()[0] = static_cast<float>(v);
  return t;
}

// A double as two floats' bits (its high and low words), so same_bits compares all 64 bits.
tensor bits_of(double v) {
  tensor t = tensor::from_shape({2});
  std::memcpy(t.data(), &v, sizeof v);
  return t;
}

const forward_context ctx;

// forward, then backward_input into a fresh dx and into a dx holding a gradient (the accumulating path), then
// backward_weight; returns y, both dx, and every parameter's gradient.
std::vector<tensor> forward_backward(layer& l, const tensor& x, const tensor& dy) {
  for (parameter& p : l.parameters("")) p.grad->fill(0.0f);
  layer_cache cache;
  std::vector<tensor> out{l.forward(x, cache, ctx)};
  tensor dx, dx_again = random_tensor(shape_of(x), 99, 0.5f);
  l.backward_input(dy, cache, &dx);
  l.backward_input(dy, cache, &dx_again);
  l.backward_weight(dy, cache);
  out.push_back(dx);
  out.push_back(dx_again);
  for (parameter& p : l.parameters("")) out.push_back(*p.grad);
  return out;
}

}  // namespace

TEST_CASE("gemm_bias gives the bits of the bias filled in and the product added to it, fp32 and bf16, any backend and threads") {
  // Note [bias in the product]. 1,100 rows on 2 and 3 threads are cut into bands of rows (512 a thread and up). Here
  // and not in test_tensor_gemm, which also runs under TSan: our own parallel regions on 2 or more threads report
  // libgomp's barrier as a race there (scripts/sanitize.sh).
  const std::vector<compute_backend> backends = onednn_available()
                                                    ? std::vector<compute_backend>{compute_backend::onednn, compute_backend::reference}
                                                    : std::vector<compute_backend>{compute_backend::reference};
  const std::size_t mnk[][3] = {{1, 10, 784}, {7, 33, 17}, {32, 512, 784}, {256, 768, 256}, {1100, 300, 200}, {5, 4, 0}};
  std::vector<std::pair<product_reference, product_reference>> references;  // fp32 and bf16 A and B, per shape
  for (const auto& s : mnk) {
    const tensor a = random_tensor({s[0], s[2]}, 21), b = random_tensor({s[2], s[1]}, 22), bias = random_tensor({s[1]}, 23);
    references.emplace_back(product_reference(a, b, bias),
                            product_reference(a.astype(dtype::bfloat16).astype(dtype::float32),
                                              b.astype(dtype::bfloat16).astype(dtype::float32), bias));
  }
  for (const compute_backend backend : backends) {
    set_compute_backend(backend);
    for (const auto& s : mnk)
      for (int threads : thread_counts) {
        const std::size_t m = s[0], n = s[1], k = s[2];
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(threads);
        CAPTURE(static_cast<int>(backend));
        const tensor a = random_tensor({m, k}, 21), b = random_tensor({k, n}, 22), bias = random_tensor({n}, 23);
        const tensor a16 = a.astype(dtype::bfloat16), b16 = b.astype(dtype::bfloat16);
        tensor want = tensor::from_shape({m, n}), want16 = tensor::from_shape({m, n});
        tensor got = tensor::from_shape({m, n}), got16 = tensor::from_shape({m, n});
        got.fill(std::nanf("")), got16.fill(std::nanf(""));  // gemm_bias only writes
        set_compute_threads(threads);
        fill_rows(want.data(), m, bias.data(), n);
        fill_rows(want16.data(), m, bias.data(), n);
        gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 1.0f, want.data());
        gemm_bias(m, n, k, a.data(), b.data(), bias.data(), got.data());
        gemm(false, false, m, n, k, 1.0f, a16.bf16_data(), b16.bf16_data(), 1.0f, want16.data());
        gemm_bias(m, n, k, a16.bf16_data(), b16.bf16_data(), bias.data(), got16.data());
        set_compute_threads(1);
        CHECK(same_bits(got, want));
        CHECK(same_bits(got16, want16));  // bf16 A and B, fp32 sums (AMX kernels where the processor has them)
        // And the values themselves, from plain loops here: bias + A B within fp32's rounding of the sum.
        const auto& [exact, exact16] = references.at(static_cast<std::size_t>(&s - mnk));
        CHECK(exact.outside(got) == 0);
        CHECK(exact16.outside(got16) == 0);
      }
  }
  set_compute_backend(onednn_available() ? compute_backend::onednn : compute_backend::reference);
}

TEST_CASE("element-wise helpers and conversions: same bits on 1, 2 and 3 threads") {
  const std::size_t n = 300007;  // above parallel_elements, not a multiple of any block
  const tensor a = random_tensor({n}, 1, 100.0f), b = random_tensor({n}, 2);
  check_threads("add_into", [&] {
    tensor y = a;
    add_into(y.data(), b.data(), n);
    return std::vector<tensor>{y};
  });
  check_threads("parallel_copy, parallel_zero", [&] {
    tensor y = tensor::from_shape({n}), z = a;
    parallel_copy(y.data(), a.data(), a.byte_size());
    parallel_zero(z.data(), 4 * 200001);
    return std::vector<tensor>{y, z};
  });
  check_threads("to_bfloat16, to_float, round_to_bfloat16", [&] {
    tensor half = tensor::from_shape({n}, dtype::bfloat16), back = tensor::from_shape({n}), rounded = a;
    to_bfloat16(a.data(), half.bf16_data(), n);
    to_float(half.bf16_data(), back.data(), n);
    round_to_bfloat16(rounded.data(), n);
    return std::vector<tensor>{half, back, rounded};
  });
  check_threads("square_sum", [&] { return std::vector<tensor>{bits_of(square_sum(a.data(), n))}; });
  check_threads("fill_rows, add_to_rows, add_column_sums", [&] {
    const std::size_t rows = 1001, cols = 301;  // 4 blocks of rows, the last one short
    const tensor x = random_tensor({rows, cols}, 4), bias = random_tensor({cols}, 5);
    tensor filled = tensor::from_shape({rows, cols}), added = x, sums = random_tensor({cols}, 6);
    fill_rows(filled.data(), rows, bias.data(), cols);
    add_to_rows(added.data(), rows, bias.data(), cols);
    add_column_sums(x.data(), rows, cols, sums.data());
    return std::vector<tensor>{filled, added, sums};
  });
  check_threads("slice_rows, concat_rows", [&] {
    const tensor whole = random_tensor({1000, 301}, 3);
    const tensor p0 = slice_rows(whole, 0, 333), p1 = slice_rows(whole, 333, 1000);
    return std::vector<tensor>{p0, p1, concat_rows({&p0, &p1}), zeros({777, 301})};
  });
}

TEST_CASE("the conversions and copies give the serial loops' bits") {
  const std::size_t n = 200003;
  const tensor a = random_tensor({n}, 4, 1e-3f);
  set_compute_threads(2);
  tensor half = tensor::from_shape({n}, dtype::bfloat16);
  to_bfloat16(a.data(), half.bf16_data(), n);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(half.bf16_data()[i].bits == to_bfloat16(a.data()[i]).bits);
  const tensor whole = random_tensor({999, 257}, 5);
  const tensor part = slice_rows(whole, 100, 900);
  CHECK(std::memcmp(part.data(), whole.data() + 100 * 257, part.byte_size()) == 0);
}

TEST_CASE("square_sum: fixed blocks, within rounding of an exact sum") {
  for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(8191), std::size_t(8192), std::size_t(100003)}) {
    const tensor a = random_tensor({std::max<std::size_t>(n, 1)}, 6 + n);
    long double exact = 0.0L;
    for (std::size_t i = 0; i < n; ++i) exact += (long double)a.data()[i] * (long double)a.data()[i];
    const double got = square_sum(a.data(), n);
    INFO("n = " << n);
    CHECK(std::fabs(got - double(exact)) <= 1e-13 * double(exact) + 1e-300);
  }
}

TEST_CASE("square_sums: each array's square_sum bit for bit, on 1, 2 and 3 threads, empty and one-block arrays too") {
  std::vector<tensor> arrays;
  for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(8191), std::size_t(8192), std::size_t(8193),
                        std::size_t(100003), std::size_t(256)})
    arrays.push_back(random_tensor({std::max<std::size_t>(n, 1)}, 90 + n));
  std::vector<float_span> spans;
  for (const tensor& a : arrays) spans.push_back({a.data(), a.size() == 1 ? 0 : a.size()});
  check_threads("square_sums", [&] {
    const std::vector<double> sums = square_sums(spans);
    std::vector<tensor> bits;
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const double alone = square_sum(spans[i].data, spans[i].size);
      CHECK(std::memcmp(&sums[i], &alone, sizeof(double)) == 0);
      bits.push_back(bits_of(sums[i]));
    }
    return bits;
  });
}

TEST_CASE("layers: same bits on 1, 2 and 3 threads (forward, dx fresh and accumulated, weight gradients)") {
  SUBCASE("layer norm, 2000 x 37") {
    layer_norm l(37);
    for (parameter& p : l.parameters("")) *p.value = random_tensor(shape_of(*p.value), 7);
    const tensor x = random_tensor({2000, 37}, 8, 3.0f), dy = random_tensor({2000, 37}, 9);
    check_threads("layer norm", [&] { return forward_backward(l, x, dy); });
  }
  SUBCASE("GELU and ReLU, 700 x 130") {
    gelu g;
    relu r;
    const tensor x = random_tensor({700, 130}, 10, 4.0f), dy = random_tensor({700, 130}, 11);
    check_threads("gelu", [&] { return forward_backward(g, x, dy); });
    check_threads("relu", [&] { return forward_backward(r, x, dy); });
  }
  SUBCASE("token and position embeddings, 40 x 50 x 37") {
    token_embedding tokens(53, 37);
    tokens.initialize(12);
    position_embedding positions(64, 37);
    positions.initialize(13);
    const tensor ids = random_ids({40, 50}, 53, 14), x = random_tensor({40, 50, 37}, 15),
                 dy = random_tensor({40, 50, 37}, 16);
    check_threads("token embedding", [&] {
      for (parameter& p : tokens.parameters("")) p.grad->fill(0.0f);
      layer_cache cache;
      tensor y = tokens.forward(ids, cache, ctx), dx;
      tokens.backward_input(dy, cache, &dx);
      tokens.backward_weight(dy, cache);
      return std::vector<tensor>{y, dx, *tokens.parameters("")[0].grad};
    });
    check_threads("position embedding", [&] { return forward_backward(positions, x, dy); });
  }
  SUBCASE("residual block [layer norm, GELU], 1000 x 70") {
    std::vector<std::unique_ptr<layer>> parts;
    parts.push_back(std::make_unique<layer_norm>(70));
    parts.push_back(std::make_unique<gelu>());
    block res(std::move(parts), true);
    const tensor x = random_tensor({1000, 70}, 17), dy = random_tensor({1000, 70}, 18);
    check_threads("residual block", [&] { return forward_backward(res, x, dy); });
  }
  SUBCASE("linear layers with enough rows to be cut into bands per thread (Note [rows split among the team])") {
    struct product { std::size_t rows, in, out; };
    // Row bands of forward and dX (from 512 rows a thread), and of dW = X^T dY where its sum is at most 256 rows
    // long (from 256 input features a thread): the last two; a longer dW sum stays one call (1024 x 784).
    for (const product& p : {product{2048, 256, 768}, product{1537, 96, 40}, product{256, 784, 300},
                             product{200, 1100, 30}, product{1024, 784, 300}}) {
      for (dtype type : {dtype::float32, dtype::bfloat16}) {
        linear l(p.in, p.out);
        l.initialize(23);
        l.set_compute_dtype(type);
        const tensor x = random_tensor({p.rows, p.in}, 24), dy = random_tensor({p.rows, p.out}, 25);
        // y, dx, dx again exact; the gradients too, but for a bf16 one longer than 256 rows on AMX. Without
        // AVX-512 the products run on OpenBLAS in bands of rows (each product here has 24 rows a thread or more):
        // all exact too (Note [fp32 products on OpenBLAS without AVX-512]).
        const bool amx_sum = type == dtype::bfloat16 && p.rows > 256 && onednn_uses_amx();
        const std::size_t exact = amx_sum ? 3 : std::size_t(-1);
        check_threads("linear " + std::to_string(p.rows) + "x" + std::to_string(p.in) + "x" + std::to_string(p.out) +
                          " " + dtype_name(type),
                      [&] { return forward_backward(l, x, dy); }, exact);
      }
    }
  }
  SUBCASE("causal self-attention, 16 x 20 x 24, 4 heads (float32 and bfloat16)") {
    for (dtype type : {dtype::float32, dtype::bfloat16}) {
      causal_self_attention att(24, 4);
      att.initialize(19);
      att.set_compute_dtype(type);
      const tensor x = random_tensor({16, 20, 24}, 20), dy = random_tensor({16, 20, 24}, 21);
      // Without AVX-512 its heads' batched products run on oneDNN's AVX2 gemm, whose sums are blocked by shape
      // and team (3 threads here give other last bits than 1).
      check_threads(std::string("attention ") + dtype_name(type), [&] { return forward_backward(att, x, dy); },
                    onednn_avx512() ? std::size_t(-1) : 0);
    }
  }
}

TEST_CASE("losses: same bits on 1, 2 and 3 threads, the loss is the serial sum of the row losses") {
  softmax_cross_entropy xent;
  mean_squared_error mse;
  const tensor logits = random_tensor({3000, 37}, 22, 5.0f), labels = random_ids({3000}, 37, 23);
  const tensor small = random_tensor({1024, 10}, 24, 5.0f), small_labels = random_ids({1024}, 10, 25);
  const tensor target = random_tensor({3000, 37}, 26);
  check_threads("cross-entropy and mse", [&] {
    return std::vector<tensor>{scalar(xent.compute_loss(logits, labels, 4000)),
                               xent.compute_gradient(logits, labels, 4000),
                               scalar(xent.compute_loss(small, small_labels, 0)),
                               xent.compute_gradient(small, small_labels, 0),
                               scalar(mse.compute_loss(logits, target, 0)), mse.compute_gradient(logits, target, 0)};
  });
  check_threads("cross-entropy's loss and gradient at once", [&] {
    auto [loss, gradient] = xent.compute_loss_and_gradient(logits, labels, 4000);
    return std::vector<tensor>{scalar(loss), gradient};
  });
  // At once, the bits of the two calls.
  set_compute_threads(2);
  const auto both = xent.compute_loss_and_gradient(logits, labels, 4000);
  CHECK(both.loss == xent.compute_loss(logits, labels, 4000));
  CHECK(same_bits(both.gradient, xent.compute_gradient(logits, labels, 4000)));
  // The serial loop written out: per row its exps in float (Note [fast exp]) summed in double by 8 running sums
  // added pairwise, then the rows' losses added in row order, in double.
  double total = 0.0;
  for (std::size_t r = 0; r < 3000; ++r) {
    const float* x = logits.data() + r * 37;
    float max = x[0];
    for (std::size_t i = 1; i < 37; ++i) max = x[i] > max ? x[i] : max;
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < 32; ++i) lanes[i % 8] += double(exp_nonpositive(x[i] - max));
    double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (std::size_t i = 32; i < 37; ++i) sum += double(exp_nonpositive(x[i] - max));
    total += double(max) + std::log(sum) - double(x[std::size_t(labels.data()[r])]);
  }
  set_compute_threads(2);
  CHECK(xent.compute_loss(logits, labels, 4000) == static_cast<float>(total / 4000.0));
}

TEST_CASE("losses on threads still name the first bad row") {
  softmax_cross_entropy xent;
  tensor logits = random_tensor({3000, 37}, 27);
  tensor labels = random_ids({3000}, 37, 28);
  labels.data()[2100] = 40.0f;
  labels.data()[2500] = -1.0f;
  logits.data()[2900 * 37 + 3] = std::nanf("");
  set_compute_threads(2);
  CHECK_THROWS_WITH_AS(xent.compute_loss(logits, labels, 0), doctest::Contains("row 2100 has label"),
                       std::invalid_argument);
  labels.data()[2100] = 1.0f;
  labels.data()[2500] = 1.0f;
  CHECK_THROWS_WITH_AS(xent.compute_gradient(logits, labels, 0), doctest::Contains("row 2900"), std::domain_error);
}

TEST_CASE("layer norm and embedding weight gradients: the documented summation order's bits on 1, 2 and 3 threads") {
  const std::size_t n = 3001, c = 41;
  layer_norm l(c);
  for (parameter& p : l.parameters("")) *p.value = random_tensor(shape_of(*p.value), 29);
  const tensor x = random_tensor({n, c}, 30, 2.0f), dy = random_tensor({n, c}, 31);
  layer_cache cache;
  set_compute_threads(1);
  l.forward(x, cache, ctx);
  const auto& s = cache.get<layer_norm::saved>(l);
  // Blocks of 256 rows, each summing its rows in order, then the blocks in order (Note [row-block sums]).
  std::vector<float> dg(c, 0.0f), db(c, 0.0f);
  for (std::size_t first = 0; first < n; first += 256) {
    std::vector<float> pg(c, 0.0f), pb(c, 0.0f);
    for (std::size_t r = first; r < std::min(n, first + 256); ++r)
      for (std::size_t i = 0; i < c; ++i) {
        pg[i] += dy.data()[r * c + i] * (x.data()[r * c + i] - s.mean.data()[r]) * s.rstd.data()[r];
        pb[i] += dy.data()[r * c + i];
      }
    for (std::size_t i = 0; i < c; ++i) dg[i] += pg[i], db[i] += pb[i];
  }
  for (int threads : {1, 2, 3}) {
    set_compute_threads(threads);
    for (parameter& p : l.parameters("")) p.grad->fill(0.0f);
    l.backward_weight(dy, cache);
    const auto params = l.parameters("");
    CHECK(std::memcmp(params[0].grad->data(), dg.data(), c * sizeof(float)) == 0);
    CHECK(std::memcmp(params[1].grad->data(), db.data(), c * sizeof(float)) == 0);
  }

  token_embedding tokens(30, 41);
  const tensor ids = random_ids({60, 50}, 30, 32), edy = random_tensor({60, 50, 41}, 33);
  std::vector<float> dw(30 * 41, 0.0f);
  for (std::size_t i = 0; i < 3000; ++i)
    for (std::size_t j = 0; j < 41; ++j) dw[std::size_t(ids.data()[i]) * 41 + j] += edy.data()[i * 41 + j];
  layer_cache tcache;
  tokens.forward(ids, tcache, ctx);
  for (int threads : {1, 2, 3, 5}) {
    set_compute_threads(threads);
    tokens.parameters("")[0].grad->fill(0.0f);
    tokens.backward_weight(edy, tcache);
    CHECK_MESSAGE(std::memcmp(tokens.parameters("")[0].grad->data(), dw.data(), dw.size() * sizeof(float)) == 0,
                  threads, " threads");
  }
  set_compute_threads(1);
}

TEST_CASE("optimizers and gradient clipping: same bits on 1, 2 and 3 threads") {
  std::vector<optimizer_config> configs(5);
  configs[0].kind = "adam";
  configs[1].kind = "adamw", configs[1].weight_decay = 0.1f;
  configs[2].kind = "sgd";
  configs[3].kind = "sgd", configs[3].momentum = 0.9f, configs[3].weight_decay = 0.01f;
  configs[4].kind = "sgd", configs[4].momentum = 0.9f, configs[4].nesterov = true;
  const shape_t shapes[] = {{300, 233}, {37}, {1000, 65}, {16385}};
  for (const optimizer_config& c : configs) {
    check_threads("optimizer " + c.kind, [&] {
      std::vector<tensor> values, grads;
      for (std::size_t i = 0; i < 4; ++i) {
        values.push_back(random_tensor(shapes[i], 40 + i));
        grads.push_back(random_tensor(shapes[i], 50 + i, 0.1f));
      }
      std::vector<parameter> params;
      for (std::size_t i = 0; i < 4; ++i) params.push_back({"p" + std::to_string(i), &values[i], &grads[i]});
      auto opt = make_optimizer(c);
      for (int step = 0; step < 3; ++step) opt->step(params);
      for (auto& [name, t] : opt->state()) values.push_back(*t);
      return values;
    });
  }
  check_threads("gradient norm and scaling", [&] {
    std::vector<tensor> values, grads;
    for (std::size_t i = 0; i < 4; ++i) {
      values.push_back(random_tensor(shapes[i], 60 + i));
      grads.push_back(random_tensor(shapes[i], 70 + i));
    }
    std::vector<parameter> params;
    for (std::size_t i = 0; i < 4; ++i) params.push_back({"p" + std::to_string(i), &values[i], &grads[i]});
    const double sum = gradient_square_sum(params);
    scale_gradients(params, clip_factor(sum, 1.0f));
    grads.push_back(bits_of(sum));
    return grads;
  });
}

TEST_CASE("a tensor copy runs on a compute rank's threads only, and copies every byte") {
  const tensor big = random_tensor({1024, 1000}, 41);  // 4 MB: 16 pieces of parallel_copy
  check_threads("tensor copy", [&] {
    tensor copy(big);
    tensor assigned = tensor::from_shape({3});
    assigned = big;
    return std::vector<tensor>{copy, assigned};
  });
  CHECK(same_bits(tensor(big), big));
  CHECK(is_compute_rank_thread());  // check_threads made this thread a rank
  bool fresh_thread_is_rank = true, fresh_copy_same = false;
  std::thread other([&] {  // not a rank, so one memcpy (Note [parallel tensor copies])
    fresh_thread_is_rank = is_compute_rank_thread();
    fresh_copy_same = same_bits(tensor(big), big);
  });
  other.join();
  CHECK_FALSE(fresh_thread_is_rank);
  CHECK(fresh_copy_same);
}

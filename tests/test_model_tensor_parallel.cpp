// Tensor-parallel Linear layers (model/parallel_linear.hpp): the Megatron MLP split over T ranks (threads
// of one local_group) gives the unsplit MLP's output, dx and gradient slices, with exactly one all-reduce
// forward and one backward; unsplit they are Linear, bit for bit.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "collective/local_group.hpp"
#include "collective/shard.hpp"
#include "gradient_check.hpp"
#include "model/linear.hpp"
#include "model/parallel_linear.hpp"
#include "model/sequential.hpp"
#include "model/tensor_parallel.hpp"
#include "test_support.hpp"

using namespace ap;
using namespace ap::test;

namespace {

// A real group member that counts the all-reduces going through it.
class counting_group final : public process_group {
 public:
  counting_group(std::unique_ptr<process_group> inner, std::atomic<int>& all_reduces)
      : inner_(std::move(inner)), all_reduces_(all_reduces) {}
  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  collective_handle all_reduce(tensor& t, reduce_op op) override {
    ++all_reduces_;
    return inner_->all_reduce(t, op);
  }
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op) override {
    return inner_->reduce_scatter(in, out, op);
  }
  collective_handle all_gather(const tensor& in, tensor& out) override { return inner_->all_gather(in, out); }
  collective_handle broadcast(tensor& t, int root) override { return inner_->broadcast(t, root); }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  std::unique_ptr<process_group> inner_;
  std::atomic<int>& all_reduces_;
};

// Columns [first, last) of a (rows, cols) tensor, or elements of a vector.
tensor column_slice(const tensor& m, std::size_t first, std::size_t last) {
  const bool vector = m.dimension() == 1;
  const std::size_t r = vector ? 1 : m.shape()[0], c = m.shape().back();
  tensor out = tensor::from_shape(vector ? shape_t{last - first} : shape_t{r, last - first});
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = first; j < last; ++j) out.data()[i * (last - first) + j - first] = m.data()[i * c + j];
  return out;
}

struct rank_result {
  tensor y, dx;
  std::vector<tensor> grads;  // weight, bias of the column layer, then of the row layer
};

// One forward and backward of `model`, layer by layer: its output, its input gradient and every gradient.
rank_result forward_backward(sequential& model, const tensor& x, const tensor& dy) {
  std::vector<layer_cache> caches(model.size());
  rank_result out;
  out.y = x;
  for (std::size_t i = 0; i < model.size(); ++i) out.y = model.at(i).forward(out.y, caches[i], {});
  out.dx = dy;
  for (std::size_t i = model.size(); i-- > 0;) {
    tensor below;
    model.at(i).backward(out.dx, caches[i], &below);
    out.dx = std::move(below);
  }
  for (std::size_t i = 0; i < model.size(); ++i)
    for (parameter& p : model.at(i).parameters("")) out.grads.push_back(*p.grad);
  return out;
}

// Forward and backward of the MLP `specs` split over `ranks` threads.
std::vector<rank_result> run_split(const std::vector<std::string>& specs, int ranks, const tensor& x,
                                   const tensor& dy, std::atomic<int>& all_reduces) {
  local_group group("tp", ranks);
  std::vector<rank_result> results(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        sequential model = sequential::from_layer_specs(specs);
        join_tensor_parallel(model, std::make_shared<counting_group>(group.member(r), all_reduces));
        model.initialize(7);  // after joining: each rank's slice of the unsplit initialisation
        results[static_cast<std::size_t>(r)] = forward_backward(model, x, dy);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  return results;
}

rank_result run_whole(const std::vector<std::string>& specs, const tensor& x, const tensor& dy) {
  sequential model = sequential::from_layer_specs(specs);
  model.initialize(7);
  return forward_backward(model, x, dy);
}

}  // namespace

TEST_CASE("unsplit, the parallel layers are Linear bit for bit (same initialisation, same gradients)") {
  const tensor x = random_tensor({5, 8}, 1), dy = random_tensor({5, 6}, 2);
  for (const char* kind : {"column_linear:8:6", "row_linear:8:6"}) {
    auto parallel = make_layer(kind);
    linear plain(8, 6);
    parallel->initialize(3);
    plain.initialize(3);
    layer_cache c1, c2;
    const tensor y1 = parallel->forward(x, c1, {}), y2 = plain.forward(x, c2, {});
    CHECK(std::vector<float>(y1.begin(), y1.end()) == std::vector<float>(y2.begin(), y2.end()));
    const tensor dx1 = parallel->backward(dy, c1), dx2 = plain.backward(dy, c2);
    CHECK(std::vector<float>(dx1.begin(), dx1.end()) == std::vector<float>(dx2.begin(), dx2.end()));
    CHECK(parallel->spec() == kind);
    check_layer_gradients(*parallel, x, {});
  }
}

TEST_CASE("the Megatron MLP (column -> GELU -> row) over T ranks equals the unsplit MLP, with one all-reduce each way") {
  const std::vector<std::string> whole = {"linear:8:16", "gelu", "linear:16:8"};
  const std::vector<std::string> split = {"column_linear:8:16", "gelu", "row_linear:16:8"};
  const tensor x = random_tensor({2, 3, 8}, 11), dy = random_tensor({2, 3, 8}, 12);  // (batch, seq, features)
  const rank_result expected = run_whole(whole, x, dy);
  for (int ranks : {1, 2, 4}) {
    CAPTURE(ranks);
    std::atomic<int> all_reduces{0};
    const auto got = run_split(split, ranks, x, dy, all_reduces);
    CHECK(all_reduces == 2 * ranks);  // per rank: the row layer's forward, the column layer's backward
    for (int r = 0; r < ranks; ++r) {
      const rank_result& g = got[static_cast<std::size_t>(r)];
      CHECK(g.y.shape() == expected.y.shape());
      CHECK(check_close(g.y, expected.y, 1e-5, 1e-5, "y"));
      CHECK(check_close(g.dx, expected.dx, 1e-5, 1e-5, "dx"));
      const auto [c0, c1] = shard_rows(16, static_cast<std::size_t>(ranks), static_cast<std::size_t>(r));
      CHECK(check_close(g.grads[0], column_slice(expected.grads[0], c0, c1), 1e-5, 1e-5, "column dweight"));
      CHECK(check_close(g.grads[1], column_slice(expected.grads[1], c0, c1), 1e-5, 1e-5, "column dbias"));
      CHECK(check_close(g.grads[2], slice_rows(expected.grads[2], c0, c1), 1e-5, 1e-5, "row dweight"));
      CHECK(check_close(g.grads[3], expected.grads[3], 1e-5, 1e-5, "row dbias (whole on every rank)"));
    }
  }
}

TEST_CASE("a width the group does not divide, or joining twice, is refused naming the layer and the group") {
  local_group group("tp stage 0", 3);
  auto column = make_layer("column_linear:8:16");
  auto* p = dynamic_cast<tensor_parallel_layer*>(column.get());
  REQUIRE(p);
  CHECK_THROWS_WITH_AS(p->join_group(group.member(0)),
                       "ColumnParallelLinear(8->16) cannot split its 16 output columns over 3 tensor-parallel ranks "
                       "of group 'tp stage 0': 3 does not divide 16",
                       std::invalid_argument);
  local_group pair("tp", 2);
  auto row = make_layer("row_linear:16:8");
  auto* q = dynamic_cast<tensor_parallel_layer*>(row.get());
  q->join_group(pair.member(1));
  CHECK(row->describe() == "RowParallelLinear(16->8) rank 1 of 2");
  CHECK_THROWS_AS(q->join_group(pair.member(1)), std::logic_error);
  layer_cache cache;
  CHECK_THROWS_WITH_AS(row->forward(random_tensor({2, 16}, 1), cache, {}),
                       "RowParallelLinear(16->8) rank 1 of 2 takes 8 features (its shard of 16), got input of shape (2, 16)",
                       std::invalid_argument);
}

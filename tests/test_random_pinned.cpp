// The seeded numbers every user of the generator gets, pinned: a change here changes every model's initial
// weights, every data order and every synthetic data set, so recorded runs would no longer repeat.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "data/dataset.hpp"
#include "data/synthetic.hpp"
#include "model/sequential.hpp"
#include "random/seeded_random.hpp"

using namespace ap;

namespace {

// FNV-1a over the bit patterns: one number for a whole tensor.
std::uint64_t fingerprint(const float* p, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, p + i, sizeof bits);
    h = (h ^ bits) * 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

TEST_CASE("the generator's stream, the seed mixers and the counter hash are pinned (Vigna's splitmix64)") {
  splitmix64 g(42);
  CHECK(g.next() == 13679457532755275413ULL);
  CHECK(g.next() == 2949826092126892291ULL);
  CHECK(mix_seed(1234, 5) == 2647221739304363368ULL);
  CHECK(mix64(7) == 7191089600892374487ULL);
  CHECK(hash_counters(1, 2) == 13608149317741381227ULL);
  CHECK(hash_counters(1, 2, 3, 4) == 6983255510515279319ULL);
  splitmix64 u(9);
  CHECK(u.below(1000) == 228u);
  CHECK(u.uniform() == doctest::Approx(0.750695).epsilon(1e-6));
  CHECK(u.normal() == doctest::Approx(0.353493).epsilon(1e-5));
}

TEST_CASE("initial weights of 784-512-256-10 with init seed 1 and 3 are pinned") {
  for (std::uint64_t seed : {1, 3}) {
    sequential model = sequential::from_spec("784-512-256-10", sequential_options{"relu", seed});
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const parameter& p : model.parameters()) h = fingerprint(p.value->data(), p.value->size(), h);
    CAPTURE(seed);
    CHECK(h == (seed == 1 ? 2317108407189271963ULL : 11393567443337913056ULL));
  }
}

TEST_CASE("data orders and synthetic blobs are pinned") {
  const std::vector<std::size_t> order = epoch_order(60000, 1, 2);
  CHECK(order[0] == 38008u);
  CHECK(order[1] == 28038u);
  CHECK(order[59999] == 42369u);
  const dataset blobs = make_blobs(100, 8, 3, 7);
  CHECK(fingerprint(blobs.inputs.data(), blobs.inputs.size()) == 6030448449413034241ULL);
}

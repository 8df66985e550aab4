// The ring's schedule (collective/ring_schedule.hpp) without sockets: every rank of a ring simulated in memory,
// each chunk passed to its right neighbour as the schedule says, against the exact result.
#include <doctest/doctest.h>

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective/ring_schedule.hpp"
#include "collective/shard.hpp"

using namespace ap;

namespace {

struct message {
  ring_chunk chunk;
  std::vector<float> floats;
};

// Rank r's element i: whole numbers, so every order of the sum is exact.
float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1)); }

// Runs the reduce schedule on every rank of a ring of `size` over `units` rows of `unit` floats; returns each
// rank's buffer. Checks each received chunk is the one the schedule expects, in order, and nothing is left over.
std::vector<std::vector<float>> simulate_reduce(int size, std::size_t units, std::size_t unit, std::size_t chunk,
                                                int offset, bool then_gather) {
  std::vector<std::vector<float>> buf(static_cast<std::size_t>(size), std::vector<float>(units * unit));
  std::vector<ring_reduce_schedule> plan;
  for (int r = 0; r < size; ++r) {
    for (std::size_t i = 0; i < units * unit; ++i) buf[static_cast<std::size_t>(r)][i] = value(r, i);
    plan.emplace_back(r, size, units, unit, chunk, offset, then_gather);
  }
  std::vector<std::deque<message>> inbox(static_cast<std::size_t>(size));  // from the left neighbour
  const auto send = [&](int from, ring_chunk c, const float* data) {
    inbox[static_cast<std::size_t>((from + 1) % size)].push_back({c, std::vector<float>(data, data + c.size())});
  };
  for (int r = 0; r < size; ++r)
    for (const ring_chunk& c : plan[static_cast<std::size_t>(r)].first_sends()) {
      CHECK(c.step == 0);
      send(r, c, buf[static_cast<std::size_t>(r)].data() + c.begin);
    }
  for (std::uint32_t s = 0; s < plan[0].steps(); ++s)
    for (int r = 0; r < size; ++r) {
      const ring_reduce_schedule& p = plan[static_cast<std::size_t>(r)];
      auto& in = inbox[static_cast<std::size_t>(r)];
      for (const ring_chunk& c : p.receives(s)) {
        REQUIRE(!in.empty());
        const message m = in.front();
        in.pop_front();
        CHECK(m.chunk.step == s);
        CHECK(m.chunk.chunk == c.chunk);
        REQUIRE(m.floats.size() == c.size());
        float* dst = buf[static_cast<std::size_t>(r)].data() + c.begin;
        for (std::size_t i = 0; i < c.size(); ++i) dst[i] = p.adds(s) ? dst[i] + m.floats[i] : m.floats[i];
        if (p.forwards(s)) send(r, {s + 1, c.chunk, c.begin, c.end}, dst);
      }
    }
  for (const auto& in : inbox) CHECK(in.empty());
  return buf;
}

float sum_of(int size, std::size_t i) {
  float total = 0;
  for (int r = 0; r < size; ++r) total += value(r, i);
  return total;
}

}  // namespace

TEST_CASE("ring schedule: an all-reduce simulated over 1 to 5 ranks gives every rank the exact sum, chunk by chunk") {
  for (int size = 1; size <= 5; ++size)
    for (std::size_t elements : {0, 1, 4, 13, 40})
      for (std::size_t chunk : {1, 3, 1000}) {
        CAPTURE(size);
        CAPTURE(elements);
        CAPTURE(chunk);
        const auto buf = simulate_reduce(size, elements, 1, chunk, 0, true);
        for (int r = 0; r < size; ++r)
          for (std::size_t i = 0; i < elements; ++i) CHECK(buf[static_cast<std::size_t>(r)][i] == sum_of(size, i));
      }
}

TEST_CASE("ring schedule: a reduce-scatter (offset -1) leaves each rank its own shard's rows summed") {
  for (int size = 1; size <= 5; ++size)
    for (std::size_t rows : {0, 1, 3, 7, 10})
      for (std::size_t chunk : {1, 4, 1000}) {
        CAPTURE(size);
        CAPTURE(rows);
        CAPTURE(chunk);
        const std::size_t unit = 3;
        const auto buf = simulate_reduce(size, rows, unit, chunk, -1, false);
        for (int r = 0; r < size; ++r) {
          const auto [first, last] = shard_rows(rows, static_cast<std::size_t>(size), static_cast<std::size_t>(r));
          for (std::size_t i = first * unit; i < last * unit; ++i)
            CHECK(buf[static_cast<std::size_t>(r)][i] == sum_of(size, i));
        }
      }
}

TEST_CASE("ring schedule: steps, where a sum completes, the all-gather's owners and the broadcast's chain") {
  const ring_reduce_schedule all_reduce(1, 4, 10, 1, 2, 0, true);
  CHECK(all_reduce.steps() == 6);
  CHECK(all_reduce.adds(2));
  CHECK(!all_reduce.adds(3));
  CHECK(all_reduce.completes(2));
  CHECK(all_reduce.forwards(4));
  CHECK(!all_reduce.forwards(5));
  CHECK(ring_reduce_schedule(0, 4, 10, 1, 2, -1, false).steps() == 3);
  // Rank 1 of 4 receives rank 0's piece, then 3's, then 2's, and forwards all but the last.
  CHECK(ring_gather_owner(1, 4, 0) == 0);
  CHECK(ring_gather_owner(1, 4, 1) == 3);
  CHECK(ring_gather_owner(1, 4, 2) == 2);
  CHECK(ring_gather_forwards(4, 1));
  CHECK(!ring_gather_forwards(4, 2));
  // Root 2 of 4: rank 2 only sends, rank 1 (the chain's end) only receives; 10 floats in chunks of 4.
  const ring_broadcast_schedule root(2, 4, 2, 10, 4), end(1, 4, 2, 10, 4);
  CHECK((!root.receives() && root.sends()));
  CHECK((end.receives() && !end.sends()));
  REQUIRE(root.chunks.size() == 3);
  CHECK(root.chunks[2].begin == 8);
  CHECK(root.chunks[2].end == 10);
  CHECK_THROWS_WITH_AS(ring_reduce_schedule(4, 4, 10, 1, 2, 0, true), "ring schedule: rank 4 of 4 does not exist",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ring_broadcast_schedule(0, 2, 0, 10, 0), "ring schedule: chunks of 0 elements",
                       std::invalid_argument);
}

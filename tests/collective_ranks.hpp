// Runs one body per rank, each on a thread of its own: the collective tests' ranks; and the tensors they give.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/local_group.hpp"

namespace ap::test {

// Runs body(member) on one thread per rank; fails the test naming each rank that threw.
inline void on_every_rank(local_group& g, const std::function<void(process_group&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(g.size()));
  for (int r = 0; r < g.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        auto m = g.member(r);
        body(*m);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
}

// Runs body(rank) for ranks 0..size-1, one thread each (ranks of groups across processes, here as threads);
// checks happen inside, under doctest's lock.
inline void on_every_rank(int size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Small whole numbers that differ by rank and position: their sums are exact in any order.
inline tensor filled(shape_t shape, int rank) {
  tensor t = tensor::from_shape(std::move(shape));
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11);
  return t;
}

}  // namespace ap::test

// Runs one body per rank of a local_group, each on a thread of its own: the collective tests' ranks.
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

}  // namespace ap::test

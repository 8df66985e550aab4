// Which ranks of a group share a process (Note [hierarchical collectives] in collective/hierarchical_group.hpp):
// a pure function of where each rank runs.
#pragma once

#include <string>
#include <vector>

namespace ap {

// A rank's place in a two-level group: among the ranks of its own process (local), and its process among the
// group's processes (each process's lowest rank is its leader; the leaders form the group across processes).
struct colocated_rank {
  int local_rank = 0;   // among its process's ranks, in rank order
  int local_size = 1;   // ranks in its process
  int process = 0;      // its process among the group's, ordered by their lowest rank
  int processes = 1;    // processes the group spans
};

// `places[r]`: whatever names rank r's process (a node's address). Ranks with equal texts share a process.
std::vector<colocated_rank> colocate(const std::vector<std::string>& places);

}  // namespace ap

// Which ranks of a group share a process (Note [hierarchical collectives]).
#pragma once

#include <string>
#include <vector>

namespace ap {

// A rank's place in a two-level group; each process's lowest rank is its leader.
struct colocated_rank {
  int local_rank = 0;   // among its process's ranks, in rank order
  int local_size = 1;   // ranks in its process
  int process = 0;      // ordered by their lowest rank
  int processes = 1;    // processes the group spans
};

// `places[r]`: whatever names rank r's process (a node's address). Ranks with equal texts share a process.
std::vector<colocated_rank> colocate(const std::vector<std::string>& places);

}  // namespace ap

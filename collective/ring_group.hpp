// Ring collectives among ranks in different processes or machines: the ranks meet over CAF, the chunks travel on
// data links of their own (Note [data links]).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective/network_group.hpp"
#include "network/node_address.hpp"
#include "failure/timeout.hpp"
#include "network/transport_security.hpp"

namespace caf {
class actor_system;
}

namespace ap {

struct ring_state;

// Note [ring collectives]: rank r sends only to r+1 and receives only from r-1 (mod size), so every link carries
// the same bytes. All-reduce is a reduce-scatter then an all-gather (2 (size-1)/size of the tensor leaves each rank,
// the bandwidth optimum), in chunks forwarded as soon as this rank's share is added, so a large tensor streams.
// A segment is reduced once and then copied: every rank gets the same bits. Each wait is bounded and names the peer;
// a failed collective fails the group (the links' streams are at no known place). The steps are the schedule's
// (collective/ring_schedule.hpp).

// Note [one copy in the ring]: between two ranks of one machine, each sender offers its right neighbour to copy
// chunks straight out of its memory (network/process_memory.hpp) with a token; the answer says, per link, whether
// chunks travel in place. An in-place chunk's header carries the address of its floats. The sender keeps that
// memory unchanged until the receiver says, at the collective's end, that it took every chunk. Where the kernel
// refuses or the ranks are on two machines, chunks travel on the links.
//
// Every rank makes a ring_group with its own address (port 0: a free one), then calls connect() with every rank's
// address; peers may start in any order within the timeout. The actor_system needs the middleman and the runtime's
// message types (enable_network).

// Note [ring security]: a group listens and connects through a guarded transport (Note [mutual TLS], Note [bounded
// frames]): its own when given a transport_security, else the process's, else CAF's plain middleman. The data links
// use the same TLS context or plain TCP (Note [data links]). A refused peer is named.
class ring_group final : public network_group {
 public:
  // Small enough that a 2 MB all-reduce of 2 ranks streams; smaller chunks pay more per-chunk overhead.
  static constexpr std::size_t default_chunk_bytes = std::size_t{512} << 10;

  // Throws collective_error when it cannot listen (Note [ring security]).
  ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
             std::chrono::milliseconds timeout = default_timeout, std::size_t chunk_bytes = default_chunk_bytes);
  // Through a transport of its own; also throws std::invalid_argument for bad TLS files.
  ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
             const transport_security& security, std::chrono::milliseconds timeout = default_timeout,
             std::size_t chunk_bytes = default_chunk_bytes);
  ~ring_group() override;
  ring_group(const ring_group&) = delete;
  ring_group& operator=(const ring_group&) = delete;

  // The port this rank's endpoint listens on.
  std::uint16_t port() const;
  // Connects to every other rank (`ranks` by rank; its own entry unused), checks each is the rank it should be,
  // and starts the communication thread. Throws collective_error naming the rank and address that failed.
  void connect(const std::vector<node_address>& ranks);
  // network_group: "host:port"; connect() parses every rank's.
  std::string endpoint() const override;
  void connect(const std::vector<std::string>& endpoints) override;

  const std::string& name() const override;
  int rank() const override;
  int size() const override;
  // Whether chunks from the left come in place (Note [one copy in the ring]); known once connected.
  bool copies_from_left() const;
  collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) override;
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) override;
  collective_handle all_gather(const tensor& in, tensor& out) override;
  collective_handle broadcast(tensor& t, int root) override;
  void abort(const std::string& reason) override;

 private:
  void open(caf::actor_system& system, std::string name, int rank, int size, const node_address& listen,
            const transport_security* security, std::chrono::milliseconds timeout, std::size_t chunk_bytes);
  void open_links(std::chrono::steady_clock::time_point deadline);
  std::shared_ptr<ring_state> state_;
};

}  // namespace ap

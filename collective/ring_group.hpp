// Collectives among ranks in different processes or machines: ring algorithms, chunked so a large tensor
// streams through the ring. The ranks find and watch each other over CAF's network layer (libcaf_io); the
// chunks travel on data links of their own (network/data_link.hpp, Note [data links]).
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

// Note [ring collectives]: rank r sends only to rank r+1 and receives only from rank r-1 (mod size), so
// every link carries the same bytes: all-reduce is a reduce-scatter (size-1 steps: each segment of 1/size
// of the tensor gathers one more rank's share per step) then an all-gather (size-1 steps passing the
// finished segments on): 2 (size-1)/size of the tensor leaves each rank, the bandwidth optimum. Each
// segment travels in chunks of chunk_bytes, and a rank forwards a chunk as soon as it has added its share,
// so a large tensor streams through the ring instead of waiting segment by segment. A segment is reduced
// once and then copied, so every rank gets the same bits; the order of the sum is fixed by the ring (the
// same on every run). A collective is run by the group's communication thread (Note [communication thread]),
// which reads the left neighbour's chunks and writes what a plain link takes at once of this rank's, while a
// writer thread sends the rest in order (Note [writes without waiting] in network/data_link.hpp); each wait for a
// peer's chunk is bounded by the timeout and names the peer; a peer whose process ends fails the group at
// once (its data link hangs up; CAF's down message names why, heartbeats catch a silent one: actors/node.hpp).
// A failed collective fails the group: the links' streams are then at no known place.
// Which chunk each rank sends, receives, adds and forwards at each step is the schedule's
// (collective/ring_schedule.hpp, tested without sockets); this group moves the bytes it names.

// Note [one copy in the ring]: between two ranks of one machine (a link whose two ends have one address) a chunk
// need not cross loopback TCP, copied twice (2-3 GB/s here). When the links open, each sender offers its right
// neighbour to copy chunks straight out of its memory (cross-memory attach, network/process_memory.hpp), giving
// its process id and where it keeps a token that neighbour gave it; the neighbour tries a copy of the token and
// answers, so both know, link by link, whether chunks travel in place. In place, a chunk's header is followed by
// the address of its floats instead of the floats, and the receiver copies them out of the sender's memory with
// the token beside them (so no other process can pass for the sender). The sender's memory stays as it was
// until then: a region is written again only by the all-gather, with the finished segment that came round the
// ring through the right neighbour, which copied this very chunk before anything it sent could make it, and
// pieces an all-gather forwards are kept with the collective. At its end each rank tells its left neighbour
// that it took every chunk of the collective (the collective's number, on the same link the other way), and a
// rank hands its tensors back to the caller only once its right neighbour said so. Where the kernel refuses
// (another user; Yama's ptrace_scope 1 or more), or the ranks are on two machines, chunks travel on the links.
//
// Every rank makes a ring_group with its own address (port 0: a free one, see port()), then calls
// connect() with every rank's address; peers may start in any order within the timeout. The caller's
// actor_system must have the middleman loaded and the runtime's message types added (enable_network).

// Note [ring security]: a group listens and connects through a guarded transport
// (network/guarded_transport.hpp), as nodes and coordinators do, so a process without a certificate signed
// by the cluster's CA fails in the TLS handshake and never reaches the group's endpoint (Note [mutual TLS]);
// frames are bounded either way (Note [bounded frames]). Given a transport_security, the group runs a
// transport of its own with it: mutual TLS, or plain TCP only when `security.insecure` says so (trusted
// networks, benchmarks against MPI over TCP). Without one, it uses the process's guarded transport when one
// runs (a node's, started with the node's security), else CAF's plain middleman (a test that says so). The
// data links use the same TLS context, or plain TCP where the transport is plain (Note [data links]). A
// rank that refuses a peer names it: at once on the connecting side ("the ranks disagree on TLS"); after
// the timeout on the accepting side, with the connections its own transport dropped and why.
class ring_group final : public network_group {
 public:
  // 512 KB: a 2 MB all-reduce of 2 ranks streams its 1 MB segments in two chunks. Against 1 MB chunks (2
  // processes on loopback, plain TCP, 300 repeats, 3 runs alternating): 2 MB 2.44-2.76 GB/s against 1.93-2.14,
  // 4 MB 2.34-2.66 against 2.27-2.54, 8-32 MB and 4 processes and TLS within the runs' spread; 256 and 128 KB
  // chunks ran slower at every size to 4 MB (a chunk's header, wake-ups and checks).
  static constexpr std::size_t default_chunk_bytes = std::size_t{512} << 10;

  // Through the process's guarded transport, or CAF's middleman without one (Note [ring security]).
  // Throws collective_error when it cannot listen.
  ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
             std::chrono::milliseconds timeout = default_timeout, std::size_t chunk_bytes = default_chunk_bytes);
  // Through a transport of its own with `security`. Also throws std::invalid_argument for bad TLS files
  // (check_transport_security's texts).
  ring_group(caf::actor_system& system, std::string name, int rank, int size, node_address listen,
             const transport_security& security, std::chrono::milliseconds timeout = default_timeout,
             std::size_t chunk_bytes = default_chunk_bytes);
  ~ring_group() override;
  ring_group(const ring_group&) = delete;
  ring_group& operator=(const ring_group&) = delete;

  // The port this rank's endpoint listens on.
  std::uint16_t port() const;
  // Connects to every other rank (`ranks` by rank; this rank's own entry is not used), checks each is
  // the rank of this group it should be, and starts the communication thread. Throws collective_error
  // naming the rank and address that could not be reached or answered wrongly.
  void connect(const std::vector<node_address>& ranks);
  // network_group: "host:port" of this rank's endpoint; connect() with every rank's, parsed as addresses.
  std::string endpoint() const override;
  void connect(const std::vector<std::string>& endpoints) override;

  const std::string& name() const override;
  int rank() const override;
  int size() const override;
  // Whether this rank copies its left neighbour's chunks out of that process's memory (Note [one copy in the
  // ring]); known once connected.
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

// Collectives among ranks in different processes or machines through gloo (PyTorch's CPU collective library):
// the gloo backend of network_group (Note [collective backends]).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collective/network_group.hpp"
#include "failure/timeout.hpp"

namespace ap {

struct gloo_state;

// Note [gloo backend]: each rank makes a gloo TCP device on `host` and one pair per other rank; a pair listens
// on a port of its own from the start, so endpoint() (every pair's address, in hex) can be handed out before
// any peer exists, and connect() joins each pair with the address the peer made for this rank: gloo's own
// full-mesh rendezvous, with the coordinator's CAF connection as its store. The collectives run one at a time
// on the group's communication thread (Note [communication thread]), each bounded by the timeout:
// - all_reduce: gloo's ring all-reduce (a reduce-scatter then an all-gather, in segments of up to 16 MB, two in
//   flight), with our own vectorised sum; a mean divides the sum by the ranks. Every rank gets the same bits.
// - all_gather: gloo's allgatherv (row counts may differ by rank); broadcast: gloo's broadcast.
// - reduce_scatter: an all-reduce of a copy, then this rank's rows (twice a ring reduce-scatter's bytes; no
//   runtime path uses it across processes).
// abort() fails this rank's waiting and later collectives at once and closes its sockets, so the peers' waits
// fail at once too ("connection closed by peer"); a peer process that ends closes its sockets the same way.

// Two places reach past gloo's public API, each where it offers no equivalent (Debian's 0.0~git20220518):
// - The context: a gloo::Context subclass hands it the device and pairs made here (protected members, set as
//   gloo's own rendezvous::Context sets them). rendezvous::Context::connectFullMesh makes the pairs only when it
//   runs and reads the peers' addresses from a Store at once, so endpoint() could be handed out before connect()
//   only with a thread parked inside connectFullMesh from the constructor on.
// - abort(): the TCP pair's signalExceptionExternal, protected (its buffers call it on a timeout), fails the
//   buffers waiting on the pair and closes its socket, under the pair's lock. Its public close() only closes the
//   socket: the peers fail at once, but this rank's own collective waiting inside gloo then waits out the whole
//   timeout (tested: "gloo abort while this rank's own collective waits inside gloo"), and gloo's public
//   UnboundBuffer::abortWaitRecv needs buffers that gloo's collectives keep to themselves.
// On failure paths TSan reports a race between gloo's own threads inside gloo (scripts/tsan.supp says which).
// Debian's gloo has no TLS: the group is for trusted networks only (the CLI asks for `--insecure`).
class gloo_group final : public network_group {
 public:
  // Throws collective_error when gloo cannot make its device or pairs on `host`.
  gloo_group(std::string name, int rank, int size, const std::string& host,
             std::chrono::milliseconds timeout = default_timeout);
  ~gloo_group() override;
  gloo_group(const gloo_group&) = delete;
  gloo_group& operator=(const gloo_group&) = delete;

  std::string endpoint() const override;
  void connect(const std::vector<std::string>& endpoints) override;

  const std::string& name() const override;
  int rank() const override;
  int size() const override;
  collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) override;
  collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) override;
  collective_handle all_gather(const tensor& in, tensor& out) override;
  collective_handle broadcast(tensor& t, int root) override;
  void abort(const std::string& reason) override;

 private:
  std::shared_ptr<gloo_state> state_;
};

}  // namespace ap

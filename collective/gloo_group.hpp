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

// Note [gloo backend]: each rank makes a gloo TCP device on `host` and one pair per other rank, each listening from
// the start, so endpoint() (every pair's address, in hex) can be handed out before any peer exists; connect() joins
// each pair with the address the peer made for this rank, with the coordinator's CAF connection as the store. The
// collectives run on the communication thread (Note [communication thread]), each bounded by the timeout:
// all_reduce is gloo's ring all-reduce with our own vectorised sum (same bits on every rank); all_gather is
// allgatherv; broadcast is gloo's; reduce_scatter is an all-reduce of a copy, then this rank's rows. abort() fails
// this rank's collectives and closes its sockets, so the peers' waits fail at once too.

// Two places reach past gloo's public API, where it offers no equivalent (Debian's 0.0~git20220518):
// - a gloo::Context subclass takes the device and pairs made here: rendezvous::Context::connectFullMesh makes the
//   pairs only when it runs, so endpoint() could not be handed out before connect();
// - abort() calls the TCP pair's protected signalExceptionExternal, which fails the buffers waiting on the pair;
//   its public close() only closes the socket, leaving this rank's own waiting collective to the full timeout.
// TSan reports a race between gloo's own threads on failure paths (scripts/tsan.supp). Debian's gloo has no TLS:
// the group is for trusted networks only (the CLI asks for `--insecure`).
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

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

// Note [gloo backend]: each rank makes a gloo TCP device and one listening pair per other rank, so endpoint() (the
// pairs' addresses, in hex) exists before any peer does; connect() joins each pair with the peer's address for this
// rank, the coordinator acting as store. all_reduce is gloo's ring with our vectorised sum; reduce_scatter is an
// all-reduce of a copy. abort() closes the sockets, so the peers' waits fail at once too.

// Two places reach past gloo's public API, which has no equivalent: a gloo::Context subclass takes pairs made before
// connect() (connectFullMesh makes them only when it runs), and abort() calls the pair's protected
// signalExceptionExternal (public close() leaves this rank's own waiting collective to the full timeout).
// TSan reports a race inside gloo on failure paths (scripts/tsan.supp).
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

// One rank's view of a group of ranks and the collectives it can start. The same interface within one process
// (local_group) and across processes (ring_group), so a worker never knows where its peers run.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "failure/error.hpp"
#include "tensor/tensor.hpp"

namespace ap {

enum class reduce_op { sum, mean };
const char* reduce_op_name(reduce_op op);

// The values cross the network in the ring's messages (0 is never sent).
enum class collective_kind : std::uint8_t { all_reduce = 1, reduce_scatter, all_gather, broadcast };
constexpr std::size_t collective_kinds = 4;
// "all_reduce", "reduce_scatter", ...; "an unknown collective" for a value off the list (from a peer).
const char* collective_kind_name(collective_kind kind);

// A collective that cannot complete. The text names the group, the collective, the waiting rank and the rank(s) at
// fault. Code `collective`, or the cause's own where this rank saw it (Note [the cause, not a peer's view]).
class collective_error : public runtime_failure {
 public:
  explicit collective_error(const std::string& what) : runtime_failure(error_code::collective, what) {}
  collective_error(error_code code, const std::string& what) : runtime_failure(code, what) {}
};

// Note [the cause, not a peer's view]: when one rank fails it aborts the group, and the others fail with code
// `collective` (or `lost_peer` for a lost connection) that only says they saw it. Of the errors of ranks that ran
// together (null: succeeded), the index of the first with neither code (the cause), else the first `lost_peer`,
// else the first error; -1 when none failed.
int first_cause(const std::vector<std::exception_ptr>& errors);

// An exception's code and text, for rethrowing with more text and the same code.
struct failure {
  error_code code = error_code::none;
  std::string what;
};
failure failure_of(const std::exception_ptr& error);

// Note [async collectives]: starting a collective returns at once with a handle; the caller computes on and calls
// wait() when it needs the result. Until wait() returns, the collective owns its tensors: the caller must neither
// read nor write them (as with MPI's non-blocking calls). Every wait has a timeout.
class collective_handle {
 public:
  class state {
   public:
    virtual ~state() = default;
    virtual void wait() = 0;         // throws collective_error
    virtual bool ready() const = 0;  // finished, well or badly: wait() would not block
  };

  collective_handle() = default;
  explicit collective_handle(std::shared_ptr<state> s) : state_(std::move(s)) {}
  // Blocks until this rank's result is in place. Throws collective_error; a default handle returns at once.
  void wait() {
    if (state_) state_->wait();
  }
  bool ready() const { return !state_ || state_->ready(); }

 private:
  std::shared_ptr<state> state_;
};

// Every rank calls the same collectives in the same order (as in MPI). Tensors are float32. Shards are along axis 0:
// rank r holds rows shard_rows(rows, size, r).
class process_group {
 public:
  virtual ~process_group() = default;
  virtual const std::string& name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank's `t` becomes the sum (or mean) over the ranks; every rank gets the same bits.
  virtual collective_handle all_reduce(tensor& t, reduce_op op = reduce_op::sum) = 0;
  // `in` has the same shape on every rank; `out` becomes this rank's shard of the rows of the reduction.
  virtual collective_handle reduce_scatter(const tensor& in, tensor& out, reduce_op op = reduce_op::sum) = 0;
  // `out` becomes every rank's `in` stacked along axis 0 (row counts may differ).
  virtual collective_handle all_gather(const tensor& in, tensor& out) = 0;
  // Every rank's `t` becomes root's `t` (same shape on every rank).
  virtual collective_handle broadcast(tensor& t, int root) = 0;
  // This rank gives up: every unfinished and later collective fails at once on every rank, naming it and `reason`.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace ap

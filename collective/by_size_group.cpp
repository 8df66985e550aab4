#include "collective/by_size_group.hpp"

#include <stdexcept>

namespace ap {

by_size_group::by_size_group(std::unique_ptr<network_group> small, std::unique_ptr<network_group> large,
                             std::size_t threshold_bytes)
    : small_(std::move(small)), large_(std::move(large)), threshold_(threshold_bytes) {
  if (!small_ || !large_) throw std::invalid_argument("by_size_group: needs two groups");
  if (small_->name() != large_->name() || small_->rank() != large_->rank() || small_->size() != large_->size())
    throw std::invalid_argument("by_size_group: group '" + small_->name() + "' rank " + std::to_string(small_->rank()) +
                                " of " + std::to_string(small_->size()) + " beside group '" + large_->name() + "' rank " +
                                std::to_string(large_->rank()) + " of " + std::to_string(large_->size()));
}

const std::string& by_size_group::name() const { return small_->name(); }
int by_size_group::rank() const { return small_->rank(); }
int by_size_group::size() const { return small_->size(); }

std::string by_size_group::endpoint() const { return small_->endpoint() + " " + large_->endpoint(); }

void by_size_group::connect(const std::vector<std::string>& endpoints) {
  std::vector<std::string> small, large;
  for (std::size_t r = 0; r < endpoints.size(); ++r) {
    const std::size_t space = endpoints[r].find(' ');
    if (space == std::string::npos)
      throw collective_error("group '" + name() + "' rank " + std::to_string(rank()) + ": rank " + std::to_string(r) +
                             "'s endpoint '" + endpoints[r].substr(0, 40) +
                             "' names one backend, not two (its node runs another --collectives?)");
    small.push_back(endpoints[r].substr(0, space));
    large.push_back(endpoints[r].substr(space + 1));
  }
  small_->connect(small);  // every rank connects the small group first, then the large one
  large_->connect(large);
}

network_group& by_size_group::group_for(std::size_t bytes) { return bytes < threshold_ ? *small_ : *large_; }

collective_handle by_size_group::all_reduce(tensor& t, reduce_op op) { return group_for(t.byte_size()).all_reduce(t, op); }

collective_handle by_size_group::reduce_scatter(const tensor& in, tensor& out, reduce_op op) {
  return group_for(in.byte_size()).reduce_scatter(in, out, op);
}

collective_handle by_size_group::all_gather(const tensor& in, tensor& out) { return small_->all_gather(in, out); }

collective_handle by_size_group::broadcast(tensor& t, int root) { return group_for(t.byte_size()).broadcast(t, root); }

void by_size_group::abort(const std::string& reason) {
  small_->abort(reason);
  large_->abort(reason);
}

}  // namespace ap

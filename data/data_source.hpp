// The one dataset interface: a sized collection of samples gathered into batches on demand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace ap {

// What the trainer reads batches from (docs/data.md shows one). gather() is called from one thread at a time
// and returns the same samples for the same indices.
class data_source {
 public:
  virtual ~data_source() = default;
  virtual std::string name() const = 0;  // for messages
  virtual std::size_t size() const = 0;
  virtual std::size_t num_classes() const = 0;     // labels are class ids below this
  virtual shape_t sample_shape() const = 0;  // e.g. {784} or {context}
  virtual bool is_sequence() const { return false; }  // labels (rows, positions)
  // The samples at indices[0 .. count) as one batch: inputs (count, sample_shape...), labels (count) or
  // (count, positions), class ids as floats.
  virtual batch gather(const std::size_t* indices, std::size_t count) const = 0;
};

std::shared_ptr<const data_source> memory_source(dataset d);

// A dataset as a source without a copy: `d` must outlive the view.
std::unique_ptr<const data_source> dataset_view(const dataset& d);

// The first `n` samples of `source` (all when n is 0 or too large).
std::shared_ptr<const data_source> first_samples(std::shared_ptr<const data_source> source, std::size_t n);

// Batch `index` of an epoch: the samples at positions [index*batch_size, ...) of `order` (the last may be
// smaller). Throws std::out_of_range past the last batch.
batch gather_batch(const data_source& source, const sample_order& order, std::size_t index, std::size_t batch_size);
// The same with the samples in stored order (evaluation).
batch gather_in_order(const data_source& source, std::size_t index, std::size_t batch_size);

// Every sample of `source` in one dataset (small sources, tests).
dataset materialise(const data_source& source);

}  // namespace ap

#include "data/data_source.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace ap {

namespace {

class dataset_rows : public data_source {
 public:
  explicit dataset_rows(const dataset* d) : d_(d) {
    if (d_->size() != 0 && (d_->labels.dimension() == 0 || d_->labels.shape()[0] != d_->size()))
      throw std::invalid_argument("data set '" + d_->name + "' has inputs " + shape_string(d_->inputs) +
                                  " but labels " + shape_string(d_->labels));
  }
  std::string name() const override { return d_->name; }
  std::size_t size() const override { return d_->size(); }
  std::size_t num_classes() const override { return d_->num_classes; }
  shape_t sample_shape() const override {
    if (d_->inputs.dimension() == 0) return {};
    shape_t s = shape_of(d_->inputs);
    s.erase(s.begin());
    return s;
  }
  bool is_sequence() const override { return d_->labels.dimension() >= 2; }
  batch gather(const std::size_t* indices, std::size_t count) const override {
    const std::size_t samples = d_->size();
    shape_t input_shape = shape_of(d_->inputs), label_shape = shape_of(d_->labels);
    if (input_shape.empty()) input_shape = {0};
    if (label_shape.empty()) label_shape = {0};
    input_shape[0] = count;
    label_shape[0] = count;
    const std::size_t row_size = samples == 0 ? 0 : d_->inputs.size() / samples;
    const std::size_t label_size = samples == 0 ? 0 : d_->labels.size() / samples;  // 1, or a sequence's tokens
    batch b{tensor::from_shape(input_shape), tensor::from_shape(label_shape)};
    for (std::size_t r = 0; r < count; ++r) {
      const std::size_t sample = indices[r];
      if (sample >= samples)
        throw std::out_of_range("sample index " + std::to_string(sample) + " is out of range for '" + d_->name +
                                "' with " + std::to_string(samples) + " samples");
      if (row_size != 0)
        std::memcpy(b.inputs.data() + r * row_size, d_->inputs.data() + sample * row_size, row_size * sizeof(float));
      if (label_size != 0)
        std::memcpy(b.labels.data() + r * label_size, d_->labels.data() + sample * label_size,
                    label_size * sizeof(float));
    }
    return b;
  }

 private:
  const dataset* d_;
};

class owned_dataset final : public data_source {
 public:
  explicit owned_dataset(dataset d) : d_(std::move(d)), rows_(&d_) {}
  std::string name() const override { return rows_.name(); }
  std::size_t size() const override { return rows_.size(); }
  std::size_t num_classes() const override { return rows_.num_classes(); }
  shape_t sample_shape() const override { return rows_.sample_shape(); }
  bool is_sequence() const override { return rows_.is_sequence(); }
  batch gather(const std::size_t* indices, std::size_t count) const override { return rows_.gather(indices, count); }

 private:
  dataset d_;
  dataset_rows rows_;
};

class first_of final : public data_source {
 public:
  first_of(std::shared_ptr<const data_source> s, std::size_t n) : s_(std::move(s)), n_(n) {}
  std::string name() const override { return s_->name(); }
  std::size_t size() const override { return n_; }
  std::size_t num_classes() const override { return s_->num_classes(); }
  shape_t sample_shape() const override { return s_->sample_shape(); }
  bool is_sequence() const override { return s_->is_sequence(); }
  batch gather(const std::size_t* indices, std::size_t count) const override {
    for (std::size_t r = 0; r < count; ++r)
      if (indices[r] >= n_)
        throw std::out_of_range("sample index " + std::to_string(indices[r]) + " is out of range for the first " +
                                std::to_string(n_) + " samples of '" + s_->name() + "'");
    return s_->gather(indices, count);
  }

 private:
  std::shared_ptr<const data_source> s_;
  std::size_t n_;
};

void check_batch(std::size_t index, std::size_t samples, std::size_t batch_size, const std::string& name) {
  const std::size_t count = batch_count(samples, batch_size);
  if (index >= count)
    throw std::out_of_range("batch index " + std::to_string(index) + " out of range: " + std::to_string(count) +
                            " batches of " + std::to_string(batch_size) + " in '" + name + "' with " +
                            std::to_string(samples) + " samples");
}

}  // namespace

std::shared_ptr<const data_source> memory_source(dataset d) { return std::make_shared<owned_dataset>(std::move(d)); }

std::unique_ptr<const data_source> dataset_view(const dataset& d) { return std::make_unique<dataset_rows>(&d); }

std::shared_ptr<const data_source> first_samples(std::shared_ptr<const data_source> source, std::size_t n) {
  if (n == 0 || n >= source->size()) return source;
  return std::make_shared<first_of>(std::move(source), n);
}

batch gather_batch(const data_source& source, const sample_order& order, std::size_t index, std::size_t batch_size) {
  check_batch(index, order.size(), batch_size, source.name());
  const std::size_t begin = index * batch_size, count = std::min(batch_size, order.size() - begin);
  std::vector<std::size_t> indices(count);
  for (std::size_t r = 0; r < count; ++r) indices[r] = order[begin + r];
  return source.gather(indices.data(), count);
}

batch gather_in_order(const data_source& source, std::size_t index, std::size_t batch_size) {
  check_batch(index, source.size(), batch_size, source.name());
  const std::size_t begin = index * batch_size, count = std::min(batch_size, source.size() - begin);
  std::vector<std::size_t> indices(count);
  for (std::size_t r = 0; r < count; ++r) indices[r] = begin + r;
  return source.gather(indices.data(), count);
}

dataset materialise(const data_source& source) {
  std::vector<std::size_t> all(source.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  batch b = source.gather(all.data(), all.size());
  dataset d;
  d.name = source.name();
  d.num_classes = source.num_classes();
  d.inputs = std::move(b.inputs);
  d.labels = std::move(b.labels);
  return d;
}

}  // namespace ap

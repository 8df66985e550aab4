#include "model/loss.hpp"

#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "model/layer_spec.hpp"
#include "model/spec_text.hpp"
#include "tensor/compute.hpp"
#include "tensor/fast_exp.hpp"

namespace ap {

namespace {

// Note [loss scaling] in loss.hpp.
double divisor(const tensor& output, std::size_t batch_size) {
  return double(batch_size == 0 ? rows(output) : batch_size);
}

// Losses compute in float32, as layers do.
void check_float32(const char* who, const tensor& output, const tensor& target) {
  if (output.type() != dtype::float32)
    throw std::invalid_argument(std::string(who) + " takes a float32 output, got " + describe(output));
  if (target.type() != dtype::float32)
    throw std::invalid_argument(std::string(who) + " takes a float32 target, got " + describe(target));
}

// Class labels: target's shape is output's without the last axis.
void check_labels_shape(const char* who, const tensor& output, const tensor& target) {
  check_float32(who, output, target);
  shape_t want = shape_of(output);
  if (!want.empty()) want.pop_back();
  if (output.dimension() == 0 || shape_of(target) != want)
    throw std::invalid_argument(std::string(who) + ": output " + shape_string(output) + " and target " +
                                shape_string(target) + " do not match: target must hold one class label per row " +
                                shape_string(want));
}

std::size_t label_of(const tensor& target, std::size_t row, std::size_t classes) {
  const float v = target.data()[row];
  if (!(v >= 0.0f && v < float(classes) && v == std::floor(v)))
    throw std::invalid_argument("row " + std::to_string(row) + " has label " + format_float(v) +
                                ", not a class index in [0, " + std::to_string(classes) + ")");
  return static_cast<std::size_t>(v);
}

void check_finite_row(const char* who, const float* row, std::size_t cols, std::size_t r) {
  for (std::size_t i = 0; i < cols; ++i)
    if (!std::isfinite(row[i]))
      throw std::domain_error(std::string(who) + ": row " + std::to_string(r) + " of the output holds " +
                              format_float(row[i]) + " at column " + std::to_string(i));
}

constexpr std::size_t exp_cost = 8;  // for_each_row: an exp against an add

}  // namespace

namespace {

// `row(r)` for every r < n on the compute threads where the work (n x cols x `element_cost`) is large enough
// (Note [op threads] in tensor/elementwise.hpp). A throwing row is marked and rerun serially after the loop, so
// errors are those of the serial loop.
template <class Row>
void for_each_row(std::size_t n, std::size_t cols, std::size_t element_cost, Row row) {
  const auto count = static_cast<std::ptrdiff_t>(n);
  if (std::ptrdiff_t(n * cols * element_cost) < parallel_elements / 16 || count < 2) {
    for (std::size_t r = 0; r < n; ++r) row(r);
    return;
  }
  std::vector<unsigned char> failed(n, 0);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < count; ++r) {
    try {
      row(std::size_t(r));
    } catch (...) {
      failed[std::size_t(r)] = 1;
    }
  }
  for (std::size_t r = 0; r < n; ++r)
    if (failed[r]) row(r);  // throws
}

}  // namespace

namespace {

// One row of softmax cross-entropy: its loss, log(sum(exp(x - max))) + max - x[label], and where `g` is given
// its gradient (softmax - one-hot) * scale. The exps go into `e` (Note [fast exp]) and are summed in double in
// a fixed order, so loss alone, gradient alone and both give the same bits. e and g may be x itself.
double cross_entropy_row(const float* x, std::size_t c, std::size_t label, float* e, float* g, double scale) {
  const float at_label = x[label];
  const float max = row_max(x, c);
  for (std::size_t i = 0; i < c; ++i) e[i] = exp_nonpositive(x[i] - max);
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= c; i += 8)
    for (std::size_t j = 0; j < 8; ++j) lanes[j] += double(e[i + j]);
  double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < c; ++i) sum += double(e[i]);
  if (g) {
    const double inverse = 1.0 / sum;
    for (std::size_t k = 0; k < c; ++k) g[k] = static_cast<float>((double(e[k]) * inverse - (k == label ? 1.0 : 0.0)) * scale);
  }
  return double(max) + std::log(sum) - double(at_label);
}

// Rows [0, n) of cross-entropy: losses into row_losses, gradients into grad, each where given.
void cross_entropy_rows(const tensor& output, const tensor& target, double scale, std::vector<double>* row_losses,
                        tensor* grad) {
  const std::size_t n = rows(output), c = cols(output);
  // Taken once, outside the team: a mutable data() bumps the tensor's version, a counter shared between cores.
  float* const grad_data = grad ? grad->data() : nullptr;
  for_each_row(n, c, exp_cost, [&](std::size_t r) {
    const float* x = output.data() + r * c;
    check_finite_row("cross_entropy", x, c, r);
    const std::size_t label = label_of(target, r, c);
    float* g = grad_data ? grad_data + r * c : nullptr;
    thread_local std::vector<float> scratch;
    if (!g) scratch.resize(c);
    const double row_loss = cross_entropy_row(x, c, label, g ? g : scratch.data(), g, scale);
    if (row_losses) {
      if (!std::isfinite(row_loss))
        throw std::domain_error("cross_entropy: the loss of row " + std::to_string(r) + " is not finite");
      (*row_losses)[r] = row_loss;
    }
  });
}

// The rows' losses summed in row order, whatever the threads.
float mean_of_rows(const std::vector<double>& row_losses, const tensor& output, std::size_t batch_size) {
  double total = 0.0;
  for (double l : row_losses) total += l;
  return static_cast<float>(total / divisor(output, batch_size));
}

}  // namespace

float softmax_cross_entropy::compute_loss(const tensor& output, const tensor& target,
                                          std::size_t batch_size) const {
  check_labels_shape("cross_entropy", output, target);
  std::vector<double> row_losses(rows(output));
  cross_entropy_rows(output, target, 1.0, &row_losses, nullptr);
  return mean_of_rows(row_losses, output, batch_size);
}

tensor softmax_cross_entropy::compute_gradient(const tensor& output, const tensor& target,
                                               std::size_t batch_size) const {
  check_labels_shape("cross_entropy", output, target);
  tensor grad = tensor::from_shape(output.shape());
  cross_entropy_rows(output, target, 1.0 / divisor(output, batch_size), nullptr, &grad);
  return grad;
}

loss::loss_and_gradient softmax_cross_entropy::compute_loss_and_gradient(const tensor& output, const tensor& target,
                                                                         std::size_t batch_size) const {
  check_labels_shape("cross_entropy", output, target);
  std::vector<double> row_losses(rows(output));
  tensor grad = tensor::from_shape(output.shape());
  cross_entropy_rows(output, target, 1.0 / divisor(output, batch_size), &row_losses, &grad);
  return {mean_of_rows(row_losses, output, batch_size), std::move(grad)};
}

loss::loss_and_gradient softmax_cross_entropy::take_loss_and_gradient(tensor&& output, const tensor& target,
                                                                      std::size_t batch_size) const {
  check_labels_shape("cross_entropy", output, target);
  std::vector<double> row_losses(rows(output));
  const double scale = 1.0 / divisor(output, batch_size);
  cross_entropy_rows(output, target, scale, &row_losses, &output);  // each row's gradient over its logits
  const float mean = mean_of_rows(row_losses, output, batch_size);
  return {mean, std::move(output)};
}

namespace {

void check_same_shape(const tensor& output, const tensor& target) {
  check_float32("mse", output, target);
  if (output.shape() != target.shape())
    throw std::invalid_argument("mse: output " + shape_string(output) + " and target " + shape_string(target) +
                                " differ in shape");
}

}  // namespace

float mean_squared_error::compute_loss(const tensor& output, const tensor& target, std::size_t batch_size) const {
  check_same_shape(output, target);
  const std::size_t n = rows(output), c = cols(output);
  std::vector<double> row_sums(n);  // summed in row order below
  for_each_row(n, c, 1, [&](std::size_t r) {
    const float* o = output.data() + r * c;
    const float* t = target.data() + r * c;
    double row_sum = 0.0;
    for (std::size_t i = 0; i < c; ++i) row_sum += double(o[i] - t[i]) * double(o[i] - t[i]);
    if (!std::isfinite(row_sum)) {
      check_finite_row("mse", o, c, r);
      throw std::domain_error("mse: the loss of row " + std::to_string(r) + " is not finite (check the target)");
    }
    row_sums[r] = row_sum;
  });
  double total = 0.0;
  for (std::size_t r = 0; r < n; ++r) total += row_sums[r];
  return static_cast<float>(total / (divisor(output, batch_size) * double(c)));
}

tensor mean_squared_error::compute_gradient(const tensor& output, const tensor& target,
                                            std::size_t batch_size) const {
  check_same_shape(output, target);
  const std::size_t n = rows(output), c = cols(output);
  const float scale = static_cast<float>(2.0 / (divisor(output, batch_size) * double(c)));
  tensor grad = tensor::from_shape(output.shape());
  float* const grad_data = grad.data();  // once, outside the team (cross_entropy_rows says why)
  for_each_row(n, c, 1, [&](std::size_t r) {
    const float* o = output.data() + r * c;
    const float* t = target.data() + r * c;
    float* g = grad_data + r * c;
    check_finite_row("mse", o, c, r);
    for (std::size_t i = 0; i < c; ++i) g[i] = (o[i] - t[i]) * scale;
  });
  return grad;
}

namespace {

struct loss_registry {
  std::mutex mutex;
  std::map<std::string, loss_factory> factories;
};

// Built on first use, so static-initialisation registrations find it; never destroyed.
loss_registry& the_losses() {
  static loss_registry* r = [] {
    auto* made = new loss_registry;
    made->factories.emplace("cross_entropy", [] { return std::make_unique<softmax_cross_entropy>(); });
    made->factories.emplace("mse", [] { return std::make_unique<mean_squared_error>(); });
    return made;
  }();
  return *r;
}

}  // namespace

void register_loss(const std::string& name, loss_factory factory) {
  if (!is_kind_name(name))
    throw std::logic_error("loss name '" + name + "' is not lower-case letters, digits and '_' starting with a letter");
  if (!factory) throw std::logic_error("loss '" + name + "' is registered without a factory");
  loss_registry& r = the_losses();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.factories.emplace(name, std::move(factory)).second)
    throw std::logic_error("loss '" + name + "' is registered twice");
}

std::vector<std::string> registered_losses() {
  loss_registry& r = the_losses();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

std::unique_ptr<loss> make_loss(const std::string& name) {
  loss_factory factory;
  {
    loss_registry& r = the_losses();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto i = r.factories.find(name); i != r.factories.end()) factory = i->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& n : registered_losses()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown loss '" + name + "': registered losses are " + known);
  }
  std::unique_ptr<loss> made = factory();
  if (!made) throw std::invalid_argument("loss '" + name + "': its factory made no loss");
  return made;
}

std::size_t count_correct(const tensor& output, const tensor& target) {
  check_labels_shape("count_correct", output, target);
  const std::size_t n = rows(output), c = cols(output);
  std::size_t correct = 0;
  for (std::size_t r = 0; r < n; ++r) {
    const float* x = output.data() + r * c;
    std::size_t best = 0;
    for (std::size_t i = 1; i < c; ++i)
      if (x[i] > x[best]) best = i;
    correct += float(best) == target.data()[r] ? 1 : 0;
  }
  return correct;
}

}  // namespace ap

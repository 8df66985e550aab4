#include "network/activation_links.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <unistd.h>

#include "failure/error.hpp"
#include "network/node_address.hpp"

namespace ap {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::chrono::hours between_tensors{24 * 365};  // a link may stay quiet between steps
constexpr std::chrono::milliseconds accept_poll{100};     // how often the acceptor asks whether to stop
constexpr std::uint32_t max_dimensions = 8;
constexpr std::size_t problems_kept = 4;
constexpr std::chrono::milliseconds lent_wait{2000};  // an outbox's longest wait, as it ends, for lent tensors' answers

// On the wire before the tensor's bytes, then one 64-bit extent per dimension (little-endian). An offer's
// process_region follows the extents; its bytes follow only when the inbox answers 0 (Note [one copy on one machine]).
enum class bytes_at : std::uint32_t { on_link = 0, in_sender = 1 };
struct frame_head {
  std::uint64_t ticket = 0, step = 0;
  std::uint32_t dtype_code = 0, dimensions = 0;
  bytes_at place = bytes_at::on_link;
  std::uint32_t unused = 0;
};
static_assert(sizeof(process_region) == 24, "a process_region's bytes on the wire: pid, token address, address");

// The sending stage of a ticket (activation_outbox::next_ticket).
int sender_of(std::uint64_t ticket) { return static_cast<int>(ticket >> 48) - 1; }

}  // namespace

std::string activation_hello(int stage) { return "actorpipe activations to stage " + std::to_string(stage); }

activation_inbox::activation_inbox(int stage, const std::string& host, std::shared_ptr<tls_context> tls,
                                   std::chrono::milliseconds timeout, std::function<void(const std::string&)> log)
    : stage_(stage), timeout_(timeout), log_(std::move(log)), listener_(std::make_unique<link_listener>(host, std::move(tls))) {
  port_ = listener_->port();
  acceptor_ = std::thread([this] { accept_loop(); });
}

activation_inbox::~activation_inbox() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    listener_->interrupt();
    for (data_link* l : open_) l->interrupt();
  }
  arrived_.notify_all();
  acceptor_.join();
  for (std::thread& r : readers_) r.join();
}

void activation_inbox::note_problem(std::string what) {
  problems_.push_back(std::move(what));
  if (problems_.size() > problems_kept) problems_.erase(problems_.begin());
}

std::string activation_inbox::stopped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_ ? "stage " + std::to_string(stage_) + " stopped" : "";
}

void activation_inbox::accept_loop() {
  const std::string hello = activation_hello(stage_);
  while (stopped().empty()) {
    std::vector<std::string> dropped;
    std::unique_ptr<data_link> link;
    try {
      link = listener_->accept(hello, clock_type::now() + accept_poll, dropped);
    } catch (const link_error& e) {  // nobody connected within the poll, or the inbox is stopping
      if (e.reason == link_error::kind::stopped) return;
    }
    if (log_) {
      for (const auto& d : dropped) log_("stage " + std::to_string(stage_) + ": dropped " + d);
      if (link) log_("stage " + std::to_string(stage_) + ": an activation link opened (Note [activations on data links])");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& d : dropped) note_problem("dropped " + d);
    if (link && !stopping_) {
      // A sender that lost its link opens another before its next tensor.
      closed_.clear();
      corrupted_.clear();
      open_.push_back(link.get());
      readers_.emplace_back([this, l = std::move(link)]() mutable { read_loop(std::move(l)); });
    }
  }
}

void activation_inbox::read_loop(std::unique_ptr<data_link> link) {
  const stop_check stop = [this] { return stopped(); };
  struct closing {
    activation_inbox& inbox;
    data_link* link;
    ~closing() {
      std::lock_guard<std::mutex> lock(inbox.mutex_);
      inbox.open_.erase(std::remove(inbox.open_.begin(), inbox.open_.end(), link), inbox.open_.end());
    }
  } unregister{*this, link.get()};
  int source = -1;
  const memory_token token = fresh_memory_token();  // Note [one copy on one machine]
  const bool one_machine = link->same_host();
  bool refused = false;  // an offer was refused: none may follow
  bool copied_one = false;  // Note [offers without waiting]
  try {
    link->write(token.data(), token.size(), timeout_, stop);
    for (;;) {
      frame_head head;
      link->read(&head.ticket, sizeof head.ticket, between_tensors, stop);
      link->read(&head.step, sizeof head - sizeof head.ticket, timeout_, stop);
      source = sender_of(head.ticket);  // a frame that fails from here ends that sender's waits at once
      const std::optional<dtype> type = dtype_from_code(static_cast<std::uint8_t>(head.dtype_code));
      if (!type || head.dtype_code > 255 || head.dimensions > max_dimensions)
        throw link_error(link_error::kind::failed, "a tensor of dtype code " + std::to_string(head.dtype_code) + " and " +
                                                       std::to_string(head.dimensions) + " dimensions");
      if (head.place != bytes_at::on_link && head.place != bytes_at::in_sender)
        throw link_error(link_error::kind::failed, "a tensor whose bytes are at place " + std::to_string(static_cast<std::uint32_t>(head.place)));
      std::uint64_t extents[max_dimensions] = {};
      link->read(extents, sizeof extents[0] * head.dimensions, timeout_, stop);
      tensor t = tensor::from_shape(shape_t(extents, extents + head.dimensions), *type);
      bool copied = false;
      if (head.place == bytes_at::in_sender) {  // Note [one copy on one machine]
        if (!one_machine || refused)
          throw link_error(link_error::kind::failed, !one_machine ? "a tensor offered in the memory of a process of another machine"
                                                                  : "a tensor offered in the sender's memory after a refusal");
        process_region region;
        link->read(&region, sizeof region, timeout_, stop);
        const std::string why_not = copy_from_process(region, token, t.bytes(), t.byte_size());
        copied = why_not.empty();
        refused = !copied;
        const std::uint8_t answer = copied ? 1 : 0;
        link->write(&answer, sizeof answer, timeout_, stop);
        if (!copied && copied_one)  // its sender went on without waiting: no bytes follow
          throw link_error(link_error::kind::failed, "a tensor of stage " + std::to_string(source) +
                                                         " could not be copied from its memory after earlier ones were: " + why_not);
        copied_one = copied_one || copied;
        if (!copied && log_)
          log_("stage " + std::to_string(stage_) + ": tensors from stage " + std::to_string(source) +
               " come on the link, not from its memory: " + why_not + " (Note [one copy on one machine])");
      }
      if (!copied && t.byte_size() > 0) link->read(t.bytes(), t.byte_size(), timeout_, stop);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        closed_.erase(source);
        corrupted_.erase(source);
        tensors_[head.ticket] = arrival{head.step, std::move(t)};
        if (copied) ++copied_;
      }
      arrived_.notify_all();
    }
  } catch (const link_error& e) {
    if (e.reason == link_error::kind::stopped) return;
    // The link ended: a tensor of that sender still awaited will not come on it.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (e.reason != link_error::kind::closed) note_problem(e.what());
      if (source >= 0) closed_[source] = e.what(), corrupted_[source] = e.corrupted;
    }
    arrived_.notify_all();
  }
}

tensor activation_inbox::take(std::uint64_t ticket) {
  const int source = sender_of(ticket);
  std::unique_lock<std::mutex> lock(mutex_);
  arrived_.wait_for(lock, timeout_,
                    [&] { return stopping_ || tensors_.count(ticket) > 0 || closed_.count(source) > 0; });
  const auto it = tensors_.find(ticket);
  if (it == tensors_.end()) {
    std::string why;
    for (const auto& p : problems_) why += (why.empty() ? " (its links: " : "; ") + p;
    const auto closed = closed_.find(source);
    const std::string what =
        stopping_ ? " will not come: the stage is stopping"
        : closed != closed_.end() ? " will not come: stage " + std::to_string(source) + "'s link ended (" + closed->second + ")"
                                  : " did not come on its data link within " + std::to_string(timeout_.count()) + " ms";
    const std::string text = "stage " + std::to_string(stage_) + ": the tensor of ticket " +
                             std::to_string(ticket & 0xffffffffffffULL) + " from stage " + std::to_string(source) + what +
                             (why.empty() ? "" : why + ")");
    if (closed != closed_.end() && corrupted_[source]) throw runtime_failure(error_code::lost_node, text);
    throw std::runtime_error(text);
  }
  tensor t = std::move(it->second.data);
  tensors_.erase(it);
  return t;
}

std::size_t activation_inbox::copied_from_senders() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return copied_;
}

void activation_inbox::forget_before(std::uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = tensors_.begin(); it != tensors_.end();) it = it->second.step < step ? tensors_.erase(it) : std::next(it);
}

activation_outbox::activation_outbox(int stage, std::shared_ptr<tls_context> tls, std::chrono::milliseconds timeout)
    : stage_(stage), tls_(std::move(tls)), timeout_(timeout) {}

activation_outbox::~activation_outbox() {
  // A lent tensor is freed once answered or its link ended (at most lent_wait).
  const auto until = clock_type::now() + std::min(timeout_, lent_wait);
  for (auto& [address, out] : links_) {
    try {
      while (!out.lent.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now());
        if (left.count() <= 0) break;
        take_answer(out, left);
      }
    } catch (const std::exception&) {
      // The link ended: nothing reads the tensors any more.
    }
  }
}

void activation_outbox::take_answer(link_to& out, std::chrono::milliseconds wait) {
  std::uint8_t answer = 0;
  out.link->read(&answer, sizeof answer, wait, nullptr);
  if (answer > 1) throw link_error(link_error::kind::failed, "an answer " + std::to_string(answer) + " to a tensor offered");
  if (answer == 0) throw link_error(link_error::kind::failed, "the inbox could not copy a tensor after copying earlier ones");
  out.lent.pop_front();
}

void activation_outbox::take_answers_come(link_to& out) {
  while (!out.lent.empty() && out.link->readable()) take_answer(out, timeout_);
}

std::size_t activation_outbox::lent() const {
  std::size_t n = 0;
  for (const auto& [address, out] : links_) n += out.lent.size();
  return n;
}

void activation_outbox::send(int to, const std::string& address, std::uint64_t ticket, std::uint64_t step, tensor&& t) {
  link_to& out = links_[address];
  try {
    if (!out.link) {
      const node_address a = parse_node_address(address);
      out.link = connect_link(a.host, a.port, tls_, activation_hello(to), clock_type::now() + timeout_);
      out.link->read(out.token.data(), out.token.size(), timeout_, nullptr);  // Note [one copy on one machine]
      out.offer = out.link->same_host();
    }
    take_answers_come(out);  // Note [offers without waiting]
    for (auto other = links_.begin(); other != links_.end();) {  // a stage that went (its tensors no longer read)
      try {
        if (&other->second != &out) take_answers_come(other->second);
        ++other;
      } catch (const std::exception&) {
        other = links_.erase(other);
      }
    }
    if (t.dimension() > max_dimensions)
      throw link_error(link_error::kind::failed, "a tensor of " + std::to_string(t.dimension()) + " dimensions");
    const bool offer = out.offer && t.byte_size() > 0;
    const frame_head head{ticket, step, static_cast<std::uint32_t>(t.type()), static_cast<std::uint32_t>(t.dimension()),
                          offer ? bytes_at::in_sender : bytes_at::on_link};
    // The head, extents and offer's region in one write: one wake-up of the inbox's reader.
    unsigned char frame[sizeof head + sizeof(std::uint64_t) * max_dimensions + sizeof(process_region)];
    std::size_t length = 0;
    const auto put = [&](const void* p, std::size_t n) { std::memcpy(frame + length, p, n), length += n; };
    put(&head, sizeof head);
    for (std::size_t d = 0; d < t.dimension(); ++d) {
      const std::uint64_t extent = t.shape()[d];
      put(&extent, sizeof extent);
    }
    if (offer) {
      const process_region region{static_cast<std::uint64_t>(::getpid()), reinterpret_cast<std::uintptr_t>(out.token.data()),
                                  reinterpret_cast<std::uintptr_t>(t.bytes())};
      put(&region, sizeof region);
    }
    data_link& link = *out.link;
    link.write(frame, length, timeout_, nullptr);
    if (offer && out.copied_one) {  // kept, unchanged, until its answer comes
      out.lent.push_back(std::move(t));
      return;
    }
    if (offer) {
      std::uint8_t answer = 0;
      link.read(&answer, sizeof answer, timeout_, nullptr);
      if (answer > 1) throw link_error(link_error::kind::failed, "an answer " + std::to_string(answer) + " to a tensor offered");
      if (answer == 1) {
        out.copied_one = true;
        return;
      }
      out.offer = false;  // the inbox cannot read this process: bytes on the link from now on
    }
    if (t.byte_size() > 0) link.write(t.bytes(), t.byte_size(), timeout_, nullptr);
  } catch (const std::exception& e) {
    links_.erase(address);  // at no known place in its stream: the next tensor connects again
    throw link_error(link_error::kind::failed, "stage " + std::to_string(stage_) + "'s data link to stage " +
                                                   std::to_string(to) + " at " + address + ": " + e.what());
  }
}

}  // namespace ap

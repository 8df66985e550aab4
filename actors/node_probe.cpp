#include "actors/node_probe.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/messages.hpp"
#include "actors/node.hpp"
#include "network/guarded_transport.hpp"
#include "network/link_echo.hpp"
#include "network/node_address.hpp"

namespace ap {
namespace {

// Half the fastest of `rounds` calls of `round_trip` (after one).
template <class RoundTrip>
double one_way_s(RoundTrip round_trip, int rounds = 5) {
  double fastest = -1.0;
  for (int r = 0; r <= rounds; ++r) {
    const auto sent = std::chrono::steady_clock::now();
    round_trip();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count() / 2;
    if (r > 0 && (fastest < 0 || s < fastest)) fastest = s;
  }
  return fastest;
}

// Half the fastest round trip of a tensor of `bytes` to `node` and back in a CAF message (echo_atom).
double message_one_way_s(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                         std::uint64_t bytes, std::chrono::milliseconds timeout) {
  const tensor payload = zeros({static_cast<std::size_t>(std::max<std::uint64_t>(1, bytes / 4))});
  return one_way_s([&] {
    std::string failure;
    const auto sent = std::chrono::steady_clock::now();
    self->request(node, timeout, echo_atom::value, tensor_message{0, payload})
        .receive([](tensor_message&) {}, [&](caf::error& e) { failure = wait_failure(e, timeout, sent); });
    if (!failure.empty()) throw std::runtime_error("node " + address.text() + ": timing a message: " + failure);
  });
}

// The same on a data link that an echo serves (link_echo_round_trip).
double link_one_way_s(data_link& link, std::uint64_t bytes, std::chrono::milliseconds timeout) {
  const std::vector<char> frame(static_cast<std::size_t>(std::clamp<std::uint64_t>(bytes, 1, link_echo_max_bytes)), 0);
  std::vector<char> back;
  return one_way_s([&] { link_echo_round_trip(link, frame, back, timeout); });
}

constexpr std::uint64_t small = 64 << 10, large = 4 << 20;

// The line through one-way times at `small` and `large` bytes.
network_line line_through(double at_small, double at_large) {
  network_line line;
  line.per_byte_s = std::max(0.0, (at_large - at_small) / static_cast<double>(large - small));
  line.latency_s = std::max(0.0, at_small - line.per_byte_s * static_cast<double>(small));
  return line;
}

// The fastest time from offering `bytes` in place to the echo's answer, less `tiny` (the offer's one-way time):
// the time until a tensor offered on one machine is in its receiver's memory; nothing when the echo did not copy.
std::optional<double> copy_one_way_s(data_link& link, const memory_token& token, std::uint64_t bytes, double tiny,
                                     std::chrono::milliseconds timeout) {
  const std::vector<char> frame(static_cast<std::size_t>(std::clamp<std::uint64_t>(bytes, 1, link_echo_max_bytes)), 0);
  bool copied = true;
  const double half = one_way_s([&] { copied = copied && link_echo_copy(link, token, frame, timeout); });
  if (!copied) return std::nullopt;
  return std::max(0.0, 2.0 * half - tiny);
}

// The lines of an echoing data link to `node`: through its socket, and where possible by one copy out of the
// sender's memory (Note [one copy on one machine]).
std::pair<network_line, std::optional<network_line>> link_lines(caf::scoped_actor& self, const caf::actor& node,
                                                                const node_address& address,
                                                                const std::shared_ptr<tls_context>& tls,
                                                                std::chrono::milliseconds timeout) {
  std::uint16_t port = 0;
  std::string failure;
  const auto sent = std::chrono::steady_clock::now();
  self->request(node, timeout, link_echo_atom::value, address.host, static_cast<std::uint32_t>(timeout.count()))
      .receive([&](std::uint16_t p) { port = p; }, [&](caf::error& e) { failure = wait_failure(e, timeout, sent); });
  if (!failure.empty()) throw std::runtime_error("node " + address.text() + ": asking for a timing link: " + failure);
  try {
    const auto link = connect_link(address.host, port, tls, link_echo_hello, std::chrono::steady_clock::now() + timeout);
    memory_token token{};
    link->read(token.data(), token.size(), timeout, nullptr);
    const network_line line = line_through(link_one_way_s(*link, small, timeout), link_one_way_s(*link, large, timeout));
    std::optional<network_line> copies;
    if (link->same_host()) {
      const double tiny = link_one_way_s(*link, 1, timeout);
      const std::optional<double> at_small = copy_one_way_s(*link, token, small, tiny, timeout);
      const std::optional<double> at_large = at_small ? copy_one_way_s(*link, token, large, tiny, timeout) : std::nullopt;
      if (at_large) copies = line_through(*at_small, *at_large);
    }
    const std::uint64_t done = 0;
    link->write(&done, sizeof done, timeout, nullptr);
    return {line, copies};
  } catch (const link_error& e) {
    throw std::runtime_error("node " + address.text() + ": timing a data link to port " + std::to_string(port) + ": " + e.what());
  }
}

// Connects to the node at `a` and asks for its machine; throws std::runtime_error naming the node.
node_machine ask_machine(caf::scoped_actor& self, const node_address& a, std::chrono::milliseconds timeout,
                         caf::actor* node_out = nullptr) {
  const caf::actor node = connect_node(self, a, timeout);
  if (node_out) *node_out = node;
  node_machine m{a.text(), a.host, 1, 0};
  std::string failure;
  const auto sent = std::chrono::steady_clock::now();
  self->request(node, timeout, machine_atom::value)
      .receive([&](std::uint32_t cores, std::int32_t threads) { m.cores = static_cast<int>(cores), m.threads = threads; },
               [&](caf::error& e) { failure = wait_failure(e, timeout, sent); });
  if (!failure.empty()) throw std::runtime_error("node " + a.text() + ": asking for its machine: " + failure);
  if (m.cores < 1) throw std::runtime_error("node " + a.text() + " reports no core");
  return m;
}

std::vector<node_address> parse_addresses(const std::vector<std::string>& nodes) {
  std::vector<node_address> addresses;
  for (const auto& text : nodes) addresses.push_back(parse_node_address(text));  // std::invalid_argument
  return addresses;
}

}  // namespace

node_survey survey_nodes(const std::vector<std::string>& nodes, const transport_security& security,
                         std::chrono::milliseconds timeout) {
  const std::vector<node_address> addresses = parse_addresses(nodes);
  if (addresses.empty()) throw std::invalid_argument("survey_nodes: no node given");
  check_transport_security(security, "train --auto");
  caf::actor_system_config config;
  enable_network(config);
  caf::actor_system system(config);
  node_survey out;
  {
    guarded_transport transport(system, security, transport_options{});
    caf::scoped_actor self(system);
    caf::actor first;
    for (const node_address& a : addresses) out.nodes.push_back(ask_machine(self, a, timeout, first ? nullptr : &first));
    out.network = line_through(message_one_way_s(self, first, addresses[0], small, timeout),
                               message_one_way_s(self, first, addresses[0], large, timeout));
    std::tie(out.links, out.copies) = link_lines(self, first, addresses[0], transport.tls(), timeout);
  }
  return out;
}

std::vector<std::string> nodes_answering(const std::vector<std::string>& nodes, const transport_security& security,
                                         std::chrono::milliseconds timeout) {
  const std::vector<node_address> addresses = parse_addresses(nodes);
  caf::actor_system_config config;
  enable_network(config);
  caf::actor_system system(config);
  std::vector<std::string> answering;
  guarded_transport transport(system, security, transport_options{});
  caf::scoped_actor self(system);
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    try {
      ask_machine(self, addresses[i], timeout);
      answering.push_back(nodes[i]);
    } catch (const std::runtime_error&) {  // refused, failed, silent or without a core: not answering
    }
  }
  return answering;
}

}  // namespace ap

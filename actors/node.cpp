#include "actors/node.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <map>
#include <set>
#include <stdexcept>

#include <caf/io/all.hpp>

#include "network/connect_retry.hpp"
#include "network/guarded_transport.hpp"
#include "network/link_echo.hpp"
#include "actors/message_types.hpp"
#include "actors/watched_ask.hpp"
#include "plan/cores.hpp"

namespace ap {

void enable_network(caf::actor_system_config& config) {
  config.load<caf::io::middleman>();
  add_message_types(config);
  config.set("middleman.heartbeat-interval", caf::timespan{heartbeat_interval});
  config.set("middleman.connection-timeout", caf::timespan{connection_timeout});
}

namespace {

caf::error refusal(std::string text) { return caf::make_error(caf::sec::runtime_error, std::move(text)); }

// ---- the node actor ----------------------------------------------------------------------------------

using peer_lost_atom = caf::atom_constant<caf::atom("peerlost")>;  // the node to itself: Note [a lost peer connection]

struct hosted_stage {
  int stage = 0;
  caf::actor_addr owner;  // who placed it
  stage_actors actors;
};

struct node_state {
  node_options options;
  std::set<caf::node_id> greeted;  // processes whose handshake this node accepted
  std::vector<hosted_stage> stages;
  std::map<caf::actor_addr, std::string> peers;  // the peer nodes this node connected to, monitored (their address)
  // Per lost peer, the stages (their processors) hosted when it was lost (Note [a lost peer connection]).
  std::map<std::uint64_t, std::pair<std::string, std::set<caf::actor_addr>>> peers_lost;
  std::uint64_t next_loss = 0;
  static inline const char* name = "node";
};

using node_actor = caf::stateful_actor<node_state>;

void log(node_actor* self, const std::string& line) {
  if (self->state.options.log) self->state.options.log(line);
}

// Stops the stages placed by `owner` (every stage when `owner` is null; only those whose processor is in `only`
// when given), their actors exiting with `reason`.
void stop_stages(node_actor* self, const caf::actor_addr& owner, const std::string& why,
                 caf::exit_reason reason = caf::exit_reason::user_shutdown,
                 const std::set<caf::actor_addr>* only = nullptr) {
  auto& st = self->state;
  std::vector<hosted_stage> kept;
  std::string stopped;
  for (auto& h : st.stages) {
    if ((owner && h.owner != owner) || (only && only->count(h.actors.processor.address()) == 0)) {
      kept.push_back(std::move(h));
      continue;
    }
    self->send_exit(h.actors.retriever, reason);
    self->send_exit(h.actors.processor, reason);
    self->send_exit(h.actors.sender, reason);
    stopped += (stopped.empty() ? "" : ", ") + std::to_string(h.stage);
  }
  st.stages = std::move(kept);
  if (!stopped.empty()) log(self, "stopped stage(s) " + stopped + ": " + why);
}

// Answers peers_atom once every connection stands, or with the first failure.
struct peer_wait {
  caf::response_promise promise;
  std::size_t left = 0;
  bool answered = false;
};

// One of peers_atom's connections; tried again on CAF's spurious timeout (Note [a fresh connection's first
// heartbeat]) until `deadline`.
void connect_peer(node_actor* self, const caf::io::middleman_actor& mm, const std::shared_ptr<peer_wait>& wait,
                  const std::string& text, const node_address& a, std::chrono::steady_clock::time_point deadline,
                  int hangups = 0) {
  const auto left = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                deadline - std::chrono::steady_clock::now()));
  self->request(mm, left, caf::connect_atom::value, a.host, a.port)
      .then(
          [=](caf::node_id&, caf::strong_actor_ptr& peer, std::set<std::string>&) {
            // Note [a lost peer connection]
            if (const auto p = caf::actor_cast<caf::actor>(peer); p && self->state.peers.emplace(p.address(), text).second)
              self->monitor(p);
            if (!wait->answered && --wait->left == 0) {
              wait->answered = true;
              wait->promise.deliver(ok_atom::value);
            }
          },
          [=](caf::error& e) {
            if (wait->answered) return;
            int tried = hangups;  // Note [a hang-up during the handshake]
            if (retry_connect(e, std::chrono::steady_clock::now(), deadline, &tried)) {
              connect_peer(self, mm, wait, text, a, deadline, tried);
              return;
            }
            wait->answered = true;
            const std::string why = "cannot connect to its peer node " + text + ": " + error_text(e);
            log(self, why);
            wait->promise.deliver(refusal(why));
          });
}

caf::behavior node(node_actor* self, node_options options) {
  self->state.options = std::move(options);
  // Note [a lost peer connection]: messages between two nodes' stages go over the connection one made to the
  // other (Note [direct routes between nodes]). When it breaks (its peer killed, a checked record failing, a cut),
  // what was on it is lost, and where the coordinator's own connections stand nothing tells it: a stage would wait
  // its whole timeout for a task that never comes. So the connecting node monitors its peer, and when it is lost
  // stops the stages it hosted then, as lost links stop them (remote_link_unreachable), a heartbeat interval later:
  // a peer that died is seen by the coordinator first and named in the step's error; a broken link alone fails the
  // step within a second, and recovery (--restart-on-failure) places the stages again and replays.
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    if (const auto peer = st.peers.find(m.source); peer != st.peers.end()) {
      std::set<caf::actor_addr> hosted;
      for (const auto& h : st.stages) hosted.insert(h.actors.processor.address());
      const std::uint64_t loss = st.next_loss++;
      st.peers_lost[loss] = {"the connection to its peer node " + peer->second + " was lost (" +
                                 caf::to_string(m.reason) + ")",
                             std::move(hosted)};
      st.peers.erase(peer);
      self->delayed_send(self, heartbeat_interval, peer_lost_atom::value, loss);
      return;
    }
    stop_stages(self, m.source, m.reason ? "their coordinator is gone (" + caf::to_string(m.reason) + ")"
                                         : "their coordinator finished");
  });
  self->set_exit_handler([=](caf::exit_msg& m) {
    stop_stages(self, {}, "the node is stopping");
    self->quit(m.reason);
  });
  return {
      [=](peer_lost_atom, std::uint64_t loss) {  // Note [a lost peer connection]
        auto& st = self->state;
        const auto it = st.peers_lost.find(loss);
        if (it == st.peers_lost.end()) return;
        const auto [why, hosted] = std::move(it->second);
        st.peers_lost.erase(it);
        stop_stages(self, {}, why, caf::exit_reason::remote_link_unreachable, &hosted);
      },
      [=](hello_atom, std::uint32_t version, bool little_endian, std::vector<std::string>& types,
          std::vector<std::string>& kinds)
          -> caf::result<hello_atom, std::uint32_t, bool, std::vector<std::string>, std::vector<std::string>> {
        auto& st = self->state;
        const handshake mine = local_handshake(st.options.protocol_version);
        const std::string why = handshake_mismatch(
            mine, handshake{version, little_endian, std::move(types), std::move(kinds)}, "this node", "the coordinator");
        if (!why.empty()) {
          log(self, "refused a coordinator: " + why);
          return refusal(why);
        }
        if (auto& sender = self->current_sender()) st.greeted.insert(sender->node());
        return {hello_atom::value, mine.version, mine.little_endian, mine.message_types, mine.layer_kinds};
      },
      // A version-1 coordinator's hello had no layer kinds: refuse it by its version, not as an unknown message.
      [=](hello_atom, std::uint32_t version, bool little_endian, std::vector<std::string>& types) -> caf::error {
        const std::string why =
            handshake_mismatch(local_handshake(self->state.options.protocol_version),
                               handshake{version, little_endian, std::move(types), {}}, "this node", "the coordinator");
        log(self, "refused a coordinator: " + why);
        return refusal(why);
      },
      [=](peers_atom, const std::vector<std::string>& peers, std::int64_t timeout_ms) -> caf::response_promise {
        auto wait = std::make_shared<peer_wait>();
        wait->promise = self->make_response_promise();
        wait->left = peers.size();
        if (peers.empty()) wait->promise.deliver(ok_atom::value);
        auto mm = transport_of(self->system());  // TLS like the coordinator's connection, when it is
        for (const auto& text : peers) {
          node_address a;
          try {
            a = parse_node_address(text);
          } catch (const std::exception& e) {
            wait->answered = true;
            wait->promise.deliver(refusal(e.what()));
            return wait->promise;
          }
          connect_peer(self, mm, wait, text, a, std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms));
        }
        return wait->promise;
      },
      [=](stage_spec& spec) -> caf::result<caf::actor, caf::actor, caf::actor, std::uint16_t> {
        auto& st = self->state;
        const int stage = spec.stage;
        const auto& sender = self->current_sender();
        if (!sender || st.greeted.count(sender->node()) == 0)
          return refusal("stage " + std::to_string(stage) + " refused: its coordinator skipped the handshake");
        stage_actors a;
        std::string layers;
        try {
          stage_setup setup = stage_setup_from_spec(std::move(spec), st.options.threads);
          setup.link_log = st.options.log;
          for (const auto& s : setup.slices) layers += (layers.empty() ? "" : " | ") + s.describe();
          for (std::size_t r = 0; r < setup.cores.size(); ++r)
            layers += (r == 0 ? " on " : ", ") + std::string(setup.cores.size() > 1 ? "rank " + std::to_string(r) + " " : "") +
                      cores_text(setup.cores[r]);
          a = spawn_stage(self->system(), std::move(setup));
        } catch (const std::exception& e) {
          log(self, std::string("could not start a stage: ") + e.what());
          return refusal(e.what());
        }
        const auto owner = caf::actor_cast<caf::actor>(sender);
        bool known = false;
        for (const auto& h : st.stages) known = known || h.owner == owner.address();
        if (!known) self->monitor(owner);
        st.stages.push_back(hosted_stage{stage, owner.address(), a});
        log(self, "stage " + std::to_string(stage) + " started: " + layers);
        // Untyped on the wire, as before (Note [typed stage interfaces]): place_stage casts them back.
        return {caf::actor_cast<caf::actor>(a.retriever), caf::actor_cast<caf::actor>(a.processor),
                caf::actor_cast<caf::actor>(a.sender), a.link_port};
      },
      [=](clock_atom) -> double {  // the clock the node's events are stamped with (Note [events from nodes])
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
      },
      // What a coordinator plans with, its machine and the network's costs (Note [auto on nodes]).
      [=](machine_atom) -> caf::result<std::uint32_t, std::int32_t> {
        return {static_cast<std::uint32_t>(process_cores().size()), static_cast<std::int32_t>(self->state.options.threads)};
      },
      [=](echo_atom, tensor_message& m) -> tensor_message { return std::move(m); },
      [=](link_echo_atom, const std::string& host, std::uint32_t timeout_ms) -> caf::result<std::uint16_t> {
        try {
          return start_link_echo(host, transport_tls_of(self->system()), std::chrono::milliseconds(timeout_ms));
        } catch (const std::exception& e) {
          return refusal(std::string("cannot open a timing link on ") + host + ": " + e.what());
        }
      },
      [=](quit_atom) {
        stop_stages(self, {}, "told to quit");
        self->quit();
      },
  };
}

}  // namespace

std::string wait_failure_text(const caf::error& e, std::chrono::milliseconds timeout, double waited_s) {
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f s", waited_s);
  const std::string limit = std::to_string(timeout.count()) + " ms";
  // Our request's timeout and the middleman's own connection timeout race on a silent peer: both mean it did
  // not answer, but the middleman's may come long before our limit, so say which one and when.
  if (e == caf::sec::request_timeout) return "no answer within " + limit + " (waited " + waited + ")";
  if (e == caf::sec::connection_timeout)
    return "no answer: the connection timed out after " + std::string(waited) + ", before the limit of " + limit;
  return error_text(e) + " (after " + waited + ")";
}

std::string wait_failure(const caf::error& e, std::chrono::milliseconds timeout,
                         std::chrono::steady_clock::time_point sent) {
  return wait_failure_text(e, timeout, std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
}

caf::actor spawn_node(caf::actor_system& system, node_options options) { return system.spawn(node, std::move(options)); }

// ---- the coordinator's side --------------------------------------------------------------------------

caf::actor connect_node(caf::scoped_actor& self, const node_address& address, std::chrono::milliseconds timeout,
                        std::vector<std::string>* node_layer_kinds) {
  const std::string them = "node " + address.text();
  caf::actor node;
  std::string failure;
  // Not middleman().remote_actor(): it waits without a limit, e.g. on a peer that accepts and stays silent.
  const auto sent = std::chrono::steady_clock::now();
  const auto deadline = sent + timeout;
  int hangups = 0;  // Note [a hang-up during the handshake]
  for (bool again = true; again;) {  // Note [a fresh connection's first heartbeat]
    again = false;
    const auto left = std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  deadline - std::chrono::steady_clock::now()));
    self->request(transport_of(self->system()), left, caf::connect_atom::value, address.host, address.port)
        .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr,
                     std::set<std::string>&) { node = caf::actor_cast<caf::actor>(ptr); },
                 [&](caf::error& e) {
                   if ((again = retry_connect(e, std::chrono::steady_clock::now(), deadline, &hangups))) return;
                   failure = wait_failure(e, timeout, sent);
                   // The peer hung up before CAF's handshake, every time: on a node that is up, the transports disagree.
                   if (e == caf::sec::disconnect_during_handshake)
                     failure += ": the node and this coordinator disagree on TLS (both need certificates signed by "
                                "the same CA, --tls-ca; or both --insecure); the node's log says which";
                 });
  }
  if (!failure.empty())
    throw std::runtime_error("cannot connect to " + them + ": " + failure + " (is `actorpipe node` running there?)");
  if (!node) throw std::runtime_error(them + " publishes no actor: is it an `actorpipe node`?");
  const handshake mine = local_handshake();
  handshake theirs;
  const watched_wait w = ask_watched(  // Note [answers from other nodes]
      self, node, timeout,
      [&](hello_atom, std::uint32_t version, bool little_endian, std::vector<std::string>& types,
          std::vector<std::string>& kinds) {
        theirs = handshake{version, little_endian, std::move(types), std::move(kinds)};
      },
      hello_atom::value, mine.version, mine.little_endian, mine.message_types, mine.layer_kinds);
  if (w.result == watched_wait::outcome::gone)
    failure = "the connection was lost (" + caf::to_string(w.reason) + ")";
  else if (!w.answered())
    failure = wait_failure(w.failure(), timeout, w.sent);
  if (!failure.empty()) throw std::runtime_error(them + " refused the handshake: " + failure);
  if (auto why = handshake_mismatch(mine, theirs, "the coordinator", them); !why.empty())
    throw std::runtime_error("refusing " + them + ": " + why);
  if (node_layer_kinds) *node_layer_kinds = std::move(theirs.layer_kinds);
  return node;
}

clock_offset estimate_clock_offset(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                                   std::chrono::milliseconds timeout, int rounds) {
  const auto now_us = [] {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  clock_offset best;
  double best_round_trip = -1.0;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_us();
    double theirs = 0.0;
    const watched_wait w = ask_watched(self, node, timeout, [&](double t) { theirs = t; }, clock_atom::value);
    const double t1 = now_us();
    if (!w.answered())
      throw std::runtime_error("node " + address.text() + ": reading its clock: " + wait_failure(w.failure(), timeout, w.sent));
    if (best_round_trip < 0 || t1 - t0 < best_round_trip) {
      best_round_trip = t1 - t0;
      best = clock_offset{theirs - (t0 + t1) / 2, (t1 - t0) / 2};
    }
  }
  return best;
}

void connect_peers(caf::scoped_actor& self, const caf::actor& node, const node_address& address,
                   const std::vector<node_address>& peers, std::chrono::milliseconds timeout) {
  if (peers.empty()) return;
  std::vector<std::string> texts;
  for (const auto& p : peers) texts.push_back(p.text());
  // The node waits `timeout` per connection (in parallel); this waits a second longer for its answer.
  const auto limit = timeout + std::chrono::seconds(1);
  const watched_wait w = ask_watched(self, node, limit, [](ok_atom) {}, peers_atom::value, texts,
                                     static_cast<std::int64_t>(timeout.count()));
  if (!w.answered()) throw std::runtime_error("node " + address.text() + ": " + wait_failure(w.failure(), limit, w.sent));
}

stage_actors place_stage(caf::scoped_actor& self, const caf::actor& node, const node_address& address, stage_spec spec,
                         std::chrono::milliseconds timeout) {
  const std::string what = "placing stage " + std::to_string(spec.stage) + " on node " + address.text();
  stage_actors a;
  // The node is watched: its loss ends the wait at once, and a recovery tries again (Note [answers from other nodes]).
  const watched_wait w = ask_watched(
      self, node, timeout,
      [&](caf::actor& retriever, caf::actor& processor, caf::actor& sender, std::uint16_t link_port) {
        // The node speaks our protocol version with our message types (the
        // handshake said so), so these are the typed actors of stage_spawner.cpp (Note [typed stage interfaces]).
        a = stage_actors{caf::actor_cast<retriever_actor>(std::move(retriever)),
                         caf::actor_cast<processor_actor>(std::move(processor)),
                         caf::actor_cast<sender_actor>(std::move(sender)), link_port};
      },
      std::move(spec));
  if (w.result == watched_wait::outcome::gone)
    throw std::runtime_error(what + ": the connection to the node was lost (" + caf::to_string(w.reason) + ")");
  if (!w.answered()) throw std::runtime_error(what + ": " + wait_failure(w.failure(), timeout, w.sent));
  if (!a.retriever || !a.processor || !a.sender) throw std::runtime_error(what + ": the node sent invalid handles");
  return a;
}

}  // namespace ap

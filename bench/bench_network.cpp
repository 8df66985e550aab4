// bench_network: what crossing a process boundary costs, on loopback (127.0.0.1).
//
// (1) Activation transfer: forward_tasks of 1, 4, 16 and 64 MB go from this process to a sink actor in a
//     child process (this program re-run with --sink), streamed in batches of ~64 MB (2 tensors of 64 MB), each batch timed
//     until the sink confirms it received it. MB/s = payload bytes / time, MB = 2^20 bytes. The tensor
//     travels as one raw block (wire_format.hpp); the figure includes serialising, the kernel's copies
//     and deserialising into a fresh tensor on the other side. Then the same tensors on an activation link beside
//     a CAF message carrying their ticket (Note [activations on data links]), as stages on two nodes send them:
//     written from the tensor's memory, read into a fresh tensor, taken by the sink's actor.
// (2) Training: samples/s of 784-2048-2048-2048-10 (batch 256, 8 microbatches, 1F1B, Adam) on 2 stages
//     placed on 2 `actorpipe node` processes, against the same 2-stage pipeline in one process. Blocks of
//     steps alternate between the two (Note [timing under load] in bench_single_process.cpp). With --stages P
//     --threads T, P stages of T threads each: the 16-core figure is --stages 4 --threads 4 (4 nodes of
//     4 threads against 4 stages of 4 threads in one process; the nodes share the machine's cores as Note
//     [cores on nodes] says).
//
// Usage: bench_network [--actorpipe PATH] [--steps N] [--quick] [--insecure] [--stages P] [--threads T]
//                      [--batch B] [--training-only] [--link-host H]
//   --actorpipe  the actorpipe program that runs the nodes (default: ../cli/actorpipe next to this program,
//                or the actorpipe packed beside it)
//   --steps      timed training steps per block (default 30; --quick: 10)
//   --insecure   plain TCP for both parts; default: mutual TLS (test certificates, Note [mutual TLS]), so
//                the two runs give TLS's cost
//   --stages, --threads, --batch  the training's pipeline (default 2 stages of 1 thread, batch 256)
//   --training-only  part (2) alone
//   --link-host  where the sink's activation links listen (default 127.0.0.1: one address at both ends, so
//                tensors are copied out of the sender's memory, Note [one copy on one machine]); 127.0.0.2
//                makes them cross the socket, as between machines
// Prints a table, then one JSON line.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "../tests/node_process.hpp"
#include "bench_support.hpp"
#include "actors/messages.hpp"
#include "network/activation_links.hpp"
#include "actors/node.hpp"
#include "actors/pipeline.hpp"
#include "data/synthetic.hpp"
#include "network/guarded_transport.hpp"
#include "model/sequential.hpp"
#include "tensor/compute.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---- the sink process --------------------------------------------------------------------------------

struct sink_state {
  std::int64_t tasks = 0, bytes = 0;
  std::shared_ptr<ap::activation_inbox> inbox;  // the tensors that come beside their messages
  static inline const char* name = "sink";
};

caf::behavior sink(caf::stateful_actor<sink_state>* self, std::shared_ptr<ap::activation_inbox> inbox) {
  self->state.inbox = std::move(inbox);
  return {
      [=](ap::forward_task& t) {
        if (t.ticket != 0) t.data = self->state.inbox->take(t.ticket);
        ++self->state.tasks;
        self->state.bytes += static_cast<std::int64_t>(t.data.size() * sizeof(float));
      },
      [=](ap::ok_atom) { return caf::make_message(self->state.tasks, self->state.bytes); },
  };
}

ap::transport_security transport_for(bool tls, const std::string& name) {
  return tls ? ap::test::tls_security(name) : ap::test::insecure_transport();
}

// `link_host`: where the sink's activation inbox listens (--link-host).
int run_sink(bool tls, const std::string& cert_dir, const std::string& link_host) {
  caf::actor_system_config config;
  ap::enable_network(config);
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  ap::transport_security security = ap::test::insecure_transport();
  if (tls) security = {cert_dir + "/ca.pem", cert_dir + "/node.pem", cert_dir + "/node.key", false};
  ap::guarded_transport transport{system, security, {}};
  auto inbox = std::make_shared<ap::activation_inbox>(1, link_host, transport.tls(), std::chrono::milliseconds(120000));
  const std::uint16_t link_port = inbox->port();
  auto s = system.spawn(sink, std::move(inbox));
  auto port = transport.publish(s, 0, "127.0.0.1", true);
  if (!port) {
    std::cerr << "sink: " << caf::to_string(port.error()) << "\n";
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    return 1;
  }
  std::cout << "sink listening on 127.0.0.1:" << *port << " links " << link_port << std::endl;
  caf::scoped_actor self{system};
  self->wait_for(s);
  return 0;
}

// ---- (1) transfer throughput -------------------------------------------------------------------------

struct transfer_result {
  double megabytes = 0;
  double best_mb_per_s = 0, median_mb_per_s = 0;
  int messages = 0;
};

// `beside`: each tensor on an activation link, its message carrying the ticket (Note [activations on data links]).
std::vector<transfer_result> bench_transfer(bool quick, bool tls, bool beside, const std::string& link_host) {
  std::vector<std::string> command = ap::bench::self_command();
  command.insert(command.end(), {"--sink", tls ? ap::test::certificate_dir() : "--insecure", link_host});
  ap::test::child_process child(command);
  const std::string line = child.read_line(ap::test::scaled(10s));
  if (line.rfind("sink listening on ", 0) != 0) throw std::runtime_error("the sink did not start: " + child.stderr_text());
  const std::size_t links_at = line.find(" links ");
  const int port = std::stoi(line.substr(line.rfind(':') + 1, links_at));
  const std::string link_address = link_host + ":" + line.substr(links_at + 7);
  caf::actor_system_config config;
  ap::enable_network(config);
  config.set("scheduler.max-threads", 2);
  caf::actor_system system{config};
  ap::guarded_transport transport{system, transport_for(tls, "coordinator"), {}};
  ap::activation_outbox outbox(0, transport.tls(), std::chrono::milliseconds(120000));
  caf::actor remote;
  caf::scoped_actor self{system};
  self->request(ap::transport_of(system), 10s, caf::connect_atom::value, std::string("127.0.0.1"),
                static_cast<std::uint16_t>(port))
      .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
                 remote = caf::actor_cast<caf::actor>(ptr);
               },
               [&](caf::error& e) { throw std::runtime_error("cannot reach the sink: " + caf::to_string(e)); });
  auto sync = [&] {
    std::int64_t tasks = 0;
    self->request(remote, 120s, ap::ok_atom::value)
        .receive([&](std::int64_t t, std::int64_t) { tasks = t; },
                 [&](caf::error& e) { throw std::runtime_error("sink: " + caf::to_string(e)); });
    return tasks;
  };
  std::vector<transfer_result> results;
  for (const double mb : {1.0, 4.0, 16.0, 64.0}) {
    const auto floats = static_cast<std::size_t>(mb * 1024 * 1024 / sizeof(float));
    ap::forward_task t;
    t.data = ap::zeros({floats / 1024, 1024});
    std::fill(t.data.begin(), t.data.end(), 0.5f);
    const ap::tensor payload = t.data;
    const caf::message msg = caf::make_message(std::move(t));  // sent again and again: no copy here
    const int per_batch = std::max(2, static_cast<int>(64.0 / mb));  // at least 2: the 2nd overlaps the 1st
    const int batches = quick ? 3 : std::max(5, static_cast<int>(8 * 16.0 / (mb * per_batch)));
    std::vector<ap::tensor> outputs;  // a batch's tensors, made before its clock starts, as a stage's outputs are
    auto make_outputs = [&] {
      if (beside) outputs.assign(static_cast<std::size_t>(per_batch), payload);  // a link may keep what it sends
    };
    auto send_batch = [&] {
      for (int i = 0; i < per_batch; ++i) {
        if (!beside) {
          remote->enqueue(nullptr, caf::make_message_id(), msg, nullptr);
          continue;
        }
        ap::forward_task ticketed;
        ticketed.ticket = outbox.next_ticket();
        outbox.send(1, link_address, ticketed.ticket, 0, std::move(outputs[static_cast<std::size_t>(i)]));
        caf::anon_send(remote, std::move(ticketed));
      }
      sync();
    };
    make_outputs();
    send_batch();  // warm-up: connection buffers, page faults of the receiver
    std::vector<double> rates;
    for (int b = 0; b < batches; ++b) {
      make_outputs();
      const auto t0 = clock_type::now();
      send_batch();
      rates.push_back(mb * per_batch / seconds_since(t0));
    }
    std::sort(rates.begin(), rates.end());
    results.push_back({mb, rates.back(), rates[rates.size() / 2], per_batch * batches});
    std::cout << "  " << mb << " MB tensors: median " << rates[rates.size() / 2] << " MB/s, best " << rates.back()
              << " MB/s (" << batches << " batches of " << per_batch << ")" << std::endl;
  }
  caf::anon_send_exit(remote, caf::exit_reason::user_shutdown);
  return results;
}

// ---- (2) training on two nodes -----------------------------------------------------------------------

struct training_result {
  double in_process = 0, on_nodes = 0;  // samples/s, median over blocks
};

// The training's pipeline: `stages` stages of `threads` intra-op threads each, batches of `batch` samples.
struct training_shape {
  int stages = 2, threads = 1, batch = 256;
};

double train_block(ap::pipeline& pipe, const std::vector<ap::dataset>& batches, int steps, std::uint64_t& step) {
  const auto t0 = clock_type::now();
  for (int s = 0; s < steps; ++s) {
    const auto& b = batches[step % batches.size()];
    pipe.train_step(b.inputs, b.labels, step++);
  }
  return steps * static_cast<double>(batches[0].inputs.shape()[0]) / seconds_since(t0);
}

training_result bench_training(const std::vector<std::string>& actorpipe, int steps, bool tls, const training_shape& shape) {
  const ap::sequential model = ap::sequential::from_spec("784-2048-2048-2048-10", {"relu", 1});
  std::vector<ap::dataset> batches;
  for (std::uint64_t i = 0; i < 4; ++i)
    batches.push_back(ap::make_blobs(static_cast<std::size_t>(shape.batch), 784, 10, 100 + i));
  ap::pipeline_options o;
  o.stages = shape.stages;
  o.threads = shape.threads;
  o.microbatches = 8;
  o.schedule = "1f1b";
  o.optimizer.kind = "adam";
  o.optimizer.lr = 1e-3f;

  const std::vector<std::string> flags = tls ? std::vector<std::string>{} : std::vector<std::string>{"--insecure"};
  std::vector<std::unique_ptr<ap::test::node_process>> nodes;  // default: mutual TLS (test certificates)
  ap::pipeline_options on_nodes = o;
  for (int n = 0; n < shape.stages; ++n) {
    nodes.push_back(std::make_unique<ap::test::node_process>(actorpipe, flags));
    on_nodes.nodes.push_back(nodes.back()->address());
  }
  on_nodes.security = transport_for(tls, "coordinator");
  // Both pipelines live side by side (each idles while the other trains) so blocks can alternate.
  ap::pipeline local(model, o);
  ap::pipeline remote(model, on_nodes);
  std::uint64_t local_step = 0, remote_step = 0;
  train_block(local, batches, 3, local_step);  // warm-up
  train_block(remote, batches, 3, remote_step);
  std::vector<double> l, r;
  for (int block = 0; block < 5; ++block) {
    l.push_back(train_block(local, batches, steps, local_step));
    r.push_back(train_block(remote, batches, steps, remote_step));
    std::cout << "  block " << block << ": one process " << l.back() << " samples/s, " << shape.stages << " nodes "
              << r.back() << " samples/s" << std::endl;
  }
  std::sort(l.begin(), l.end());
  std::sort(r.begin(), r.end());
  return {l[l.size() / 2], r[r.size() / 2]};
}

}  // namespace

int main(int argc, char** argv) {
  ap::keep_tensor_memory();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 3 && args[0] == "--sink") return run_sink(args[1] != "--insecure", args[1], args[2]);
  bool quick = false, tls = true, training_only = false;
  std::string link_host = "127.0.0.1";
  int steps = 30;
  training_shape shape;
  std::vector<std::string> actorpipe = ap::bench::actorpipe_command();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool valued = i + 1 < args.size();
    if (args[i] == "--quick") quick = true, steps = 10;
    else if (args[i] == "--steps" && valued) steps = std::stoi(args[++i]);
    else if (args[i] == "--actorpipe" && valued) actorpipe = {args[++i]};
    else if (args[i] == "--insecure") tls = false;
    else if (args[i] == "--stages" && valued) shape.stages = std::stoi(args[++i]);
    else if (args[i] == "--threads" && valued) shape.threads = std::stoi(args[++i]);
    else if (args[i] == "--batch" && valued) shape.batch = std::stoi(args[++i]);
    else if (args[i] == "--training-only") training_only = true;
    else if (args[i] == "--link-host" && valued) link_host = args[++i];
    else {
      std::cerr << "usage: bench_network [--actorpipe PATH] [--steps N] [--quick] [--insecure] [--stages P] "
                   "[--threads T] [--batch B] [--training-only] [--link-host H]\n";
      return 2;
    }
  }
  if (shape.stages < 1 || shape.threads < 1 || shape.batch < 8) {
    std::cerr << "bench_network: --stages and --threads must be positive and --batch at least 8 (8 microbatches)\n";
    return 2;
  }
  ap::set_compute_threads(1);
  try {
    std::cout << "transport: " << (tls ? "mutual TLS" : "plain TCP (--insecure)") << std::endl;
    nlohmann::json out;
    out["transport"] = tls ? "tls" : "plain";
    if (!training_only) {
      std::cout << "activation transfer between two processes on loopback (forward_task, raw block):" << std::endl;
      for (const auto& t : bench_transfer(quick, tls, false, link_host))
        out["transfer_mb_per_s"][std::to_string(static_cast<int>(t.megabytes)) + "MB"] = t.median_mb_per_s;
      std::cout << "the same on an activation link beside a ticketed message (Note [activations on data links]):" << std::endl;
      for (const auto& t : bench_transfer(quick, tls, true, link_host))
        out["link_transfer_mb_per_s"][std::to_string(static_cast<int>(t.megabytes)) + "MB"] = t.median_mb_per_s;
    }
    std::cout << "training 784-2048-2048-2048-10, batch " << shape.batch << ", m=8, 1F1B, " << shape.stages
              << " stages of " << shape.threads << " thread" << (shape.threads == 1 ? "" : "s") << ", " << steps
              << " steps per block:" << std::endl;
    const auto training = bench_training(actorpipe, steps, tls, shape);
    const double ratio = training.on_nodes / training.in_process;
    std::cout << "  median: one process " << training.in_process << " samples/s, " << shape.stages << " nodes "
              << training.on_nodes << " samples/s, ratio " << ratio
              << " (targets: >= 0.97 for 2 nodes of one machine, >= 0.95 for 4 nodes of 4 threads on 16 cores)"
              << std::endl;
    out["stages"] = shape.stages, out["threads"] = shape.threads, out["batch"] = shape.batch;
    out["train_samples_per_s_in_process"] = training.in_process;
    out["train_samples_per_s_on_nodes"] = training.on_nodes;
    out["train_ratio"] = ratio;
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "bench_network: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

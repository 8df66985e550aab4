// bench_network: what crossing a process boundary costs on loopback: activations between processes and training
// on node processes against one process (nodes); the all-reduce among processes with either backend (allreduce,
// which scripts/bench_allreduce.sh runs beside Open MPI's); the all-reduce between threads (local-allreduce); and
// plain loopback TCP (tcp). MB = 2^20 bytes, but tcp's GB/s is 1e9 bytes a second.
//
// Nodes and the ring use mutual TLS by default (Note [mutual TLS]; test certificates from
// scripts/make_test_certs.sh, which needs `openssl`), --insecure for plain TCP; gloo is plain TCP only.
//
// Usage: bench_network [nodes|allreduce|local-allreduce|tcp] [OPTIONS]   (--help lists each mode's options)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "../tests/node_process.hpp"
#include "actors/message_types.hpp"
#include "actors/messages.hpp"
#include "actors/node.hpp"
#include "actors/pipeline.hpp"
#include "actors/scheduler_config.hpp"
#include "bench/bench_support.hpp"
#include "collective/gloo_group.hpp"
#include "collective/local_group.hpp"
#include "collective/ring_group.hpp"
#include "data/synthetic.hpp"
#include "model/sequential.hpp"
#include "network/activation_links.hpp"
#include "network/guarded_transport.hpp"
#include "tensor/compute.hpp"

namespace {

using ap::bench::clock_type;
using ap::bench::seconds_since;
using namespace std::chrono_literals;

ap::transport_security transport_for(bool tls, const std::string& name) {
  return tls ? ap::test::tls_security(name) : ap::test::insecure_transport();
}

// ---- nodes: activations between two processes, and training on node processes against one process
// (1) Activation transfer: forward_tasks of 1-64 MB to a sink actor in a child process, each batch timed until
//     the sink confirms; then the same tensors on an activation link (Note [activations on data links]).

// (2) Training: a 2-stage pipeline on 2 `actorpipe node` processes against one process, in alternating
//     blocks (Note [timing under load]); the nodes share the cores (Note [cores on nodes]).

// Options:
//   --actorpipe  the actorpipe that runs the nodes
//   --steps      timed training steps per block (default 30; --quick: 10, and 3 batches a transfer size)
//   --training-only  part (2) alone
//   --link-host  where the sink's activation links listen (default 127.0.0.1: tensors are copied out of the
//                sender's memory, Note [one copy on one machine]; 127.0.0.2 makes them cross the socket)
namespace nodes {

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

// The child: a sink actor and its activation inbox.
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
    caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    throw std::runtime_error("the sink cannot listen: " + caf::to_string(port.error()));
  }
  std::cout << "sink listening on 127.0.0.1:" << *port << " links " << link_port << std::endl;
  caf::scoped_actor self{system};
  self->wait_for(s);
  return 0;
}

// Median MB/s per size; `beside`: tensors on an activation link.
std::vector<std::pair<double, double>> transfer(bool quick, bool tls, bool beside, const std::string& link_host) {
  std::vector<std::string> command = ap::bench::self_command();
  command.insert(command.end(), {"nodes", "--sink", "--link-host", link_host});
  if (tls) command.insert(command.end(), {"--cert-dir", ap::test::certificate_dir()});
  else command.push_back("--insecure");
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
    self->request(remote, 120s, ap::ok_atom::value)
        .receive([&](std::int64_t, std::int64_t) {},
                 [&](caf::error& e) { throw std::runtime_error("sink: " + caf::to_string(e)); });
  };
  std::vector<std::pair<double, double>> results;
  for (const double mb : {1.0, 4.0, 16.0, 64.0}) {
    const auto floats = static_cast<std::size_t>(mb * 1024 * 1024 / sizeof(float));
    ap::forward_task t;
    t.data = ap::zeros({floats / 1024, 1024});
    std::fill(t.data.begin(), t.data.end(), 0.5f);
    const ap::tensor payload = t.data;
    const caf::message msg = caf::make_message(std::move(t));  // sent again and again: no copy here
    const int per_batch = std::max(2, static_cast<int>(64.0 / mb));  // at least 2: the 2nd overlaps the 1st
    const int batches = quick ? 3 : std::max(5, static_cast<int>(8 * 16.0 / (mb * per_batch)));
    std::vector<ap::tensor> outputs;  // made before the clock starts, as a stage's outputs are
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
    send_batch();  // warm-up
    std::vector<double> rates;
    for (int b = 0; b < batches; ++b) {
      make_outputs();
      const auto t0 = clock_type::now();
      send_batch();
      rates.push_back(mb * per_batch / seconds_since(t0));
    }
    std::sort(rates.begin(), rates.end());
    results.push_back({mb, rates[rates.size() / 2]});
    std::cout << "  " << mb << " MB tensors: median " << rates[rates.size() / 2] << " MB/s, best " << rates.back()
              << " MB/s (" << batches << " batches of " << per_batch << ")" << std::endl;
  }
  caf::anon_send_exit(remote, caf::exit_reason::user_shutdown);
  return results;
}

// The training's pipeline: `stages` stages of `threads` threads, batches of `batch` samples.
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

std::pair<double, double> training(const std::vector<std::string>& actorpipe, int steps, bool tls, const training_shape& shape) {
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
  // Both pipelines live side by side so blocks can alternate.
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

int run(ap::bench::arguments& args) {
  ap::keep_tensor_memory();
  const bool insecure = args.flag("--insecure");
  const std::string link_host = args.text("--link-host", "127.0.0.1");
  if (args.flag("--sink")) {
    const std::string cert_dir = args.text("--cert-dir", "");
    args.done();
    return run_sink(!insecure, cert_dir, link_host);
  }
  const bool tls = !insecure, quick = args.flag("--quick"), training_only = args.flag("--training-only");
  const int steps = static_cast<int>(args.integer("--steps", quick ? 10 : 30, 1));
  const std::string actorpipe_path = args.text("--actorpipe", "");
  const std::vector<std::string> actorpipe =
      actorpipe_path.empty() ? ap::bench::actorpipe_command() : std::vector<std::string>{actorpipe_path};
  training_shape shape;
  shape.stages = static_cast<int>(args.integer("--stages", 2, 1));
  shape.threads = static_cast<int>(args.integer("--threads", 1, 1));
  shape.batch = static_cast<int>(args.integer("--batch", 256, 8));  // 8 microbatches
  args.done();
  ap::set_compute_threads(1);
  std::cout << "bench_network nodes: " << (tls ? "mutual TLS" : "plain TCP (--insecure)") << ", load "
            << ap::bench::load_average() << std::endl;
  nlohmann::json out;
  out["bench"] = "bench_network nodes";
  out["transport"] = tls ? "tls" : "plain";
  if (!training_only) {
    std::cout << "activation transfer between two processes on loopback (forward_task, raw block):" << std::endl;
    for (const auto& [mb, rate] : transfer(quick, tls, false, link_host))
      out["transfer_mb_per_s"][std::to_string(static_cast<int>(mb)) + "MB"] = rate;
    std::cout << "the same on an activation link beside a ticketed message (Note [activations on data links]):" << std::endl;
    for (const auto& [mb, rate] : transfer(quick, tls, true, link_host))
      out["link_transfer_mb_per_s"][std::to_string(static_cast<int>(mb)) + "MB"] = rate;
  }
  std::cout << "training 784-2048-2048-2048-10, batch " << shape.batch << ", m=8, 1F1B, " << shape.stages
            << " stages of " << shape.threads << " thread" << (shape.threads == 1 ? "" : "s") << ", " << steps
            << " steps per block:" << std::endl;
  const auto [in_process, on_nodes] = training(actorpipe, steps, tls, shape);
  std::cout << "  median: one process " << in_process << " samples/s, " << shape.stages << " nodes " << on_nodes
            << " samples/s, ratio " << on_nodes / in_process << std::endl;
  out["stages"] = shape.stages, out["threads"] = shape.threads, out["batch"] = shape.batch;
  out["train_samples_per_s_in_process"] = in_process;
  out["train_samples_per_s_on_nodes"] = on_nodes;
  out["train_ratio"] = on_nodes / in_process;
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace nodes

// ---- allreduce: all-reduce bus bandwidth among 2 or more processes on loopback
// 1-64 MB of float32 with the ring or gloo (Note [collective backends]); this process is rank 0 and starts
// ranks 1..N-1, which exchange endpoints through files. Printed: the median bus bandwidth, 2 (n-1)/n * bytes /
// time (NCCL's definition). --host 127.0.0.2 makes the chunks cross the sockets (Note [one copy in the ring]).
namespace allreduce {

struct options {
  int rank = 0;
  int processes = 2;
  std::string backend = "ring";
  std::string exchange;
  int repeats = 10;
  std::size_t chunk_kb = ap::ring_group::default_chunk_bytes / 1024;
  std::size_t max_mb = 64;
  bool insecure = false;
  std::string cert_dir;            // ranks 1..N-1: the certificates rank 0 made
  std::string host = "127.0.0.1";  // where the ranks listen: 127.0.0.2 makes the links cross the sockets
};

// Leaves this rank's endpoint in the folder and reads every rank's, waiting up to `timeout`.
std::vector<std::string> exchange_endpoints(const options& o, const std::string& mine, std::chrono::seconds timeout) {
  namespace fs = std::filesystem;
  const fs::path dir = o.exchange;
  {
    std::ofstream out(dir / ("tmp" + std::to_string(o.rank)));
    out << mine;
  }
  fs::rename(dir / ("tmp" + std::to_string(o.rank)), dir / ("rank" + std::to_string(o.rank)));
  std::vector<std::string> all(static_cast<std::size_t>(o.processes));
  const auto deadline = clock_type::now() + timeout;
  for (int r = 0; r < o.processes; ++r) {
    const fs::path file = dir / ("rank" + std::to_string(r));
    while (!fs::exists(file)) {
      if (clock_type::now() > deadline) throw std::runtime_error("rank " + std::to_string(r) + " left no endpoint");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ifstream in(file);
    std::getline(in, all[static_cast<std::size_t>(r)]);
  }
  return all;
}

int run(ap::bench::arguments& args) {
  options o;
  o.rank = static_cast<int>(args.integer("--rank", 0));
  o.processes = static_cast<int>(args.integer("--processes", 2, 2));
  o.backend = args.text("--backend", "ring");
  o.exchange = args.text("--exchange", "");
  o.repeats = static_cast<int>(args.integer("--repeats", 10, 1));
  o.chunk_kb = static_cast<std::size_t>(args.integer("--chunk-kb", static_cast<long>(o.chunk_kb), 1));
  o.max_mb = static_cast<std::size_t>(args.integer("--max-mb", 64, 1));
  o.insecure = args.flag("--insecure");
  o.cert_dir = args.text("--cert-dir", "");
  o.host = args.text("--host", o.host);
  args.done();
  if (o.backend != "ring" && o.backend != "gloo")
    throw ap::bench::usage_error("--backend is ring or gloo, not " + o.backend);
  if (o.backend == "gloo") o.insecure = true;

  ap::keep_tensor_memory();  // as `actorpipe node` does
  caf::actor_system_config config;
  config.load<caf::io::middleman>();
  ap::add_message_types(config);
  ap::configure_scheduler(config);  // as a node's (Note [quiet scheduler])
  caf::actor_system system{config};
  const auto timeout = std::chrono::milliseconds(60000);
  ap::transport_security security = ap::test::insecure_transport();
  std::string cert_dir = o.cert_dir;
  if (!o.insecure) {
    if (cert_dir.empty()) cert_dir = ap::test::certificate_dir();
    security = {cert_dir + "/ca.pem", cert_dir + "/node.pem", cert_dir + "/node.key", false};
  }
  const auto backend = *ap::parse_collective_backend(o.backend);
  std::unique_ptr<ap::network_group> group;
  if (backend == ap::collective_backend::gloo)
    group = std::make_unique<ap::gloo_group>("bench", o.rank, o.processes, o.host, timeout);
  else
    group = std::make_unique<ap::ring_group>(system, "bench", o.rank, o.processes, ap::node_address{o.host, 0},
                                             security, timeout, o.chunk_kb * 1024);

  std::vector<std::unique_ptr<ap::test::child_process>> children;
  options mine = o;
  if (o.rank == 0) {
    char folder[] = "/tmp/actorpipe-allreduce-XXXXXX";
    if (!mkdtemp(folder)) throw std::runtime_error("cannot make a folder for the endpoints");
    mine.exchange = folder;
    for (int r = 1; r < o.processes; ++r) {
      std::vector<std::string> argv = ap::bench::self_command();
      argv.insert(argv.end(), {"allreduce", "--rank", std::to_string(r), "--processes", std::to_string(o.processes),
                               "--backend", o.backend, "--exchange", mine.exchange, "--repeats", std::to_string(o.repeats),
                               "--chunk-kb", std::to_string(o.chunk_kb), "--max-mb", std::to_string(o.max_mb), "--host", o.host});
      if (o.insecure) argv.push_back("--insecure");
      else argv.insert(argv.end(), {"--cert-dir", cert_dir});
      children.push_back(std::make_unique<ap::test::child_process>(argv));
    }
  }
  group->connect(exchange_endpoints(mine, group->endpoint(), std::chrono::seconds(30)));

  nlohmann::json sizes = nlohmann::json::array();
  // Note [one copy in the ring].
  const auto* ring = dynamic_cast<const ap::ring_group*>(group.get());
  const std::string chunks = ring && ring->copies_from_left() ? "copied in place" : "on the links";
  if (o.rank == 0)
    std::cout << "bench_network allreduce: " << o.processes << " processes on loopback ("
              << (backend == ap::collective_backend::gloo ? "gloo, plain TCP"
                  : o.insecure ? "ring group on data links, plain TCP: --insecure, chunks of " + std::to_string(o.chunk_kb) + " KB"
                               : "ring group on data links, mutual TLS, chunks of " + std::to_string(o.chunk_kb) + " KB")
              << "; chunks " << chunks << "), median of " << o.repeats << ", load " << ap::bench::load_average() << "\n"
              << "     MB   time ms   bus GB/s\n";
  for (std::size_t mb = 1; mb <= o.max_mb; mb *= 2) {
    ap::tensor t = ap::tensor::from_shape({mb * (1u << 20) / 4});
    for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i % 7) + static_cast<float>(o.rank);
    group->all_reduce(t).wait();  // warm-up, the sum checked (small whole numbers are exact in any order)
    const double n = o.processes;
    for (std::size_t i = 0; i < t.size(); ++i)
      if (t.data()[i] != static_cast<float>(n * static_cast<double>(i % 7) + n * (n - 1) / 2))
        throw std::runtime_error("rank " + std::to_string(o.rank) + ": the all-reduce of " + std::to_string(mb) + " MB gave " +
                                 std::to_string(t.data()[i]) + " at " + std::to_string(i));
    group->all_reduce(t).wait();
    std::vector<double> times;
    for (int r = 0; r < o.repeats; ++r) {
      const auto t0 = clock_type::now();
      group->all_reduce(t).wait();
      times.push_back(seconds_since(t0));
    }
    const double median = ap::bench::median(times);
    const double bus = 2 * (n - 1) / n * static_cast<double>(t.byte_size()) / median / 1e9;
    if (o.rank == 0) {
      std::printf("%7zu %9.2f %10.3f\n", mb, median * 1e3, bus);
      sizes.push_back({{"mb", mb}, {"median_ms", median * 1e3}, {"bus_gb_s", bus}});
    }
  }
  // Every rank stays until rank 0 has its last result: a rank that ended early would be a peer lost mid-collective.
  const std::filesystem::path done = std::filesystem::path(mine.exchange) / "done";
  if (o.rank != 0) {
    const auto deadline = clock_type::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(done) && clock_type::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return 0;
  }
  std::ofstream(done) << "done\n";
  std::cout << nlohmann::json{{"bench", "bench_network allreduce"}, {"backend", o.backend}, {"processes", o.processes},
                              {"transport", o.insecure ? "tcp" : "tls"}, {"chunk_kb", o.chunk_kb}, {"chunks", chunks},
                              {"sizes", sizes}}.dump()
            << std::endl;
  for (auto& child : children) child->wait_exit(ap::test::scaled(std::chrono::seconds(30)));
  std::filesystem::remove_all(mine.exchange);
  return 0;
}

}  // namespace allreduce

// ---- local-allreduce: all-reduce between D threads of one process (local_group)
// Bus bandwidth of large all-reduces and latency of small ones (200 a round), D = 2, 4, ... --max-d, timed
// barrier to barrier. "cpu": the whole process's CPU time per all-reduce.
namespace local_allreduce {

struct timing {
  double seconds = 0;      // wall, median over rounds
  double cpu_seconds = 0;  // CPU of the whole process, median over rounds
};

// C++17 has no std::barrier.
class barrier {
 public:
  explicit barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock lock(m_);
    const long gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  long generation_ = 0;
};

// Seconds per round of `per_round` all-reduces of `floats` floats on `d` ranks.
timing time_all_reduce(int d, std::size_t floats, int repeats, int per_round) {
  ap::local_group group("bench", d);
  barrier sync(d);
  std::vector<double> times, cpu;
  std::vector<std::thread> threads;
  for (int r = 0; r < d; ++r)
    threads.emplace_back([&, r] {
      auto member = group.member(r);
      ap::tensor t = ap::tensor::from_shape({floats});
      for (std::size_t i = 0; i < floats; ++i) t.data()[i] = static_cast<float>((i + r) % 13) * 0.25f;
      for (int round = 0; round <= repeats; ++round) {
        sync.arrive_and_wait();
        const auto t0 = clock_type::now();
        const double c0 = r == 0 ? ap::bench::process_cpu_seconds() : 0.0;
        for (int k = 0; k < per_round; ++k) member->all_reduce(t).wait();
        sync.arrive_and_wait();
        if (r == 0 && round > 0) {
          times.push_back(seconds_since(t0));
          cpu.push_back(ap::bench::process_cpu_seconds() - c0);
        }
      }
    });
  for (auto& t : threads) t.join();
  return {ap::bench::median(times), ap::bench::median(cpu)};
}

int run(ap::bench::arguments& args) {
  const int repeats = static_cast<int>(args.integer("--repeats", 5, 1));
  const int max_d = static_cast<int>(args.integer("--max-d", 8, 2));
  args.done();
  nlohmann::json rows = nlohmann::json::array();
  std::cout << "bench_network local-allreduce: between threads of one process (local_group), "
            << std::thread::hardware_concurrency() << " cores, median of " << repeats << ", load "
            << ap::bench::load_average() << "\n"
            << "  D      size   time ms   bus GB/s   cpu ms\n";
  for (int d = 2; d <= max_d; d *= 2)
    for (std::size_t mb : {1, 4, 16, 40}) {
      const std::size_t floats = mb * (1u << 20) / 4;
      const timing t = time_all_reduce(d, floats, repeats, 1);
      const double bus = static_cast<double>(floats * 4) * 2.0 * (d - 1) / d / t.seconds / 1e9;
      std::printf("%3d %6zu MB %9.2f %10.3f %8.2f\n", d, mb, t.seconds * 1e3, bus, t.cpu_seconds * 1e3);
      rows.push_back({{"d", d}, {"bytes", floats * 4}, {"median_ms", t.seconds * 1e3}, {"bus_gb_s", bus},
                      {"cpu_ms", t.cpu_seconds * 1e3}});
    }
  std::cout << "small all-reduces back to back (tensor-parallel activations), load " << ap::bench::load_average()
            << "\n  D      size   us each   cpu us each\n";
  const int per_round = 200;
  for (int d = 2; d <= max_d; d *= 2)
    for (std::size_t kb : {4, 64, 256}) {
      const std::size_t floats = kb * 1024 / 4;
      const timing t = time_all_reduce(d, floats, repeats, per_round);
      const double s = t.seconds / per_round, cpu = t.cpu_seconds / per_round;
      std::printf("%3d %6zu KB %9.1f %13.1f\n", d, kb, s * 1e6, cpu * 1e6);
      rows.push_back({{"d", d}, {"bytes", floats * 4}, {"us_each", s * 1e6}, {"cpu_us_each", cpu * 1e6}});
    }
  std::cout << nlohmann::json{{"bench", "bench_network local-allreduce"}, {"load", ap::bench::load_average()},
                              {"rows", rows}}.dump()
            << std::endl;
  return 0;
}

}  // namespace local_allreduce

// ---- tcp: the ceiling of loopback TCP between two processes, with nothing of ours in the way
// A forked child receives N MB messages with plain send()/recv() on one connection, --total-mb MB per size.
namespace tcp {

// Seconds from the first send to the child's answer after the last.
double transfer(std::size_t bytes, int count) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 1) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) != 0)
    throw std::runtime_error(std::string("cannot listen on loopback: ") + std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child == 0) {
    const int c = accept(listener, nullptr, nullptr);
    std::vector<char> in(bytes, 0);
    for (int m = 0; m < count; ++m)
      for (std::size_t got = 0; got < bytes;) {
        const ssize_t k = recv(c, in.data() + got, bytes - got, 0);
        if (k <= 0) _exit(1);
        got += static_cast<std::size_t>(k);
      }
    const char done = 'x';
    _exit(send(c, &done, 1, 0) == 1 ? 0 : 1);
  }
  close(listener);
  const int c = socket(AF_INET, SOCK_STREAM, 0);
  if (c < 0 || connect(c, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    throw std::runtime_error(std::string("cannot connect on loopback: ") + std::strerror(errno));
  std::vector<char> out(bytes, 1);
  const auto t0 = clock_type::now();
  for (int m = 0; m < count; ++m)
    for (std::size_t sent = 0; sent < bytes;) {
      const ssize_t k = send(c, out.data() + sent, bytes - sent, 0);
      if (k <= 0) throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(k);
    }
  char done = 0;
  if (recv(c, &done, 1, 0) != 1) throw std::runtime_error("the receiver did not answer");
  const double seconds = seconds_since(t0);
  close(c);
  int status = 0;
  waitpid(child, &status, 0);
  return seconds;
}

int run(ap::bench::arguments& args) {
  const auto total_mb = static_cast<std::size_t>(args.integer("--total-mb", 1024, 1));
  args.done();
  std::printf("bench_network tcp: loopback TCP between two processes (plain send/recv), load %s\n     MB   GB/s\n",
              ap::bench::load_average().c_str());
  nlohmann::json sizes = nlohmann::json::array();
  for (std::size_t mb : {1, 4, 16, 64}) {
    const std::size_t bytes = mb << 20;
    const int count = static_cast<int>(std::max<std::size_t>(4, total_mb / mb));
    const double gb_s = static_cast<double>(bytes) * count / transfer(bytes, count) / 1e9;
    std::printf("%7zu %6.2f\n", mb, gb_s);
    sizes.push_back({{"mb", mb}, {"gb_s", gb_s}});
  }
  std::printf("%s\n", nlohmann::json{{"bench", "bench_network tcp"}, {"sizes", sizes}}.dump().c_str());
  return 0;
}

}  // namespace tcp

}  // namespace

int main(int argc, char** argv) {
  return ap::bench::run_mode(
      argc, argv, "bench_network",
      {{"nodes", "[--quick] [--steps N] [--insecure] [--training-only] [--stages P] [--threads T] [--batch B] "
                 "[--link-host H] [--actorpipe PATH]",
        "activations between two processes, and training on node processes against one process", nodes::run},
       {"allreduce", "[--backend ring|gloo] [--processes N] [--insecure] [--repeats N] [--chunk-kb K] [--max-mb M] [--host H]",
        "all-reduce bus bandwidth among processes on loopback (scripts/bench_allreduce.sh: beside Open MPI)",
        allreduce::run},
       {"local-allreduce", "[--repeats N] [--max-d D]", "all-reduce between threads of one process", local_allreduce::run},
       {"tcp", "[--total-mb T]", "loopback TCP between two processes, nothing of ours in the way", tcp::run}});
}

// bench_allreduce: all-reduce bus bandwidth among 2 or more processes on loopback, for 1-64 MB of float32, with
// either backend of the groups across processes (Note [collective backends]): our ring on its data links
// (collective/ring_group.hpp) or gloo (collective/gloo_group.hpp).
//
// This program is rank 0; it starts itself again as ranks 1..N-1 (--rank r). The ranks hand each other their
// endpoints through files in a fresh folder (--exchange), as a coordinator would over its connections. Each size
// runs 2 warm-up all-reduces, then --repeats timed ones on rank 0 (each waits for its result, so the times are
// back to back). Bus bandwidth = 2 (n-1)/n * bytes / time (NCCL's definition), MB = 2^20 bytes; the median of the
// repeats is printed. scripts/bench_allreduce.sh runs this next to Open MPI's MPI_Allreduce on the same sizes
// and process counts (bench/mpi_allreduce.c).
//
// Transport (Note [ring security]): the ring uses mutual TLS by default (test certificates made at start by
// scripts/make_test_certs.sh); --insecure for plain TCP, the same transport as MPI's btl tcp. gloo is plain TCP
// only (--insecure is implied).
//
// Where: the ranks listen on 127.0.0.1 (--host), so a ring's chunks are copied out of the left neighbour's memory
// (Note [one copy in the ring]); with --host 127.0.0.2 each link's connecting end is 127.0.0.1, another address,
// and the chunks cross the sockets as between machines.
//
// Usage: bench_allreduce [--backend ring|gloo] [--processes N] [--insecure] [--repeats N] [--chunk-kb K]
//                        [--max-mb M] [--host H]
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
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
#include "collective/gloo_group.hpp"
#include "collective/ring_group.hpp"
#include "actors/message_types.hpp"
#include "actors/scheduler_config.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  int rank = 0;
  int processes = 2;
  std::string backend = "ring";
  std::string exchange;  // the folder where ranks leave their endpoints
  int repeats = 10;
  std::size_t chunk_kb = ap::ring_group::default_chunk_bytes / 1024;
  std::size_t max_mb = 64;
  bool insecure = false;
  std::string cert_dir;  // rank 1: the certificates rank 0 made
  std::string host = "127.0.0.1";  // where the ranks listen: 127.0.0.2 makes the links cross the sockets
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--rank") o.rank = std::stoi(next());
    else if (a == "--processes") o.processes = std::stoi(next());
    else if (a == "--backend") o.backend = next();
    else if (a == "--exchange") o.exchange = next();
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--chunk-kb") o.chunk_kb = std::stoul(next());
    else if (a == "--max-mb") o.max_mb = std::stoul(next());
    else if (a == "--insecure") o.insecure = true;
    else if (a == "--cert-dir") o.cert_dir = next();
    else if (a == "--host") o.host = next();
    else throw std::invalid_argument("unknown flag " + a);
  }
  if (o.repeats < 1) throw std::invalid_argument("--repeats must be positive");
  if (o.processes < 2) throw std::invalid_argument("--processes must be at least 2");
  if (o.backend != "ring" && o.backend != "gloo")  // by-size is the two, each on its sizes: measure each
    throw std::invalid_argument("--backend is ring or gloo, not " + o.backend);
  if (o.backend == "gloo") o.insecure = true;
  return o;
}

// Leaves this rank's endpoint in the folder (written whole, then renamed) and reads every rank's, waiting up to
// `timeout` for the others.
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

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  ap::keep_tensor_memory();  // as `actorpipe node` does: a chunk's buffers are reused, not faulted in again
  caf::actor_system_config config;
  config.load<caf::io::middleman>();
  ap::add_message_types(config);
  ap::configure_scheduler(config);  // as a node's (Note [quiet scheduler]): CAF's default workers sleep-poll every 50 us
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
      argv.insert(argv.end(), {"--rank", std::to_string(r), "--processes", std::to_string(o.processes), "--backend",
                               o.backend, "--exchange", mine.exchange, "--repeats", std::to_string(o.repeats),
                               "--chunk-kb", std::to_string(o.chunk_kb), "--max-mb", std::to_string(o.max_mb), "--host", o.host});
      if (o.insecure) argv.push_back("--insecure");
      else argv.insert(argv.end(), {"--cert-dir", cert_dir});
      children.push_back(std::make_unique<ap::test::child_process>(argv));
    }
  }
  group->connect(exchange_endpoints(mine, group->endpoint(), std::chrono::seconds(30)));

  nlohmann::json sizes = nlohmann::json::array();
  // Note [one copy in the ring]: between processes of one machine the chunks are copied out of the sender's memory.
  const auto* ring = dynamic_cast<const ap::ring_group*>(group.get());
  const std::string chunks = ring && ring->copies_from_left() ? "copied in place" : "on the links";
  if (o.rank == 0)
    std::cout << "all-reduce among " << o.processes << " processes on loopback ("
              << (backend == ap::collective_backend::gloo ? "gloo, plain TCP"
                  : o.insecure ? "ring group on data links, plain TCP: --insecure, chunks of " + std::to_string(o.chunk_kb) + " KB"
                               : "ring group on data links, mutual TLS, chunks of " + std::to_string(o.chunk_kb) + " KB")
              << "; chunks " << chunks << "), median of " << o.repeats << ", load " << ap::bench::load_average() << "\n"
              << "     MB   time ms   bus GB/s\n";
  for (std::size_t mb = 1; mb <= o.max_mb; mb *= 2) {
    ap::tensor t = ap::tensor::from_shape({mb * (1u << 20) / 4});
    for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i % 7) + static_cast<float>(o.rank);
    group->all_reduce(t).wait();  // a warm-up, and the sum checked: small whole numbers, exact in any order
    const double n_ranks = o.processes;
    for (std::size_t i = 0; i < t.size(); ++i)
      if (t.data()[i] != static_cast<float>(n_ranks * static_cast<double>(i % 7) + n_ranks * (n_ranks - 1) / 2))
        throw std::runtime_error("rank " + std::to_string(o.rank) + ": the all-reduce of " + std::to_string(mb) + " MB gave " +
                                 std::to_string(t.data()[i]) + " at " + std::to_string(i));
    group->all_reduce(t).wait();
    std::vector<double> times;
    for (int r = 0; r < o.repeats; ++r) {
      const auto t0 = clock_type::now();
      group->all_reduce(t).wait();
      times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    const double median = ap::bench::median(times);
    const double n = o.processes;
    const double bus = 2 * (n - 1) / n * static_cast<double>(t.byte_size()) / median / 1e9;
    if (o.rank == 0) {
      std::printf("%7zu %9.2f %10.3f\n", mb, median * 1e3, bus);
      sizes.push_back({{"mb", mb}, {"median_ms", median * 1e3}, {"bus_gb_s", bus}});
    }
  }
  // Every rank stays until rank 0 has its last result: a rank that ended early would be a peer gone to a
  // collective still finishing elsewhere.
  const std::filesystem::path done = std::filesystem::path(mine.exchange) / "done";
  if (o.rank != 0) {
    const auto deadline = clock_type::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(done) && clock_type::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (o.rank == 0) {
    std::ofstream(done) << "done\n";
    std::cout << nlohmann::json{{"bench", "allreduce"}, {"backend", o.backend}, {"processes", o.processes},
                                {"transport", o.insecure ? "tcp" : "tls"}, {"chunk_kb", o.chunk_kb}, {"chunks", chunks},
                                {"sizes", sizes}}.dump()
              << std::endl;
    for (auto& child : children) child->wait_exit(ap::test::scaled(std::chrono::seconds(30)));
    std::filesystem::remove_all(mine.exchange);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_allreduce: " << e.what() << "\n";
  return 1;
}

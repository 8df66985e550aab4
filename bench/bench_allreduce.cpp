// bench_allreduce: all-reduce bus bandwidth between 2 processes on loopback, over the ring group
// (collective/ring_group.hpp, CAF's middleman over TCP), for 1-64 MB of float32.
//
// This program is rank 0; it starts itself again as rank 1 (--rank 1). Each size runs 2 warm-up
// all-reduces, then --repeats timed ones on rank 0 (each waits for its result, so the times are
// back to back). Bus bandwidth = 2 (n-1)/n * bytes / time (NCCL's definition; = bytes / time for n = 2),
// MB = 2^20 bytes; the median of the repeats is printed. scripts/bench_allreduce.sh runs this next to
// Open MPI's MPI_Allreduce on the same sizes (bench/mpi_allreduce.c).
//
// Transport (Note [ring security]): mutual TLS by default (test certificates made at start by
// scripts/make_test_certs.sh); --insecure for plain TCP, the same transport as MPI's btl tcp.
//
// Usage: bench_allreduce [--insecure] [--repeats N] [--chunk-kb K] [--max-mb M]
#include <unistd.h>

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
#include "collective/ring_group.hpp"
#include "actors/message_types.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

std::string this_program() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  path[n] = '\0';
  return path;
}

struct options {
  int rank = 0;
  int peer_port = 0;
  int repeats = 10;
  std::size_t chunk_kb = 1024;
  std::size_t max_mb = 64;
  bool insecure = false;
  std::string cert_dir;  // rank 1: the certificates rank 0 made
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
    else if (a == "--peer-port") o.peer_port = std::stoi(next());
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--chunk-kb") o.chunk_kb = std::stoul(next());
    else if (a == "--max-mb") o.max_mb = std::stoul(next());
    else if (a == "--insecure") o.insecure = true;
    else if (a == "--cert-dir") o.cert_dir = next();
    else throw std::invalid_argument("unknown flag " + a);
  }
  if (o.repeats < 1) throw std::invalid_argument("--repeats must be positive");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  ap::keep_tensor_memory();  // as `actorpipe node` does: a chunk's buffers are reused, not faulted in again
  caf::actor_system_config config;
  config.load<caf::io::middleman>();
  ap::add_message_types(config);
  caf::actor_system system{config};
  const auto timeout = std::chrono::milliseconds(60000);
  ap::transport_security security = ap::test::insecure_transport();
  std::string cert_dir = o.cert_dir;
  if (!o.insecure) {
    if (cert_dir.empty()) cert_dir = ap::test::certificate_dir();
    security = {cert_dir + "/ca.pem", cert_dir + "/node.pem", cert_dir + "/node.key", false};
  }
  ap::ring_group group(system, "bench", o.rank, 2, ap::node_address{"127.0.0.1", 0}, security, timeout,
                       o.chunk_kb * 1024);

  std::unique_ptr<ap::test::child_process> child;
  std::vector<ap::node_address> addresses(2, ap::node_address{"127.0.0.1", 0});
  if (o.rank == 0) {
    std::vector<std::string> argv{this_program(), "--rank", "1", "--peer-port", std::to_string(group.port()),
                                  "--repeats", std::to_string(o.repeats), "--chunk-kb", std::to_string(o.chunk_kb),
                                  "--max-mb", std::to_string(o.max_mb)};
    if (o.insecure) argv.push_back("--insecure");
    else argv.insert(argv.end(), {"--cert-dir", cert_dir});
    child = std::make_unique<ap::test::child_process>(argv);
    const std::string line = child->read_line(std::chrono::seconds(10));
    addresses[1].port = static_cast<std::uint16_t>(std::stoi(line.substr(line.find(' ') + 1)));
  } else {
    std::cout << "port " << group.port() << std::endl;
    addresses[0].port = static_cast<std::uint16_t>(o.peer_port);
  }
  group.connect(addresses);

  nlohmann::json sizes = nlohmann::json::array();
  if (o.rank == 0)
    std::cout << "all-reduce between 2 processes on loopback (ring group over CAF, "
              << (o.insecure ? "plain TCP: --insecure" : "mutual TLS") << "), chunks of " << o.chunk_kb
              << " KB, median of " << o.repeats << ", load " << ap::bench::load_average() << "\n"
              << "     MB   time ms   bus GB/s\n";
  for (std::size_t mb = 1; mb <= o.max_mb; mb *= 2) {
    ap::tensor t = ap::tensor::from_shape({mb * (1u << 20) / 4});
    for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i % 7) + static_cast<float>(o.rank);
    for (int w = 0; w < 2; ++w) group.all_reduce(t).wait();
    std::vector<double> times;
    for (int r = 0; r < o.repeats; ++r) {
      const auto t0 = clock_type::now();
      group.all_reduce(t).wait();
      times.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    const double median = ap::bench::median(times);
    const double bus = static_cast<double>(t.byte_size()) / median / 1e9;  // 2 (n-1)/n = 1 for n = 2
    if (o.rank == 0) {
      std::printf("%7zu %9.2f %10.3f\n", mb, median * 1e3, bus);
      sizes.push_back({{"mb", mb}, {"median_ms", median * 1e3}, {"bus_gb_s", bus}});
    }
  }
  if (o.rank == 0) {
    std::cout << nlohmann::json{{"bench", "allreduce_ring_caf"}, {"processes", 2},
                                {"transport", o.insecure ? "tcp" : "tls"}, {"chunk_kb", o.chunk_kb},
                                {"sizes", sizes}}.dump()
              << std::endl;
    child->wait_exit(std::chrono::seconds(30));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_allreduce: " << e.what() << "\n";
  return 1;
}

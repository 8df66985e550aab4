#include "tensor/compute.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "tensor/elementwise.hpp"

// From OpenBLAS, declared here: <cblas.h> clashes with xtensor-blas.
extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));  // absent from a serial OpenBLAS

namespace ap {
namespace {

// Note [OpenBLAS's idle pool]: Debian's OpenBLAS starts a pool of one spinning thread per core when loaded. It
// runs here one thread per call, so the pool is stopped when this library is loaded; set_compute_threads calls
// openblas_set_num_threads (which restarts it) only if something changed it from 1.
const bool openblas_pool_stopped = [] {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_) blas_thread_shutdown_();
  return true;
}();

// Note [one level of teams]: an op's parallel loop may call oneDNN, which opens a region inside; libgomp would run
// that on a new team, creating and ending a thread every call. So only one level of teams is active (the outer
// loop already has every thread of the rank), and a loop of one iteration runs outside any region.
const bool one_level_of_teams = [] {
  omp_set_max_active_levels(1);
  return true;
}();

compute_backend initial_backend() {
  const char* env = std::getenv("AP_COMPUTE");
  if (env && *env) return parse_compute_backend(env);
  return onednn_available() ? compute_backend::onednn : compute_backend::reference;
}

std::atomic<compute_backend>& backend_setting() {
  static std::atomic<compute_backend> backend{initial_backend()};  // AP_COMPUTE is read once
  return backend;
}

}  // namespace

bool onednn_available() {
#ifdef AP_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

compute_backend current_compute_backend() { return backend_setting().load(std::memory_order_relaxed); }

void set_compute_backend(compute_backend backend) {
  if (backend == compute_backend::onednn && !onednn_available())
    throw std::invalid_argument("compute backend onednn: this build has no oneDNN (built with -DAP_COMPUTE=reference)");
  backend_setting().store(backend, std::memory_order_relaxed);
}

std::string compute_backend_name(compute_backend backend) {
  return backend == compute_backend::onednn ? "onednn" : "reference";
}

compute_backend parse_compute_backend(const std::string& text) {
  if (text == "onednn") {
    if (!onednn_available())
      throw std::invalid_argument("AP_COMPUTE=onednn: this build has no oneDNN (built with -DAP_COMPUTE=reference)");
    return compute_backend::onednn;
  }
  if (text == "reference") return compute_backend::reference;
  throw std::invalid_argument("compute backend '" + text + "': expected onednn or reference");
}

namespace {
thread_local bool compute_rank_thread = false;  // Note [parallel tensor copies]
}  // namespace

bool is_compute_rank_thread() { return compute_rank_thread; }

void set_compute_threads(int threads) {
  if (threads < 1) throw std::invalid_argument("set_compute_threads: need at least 1 thread, got " + std::to_string(threads));
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  // Fewer threads: release the team outside a parallel region (inside one libgomp refuses) (Note [idle teams]).
  if (threads < before && !omp_in_parallel()) omp_pause_resource(omp_pause_soft, omp_get_initial_device());
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);  // process-wide; Note [OpenBLAS's idle pool]
  compute_rank_thread = true;
}

int compute_threads() { return omp_get_max_threads(); }

void run_ops_serially() { omp_set_num_threads(1); }  // not a compute rank: copies stay one memcpy too

void use_compute_cores(const compute_cores& c) {
  if (!compute_rank_thread || compute_threads() != c.threads) set_compute_threads(c.threads);  // also after a direct set
  thread_local std::vector<int> pinned;  // the cores this thread was last pinned to
  if (c.cores.empty() || c.cores == pinned) return;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int core : c.cores) CPU_SET(core, &mask);
  if (const int error = pthread_setaffinity_np(pthread_self(), sizeof mask, &mask); error != 0) {
    std::string list;
    for (int core : c.cores) list += (list.empty() ? "" : ",") + std::to_string(core);
    throw std::runtime_error("cannot pin a compute rank to cores " + list + ": error " + std::to_string(error));
  }
  pinned = c.cores;
}

int single_process_threads() { return std::max(1, omp_get_num_procs()); }

}  // namespace ap

/* mpi_allreduce: Open MPI's MPI_Allreduce (sum of float32) bus bandwidth for 1-64 MB, the peer figure for
   `bench_network allreduce`. Not part of the CMake build (Open MPI is a benchmark-only dependency):
   scripts/bench_allreduce.sh compiles it with mpicc and runs it with mpirun -np N. Same method as
   `bench_network allreduce`: 2 warm-ups, then the median of REPEATS back-to-back calls on rank 0;
   bus GB/s = 2 (n-1)/n * bytes / time, MB = 2^20 bytes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int compare(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int repeats = argc > 1 ? atoi(argv[1]) : 10;
  const size_t max_mb = argc > 2 ? (size_t)atoi(argv[2]) : 64;
  double* times = malloc(sizeof(double) * (size_t)repeats);
  if (rank == 0) printf("     MB   time ms   bus GB/s\n");
  for (size_t mb = 1; mb <= max_mb; mb *= 2) {
    const size_t n = mb * (1u << 20) / 4;
    float* in = malloc(n * sizeof(float));
    float* out = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i) in[i] = (float)(i % 7) + (float)rank;
    for (int w = 0; w < 2; ++w) MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int r = 0; r < repeats; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[r] = MPI_Wtime() - t0;
    }
    qsort(times, (size_t)repeats, sizeof(double), compare);
    const double median = repeats % 2 ? times[repeats / 2] : 0.5 * (times[repeats / 2 - 1] + times[repeats / 2]);
    const double bus = 2.0 * (size - 1) / size * (double)(n * sizeof(float)) / median / 1e9;
    if (rank == 0) printf("%7zu %9.2f %10.3f\n", mb, median * 1e3, bus);
    free(in);
    free(out);
  }
  free(times);
  MPI_Finalize();
  return 0;
}

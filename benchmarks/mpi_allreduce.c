/* MPICH's own all_reduce speed, without PyTorch: the ceiling for an --impl mpi backend.
 *
 *   mpicc -O2 -o /tmp/mpi_allreduce benchmarks/mpi_allreduce.c
 *   mpirun -n 2 /tmp/mpi_allreduce
 *
 * Times MPI_Iallreduce + MPI_Wait in place on float32 buffers of 1, 4, 16 and
 * 64 MiB, as the generated backend calls it, and prints nccl-tests' busbw.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iterations = 10;
  for (int mib = 1; mib <= 64; mib *= 4) {
    const size_t count = (size_t)mib << 18;
    float* buffer = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; ++i) {
      buffer[i] = 1.0f;
    }
    MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    seconds = (MPI_Wtime() - seconds) / iterations;
    const double busbw = count * sizeof(float) / seconds / 1e9 * 2.0 * (size - 1) / size;
    if (rank == 0) {
      printf("%2d MiB  %10.1f us  busbw %.3f GB/s\n", mib, seconds * 1e6, busbw);
    }
    free(buffer);
  }
  MPI_Finalize();
  return 0;
}

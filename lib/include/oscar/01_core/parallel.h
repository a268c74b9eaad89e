// parallel.h: a parallel loop over chunks of fine-grained work (a decode step's weight-row blocks, attention
// heads), built for steps of a fraction of a millisecond on busy machines. Threads claim chunks one at a
// time from a shared counter and the caller waits only for chunks that were claimed, never for a helper
// thread that the OS has not yet scheduled: on a machine loaded by other processes, an OpenMP region's join
// barrier waits a scheduler time slice for such a thread, hundreds of times per token. Helpers spin briefly
// after a loop (the next one of the same step usually follows at once), then sleep.
// Contract: fn(i) runs exactly once for each i in [0, n), on the calling thread or a helper, chunks in any
// order and concurrently; each call must write disjoint memory, so the result does not depend on which
// thread ran what. The loop returns when every chunk has finished, or after a chunk threw, every started one
// (the others may be skipped); the first exception thrown is then rethrown on the caller. Helpers: omp_get_max_threads() - 1 (OMP_NUM_THREADS), created on first use.
// A call from inside a parallel_chunks chunk or an OpenMP parallel region, or while another thread is
// running a loop, runs serially on the caller.
#pragma once
#include <cstdint>
#include <functional>

namespace oscar {

void parallel_chunks(int64_t n, const std::function<void(int64_t)>& fn);
// Threads a loop may use (the caller included).
int parallel_threads();
// Every tool's --threads N: the threads of OpenMP regions and of parallel_chunks (call before the first loop).
void set_threads(int n);

}  // namespace oscar

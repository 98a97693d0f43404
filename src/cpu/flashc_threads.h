// flashc_threads.h -- the CPU backend's small thread pool (pthreads, no OpenMP).
//
// One pool per flashc_ctx, created in the CPU backend's init with ctx->n_threads threads in all:
// the thread that calls flashc__pool_run is thread 0 and works too, so the pool starts
// n_threads - 1 workers (none for n_threads = 1, where run is a plain loop).
//
// flashc__pool_run(pool, fn, arg, n_chunks) calls fn(arg, chunk, thread) once for every chunk in
// [0, n_chunks) and returns when all calls have returned. Threads claim chunks one at a time from
// an atomic counter, so callers make about 4x as many chunks as threads (or more) and a slow
// chunk (a causal block near the diagonal's long end, a descheduled thread) does not hold the
// others up. `thread` in [0, n_threads) names the calling thread's private scratch; which thread
// runs which chunk varies from run to run, so results must never depend on it.
//
// Idle workers sleep on a condition variable (no spinning: the cores may be shared).
// A pool is used by one thread at a time (a flashc_ctx belongs to one calling thread).
#ifndef FLASHC_THREADS_H
#define FLASHC_THREADS_H

#include <stdint.h>

typedef struct flashc_pool flashc_pool;
typedef void (*flashc_pool_fn)(void *arg, int64_t chunk, int thread);

// NULL if a thread or the pool's memory cannot be had.
flashc_pool *flashc__pool_create(int n_threads);
void flashc__pool_free(flashc_pool *pool); // accepts NULL
int flashc__pool_size(const flashc_pool *pool);
void flashc__pool_run(flashc_pool *pool, flashc_pool_fn fn, void *arg, int64_t n_chunks);

#endif // FLASHC_THREADS_H

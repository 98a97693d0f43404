// flashc_threads.c -- the CPU backend's thread pool: n_threads - 1 sleeping workers plus the caller,
// chunks claimed from an atomic counter. See flashc_threads.h for the contract.
#include "flashc_threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct worker {
    struct flashc_pool *pool;
    int id; // 1 .. n_threads - 1; the caller of run is 0
} worker;

struct flashc_pool {
    int n_threads;
    int n_started; // workers actually running (for a clean free after a failed create)
    pthread_t *threads;
    worker *workers;

    pthread_mutex_t mu;
    pthread_cond_t wake; // workers wait here for a new generation
    pthread_cond_t done; // the caller waits here for busy == 0
    uint64_t generation; // bumped by every run; a worker runs each generation once
    int busy;            // workers not yet finished with the current generation
    int stop;

    // the current run, written under mu before the generation is bumped
    flashc_pool_fn fn;
    void *arg;
    int64_t n_chunks;
    atomic_int_fast64_t next_chunk;
};

// Claim chunks until none is left.
static void work(flashc_pool *pool, int thread) {
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&pool->next_chunk, 1, memory_order_relaxed);
        if (c >= pool->n_chunks) return;
        pool->fn(pool->arg, c, thread);
    }
}

static void *worker_main(void *p) {
    worker *w = p;
    flashc_pool *pool = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (pool->generation == seen && !pool->stop) pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->stop) break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->mu);
        work(pool, w->id);
        pthread_mutex_lock(&pool->mu);
        if (--pool->busy == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
    return NULL;
}

flashc_pool *flashc__pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    flashc_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    atomic_init(&pool->next_chunk, 0);
    if (pthread_mutex_init(&pool->mu, NULL)) {
        free(pool);
        return NULL;
    }
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    if (n_threads > 1) {
        pool->threads = calloc((size_t)n_threads - 1, sizeof *pool->threads);
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->threads || !pool->workers) {
            flashc__pool_free(pool);
            return NULL;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            pool->workers[i].pool = pool;
            pool->workers[i].id = i + 1;
            if (pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i])) {
                flashc__pool_free(pool);
                return NULL;
            }
            pool->n_started++;
        }
    }
    return pool;
}

void flashc__pool_free(flashc_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    pool->stop = 1;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool->workers);
    free(pool);
}

int flashc__pool_size(const flashc_pool *pool) { return pool->n_threads; }

void flashc__pool_run(flashc_pool *pool, flashc_pool_fn fn, void *arg, int64_t n_chunks) {
    if (n_chunks <= 0) return;
    if (pool->n_threads == 1 || n_chunks == 1) { // waking workers would cost more than it gives
        for (int64_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->n_chunks = n_chunks;
    atomic_store_explicit(&pool->next_chunk, 0, memory_order_relaxed);
    pool->busy = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    work(pool, 0);

    pthread_mutex_lock(&pool->mu);
    while (pool->busy > 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}

#include "util/pool.h"

#include "util/log.h"  // st_now

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

// Workers spin briefly on the generation counter before sleeping on the condition variable: decode issues a few
// hundred small jobs per token, and a futex wake-up per job costs more than the job itself.
#define SPIN_ITERATIONS 20000

struct st_pool {
    int n_threads;                 // including the caller
    pthread_t *workers;            // n_threads - 1
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    _Atomic uint64_t generation;   // bumped for each st_pool_run
    _Atomic int n_busy;            // workers still inside the current generation
    int n_sleeping;                // workers blocked on `wake` (under lock)
    _Atomic int stop;
    _Atomic double hold_s;         // workers spin at least this long after a job before sleeping (st_pool_set_spin)
    // current job
    st_task_fn task;
    void *ud;
    int64_t n_tasks;
    _Atomic int64_t next;
};

typedef struct {
    st_pool *pool;
    int index;
} worker_arg;

static void drain(st_pool *p, int thread) {
    for (;;) {
        int64_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n_tasks) break;
        p->task(p->ud, i, thread);
    }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    st_pool *p = wa->pool;
    int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        const double hold = atomic_load_explicit(&p->hold_s, memory_order_relaxed);
        const double until = hold > 0 ? st_now() + hold : 0;
        for (int i = 0; atomic_load(&p->generation) == seen && !p->stop; i++) {
            cpu_relax();
            if (i >= SPIN_ITERATIONS && (until == 0 || ((i & 255) == 0 && st_now() > until))) break;
        }
        if (atomic_load(&p->generation) == seen) {
            pthread_mutex_lock(&p->lock);
            p->n_sleeping++;
            while (!p->stop && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->lock);
            p->n_sleeping--;
            pthread_mutex_unlock(&p->lock);
        }
        if (p->stop) break;
        seen = atomic_load(&p->generation);
        drain(p, index);
        if (atomic_fetch_sub(&p->n_busy, 1) == 1) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
    return NULL;
}

int st_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

st_pool *st_pool_create(int n_threads) {
    if (n_threads <= 0) n_threads = st_cpu_count();
    st_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->workers[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i;  // run with what we have
            break;
        }
    }
    return p;
}

void st_pool_destroy(st_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    atomic_fetch_add(&p->generation, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i - 1], NULL);
    free(p->workers);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int st_pool_threads(const st_pool *p) { return p->n_threads; }

void st_pool_set_spin(st_pool *p, double seconds) { atomic_store(&p->hold_s, seconds > 0 ? seconds : 0); }

void st_pool_run(st_pool *p, int64_t n_tasks, st_task_fn task, void *ud) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++) task(ud, i, 0);
        return;
    }
    p->task = task;
    p->ud = ud;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->n_busy, p->n_threads - 1);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->generation, 1);  // publishes the job (seq_cst) to spinning workers
    if (p->n_sleeping) pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    drain(p, 0);
    for (int i = 0; i < SPIN_ITERATIONS && atomic_load(&p->n_busy) > 0; i++) cpu_relax();
    if (atomic_load(&p->n_busy) > 0) {
        pthread_mutex_lock(&p->lock);
        while (atomic_load(&p->n_busy) > 0) pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
}

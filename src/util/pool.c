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

// A job's tasks are claimed from one 64-bit word, [n: 24 bits][next index: 24 bits], by a fetch-and-add: a claim
// takes an index of the job the word describes at that instant (a late worker takes the current job's, or none), and
// the fields below belong to that job until all its n tasks are done. So the caller waits for its tasks, not for
// every worker to look in: a worker the OS has not scheduled since the job was published (more threads than free
// cores: other processes, a busy desktop) is not waited for; it finds the work taken when it runs. Waiting for every
// worker made the demo's decode 5-8x slower beside one other busy process on a 2-core host (2026-12-01j). Failed
// claims push the index past n by at most one per thread and job, hence the headroom below CLAIM_MAX_N; a larger job
// runs as several.
#define ST_POOL_MAX_THREADS 4096
#define CLAIM_BITS 24
#define CLAIM_MASK ((uint64_t)((1 << CLAIM_BITS) - 1))
#define CLAIM_MAX_N ((int64_t)CLAIM_MASK - ST_POOL_MAX_THREADS)
#define CLAIM_IDX(c) ((int64_t)((c) & CLAIM_MASK))
#define CLAIM_N(c) ((int64_t)(((c) >> CLAIM_BITS) & CLAIM_MASK))

struct st_pool {
    int n_threads;                 // including the caller
    pthread_t *workers;            // n_threads - 1
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    _Atomic uint64_t generation;   // bumped for each job (wakes the workers)
    _Atomic int stop;
    _Atomic double hold_s;         // workers spin at least this long after a job before sleeping (st_pool_set_spin)
    int caller_waiting;            // the caller sleeps on `done` (under lock)
    // current job: written by the caller before it publishes `claim`; a worker reads them only after claiming one of
    // the job's tasks, and the caller does not change them before all of that job's tasks are done
    st_task_fn task;
    void *ud;
    int64_t base;                  // task index of the job's first task (jobs of more than CLAIM_MAX_N tasks)
    _Atomic uint64_t claim;        // see above
    _Atomic int64_t n_done;        // tasks of the current job finished
};

typedef struct {
    st_pool *pool;
    int index;
} worker_arg;

// Runs tasks of the job currently in p->claim until a claim finds none left.
static void drain(st_pool *p, int thread) {
    for (;;) {
        const uint64_t c = atomic_fetch_add(&p->claim, 1);
        const int64_t n = CLAIM_N(c);
        if (CLAIM_IDX(c) >= n) return;
        p->task(p->ud, p->base + CLAIM_IDX(c), thread);
        if (atomic_fetch_add(&p->n_done, 1) + 1 == n) {  // the job's last task: wake a sleeping caller
            pthread_mutex_lock(&p->lock);
            if (p->caller_waiting) pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
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
            while (!p->stop && atomic_load(&p->generation) == seen) pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (p->stop) break;
        seen = atomic_load(&p->generation);
        drain(p, index);
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
    if (n_threads > ST_POOL_MAX_THREADS) n_threads = ST_POOL_MAX_THREADS;
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
    for (int64_t base = 0; base < n_tasks; base += CLAIM_MAX_N) {
        const int64_t n = n_tasks - base < CLAIM_MAX_N ? n_tasks - base : CLAIM_MAX_N;
        p->task = task;
        p->ud = ud;
        p->base = base;
        atomic_store(&p->n_done, 0);
        atomic_store(&p->claim, (uint64_t)n << CLAIM_BITS);  // publishes the job (seq_cst, after its fields)
        pthread_mutex_lock(&p->lock);                         // then wakes the workers
        atomic_fetch_add(&p->generation, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        drain(p, 0);
        for (int i = 0; i < SPIN_ITERATIONS && atomic_load(&p->n_done) < n; i++) cpu_relax();
        if (atomic_load(&p->n_done) < n) {
            pthread_mutex_lock(&p->lock);
            p->caller_waiting = 1;
            while (atomic_load(&p->n_done) < n) pthread_cond_wait(&p->done, &p->lock);
            p->caller_waiting = 0;
            pthread_mutex_unlock(&p->lock);
        }
    }
}

// A persistent worker pool: st_pool_run() hands out task indices 0..n_tasks-1 to the calling thread plus the
// workers and returns when all are done. Used by make-model, packing and the CPU compute backend.
#ifndef STRATA_UTIL_POOL_H
#define STRATA_UTIL_POOL_H

#include <stdint.h>

typedef struct st_pool st_pool;

// task(ud, task_index, thread_index); thread_index is in [0, st_pool_threads(pool)).
typedef void (*st_task_fn)(void *ud, int64_t task, int thread);

// n_threads counts the caller; n_threads <= 0 means the number of online CPUs.
st_pool *st_pool_create(int n_threads);
void st_pool_destroy(st_pool *pool);
int st_pool_threads(const st_pool *pool);
// Workers spin (rather than sleep) for at least `seconds` after each job; 0: the default short spin. For pools that
// serve jobs a fraction of a millisecond apart with latency on the critical path (hybrid CPU misses): a sleeping
// worker's wake-up costs tens of microseconds, more in a virtual machine.
void st_pool_set_spin(st_pool *pool, double seconds);
// Runs task for every index in [0, n_tasks) and waits. Not reentrant: one st_pool_run at a time per pool.
void st_pool_run(st_pool *pool, int64_t n_tasks, st_task_fn task, void *ud);

// Number of CPUs this process may run on (affinity-aware).
int st_cpu_count(void);

#endif

// The worker pool (src/util/pool.c): every task of every job runs exactly once, on a valid thread index, before
// st_pool_run returns, across pools of 1..9 threads (more threads than this host's cores: late workers that find
// a job taken, or the next job's work), jobs of random sizes, workers that fall asleep between jobs, a caller that
// sleeps waiting for a slow task, and a job larger than one claim word holds (split into several).
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "util/pool.h"

typedef struct {
    _Atomic uint8_t *count;  // [n] times each task ran
    int n_threads;
    _Atomic int bad_thread;  // tasks that saw a thread index out of range
    int slow_task;           // this task index sleeps (the caller's wait on its condition variable), -1: none
} job;

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void task(void *ud, int64_t i, int thread) {
    job *j = ud;
    if (thread < 0 || thread >= j->n_threads) atomic_fetch_add(&j->bad_thread, 1);
    if (i == j->slow_task) sleep_us(3000);
    atomic_fetch_add(&j->count[i], 1);
}

// Runs one job of n tasks and checks that each ran once; returns the number of wrong counts.
static int64_t run_check(st_pool *p, job *j, int64_t n) {
    memset((void *)j->count, 0, (size_t)n);
    st_pool_run(p, n, task, j);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&j->count[i]) != 1;
    return wrong;
}

int main(void) {
    const unsigned seed = getenv("STRATA_SEED") ? (unsigned)atoi(getenv("STRATA_SEED")) : (unsigned)time(NULL);
    srand(seed);
    printf("seed %u\n", seed);
    const int64_t big = (int64_t)1 << 24;  // more tasks than one claim word holds (2^24 - 1 - 4096)
    job j = {calloc((size_t)big + 8192, 1), 0, 0, -1};
    CHECK(j.count != NULL, "allocation");
    if (!j.count) return 1;

    static const int threads[] = {1, 2, 3, 4, 9};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        st_pool *p = st_pool_create(threads[t]);
        CHECK(p && st_pool_threads(p) == threads[t], "pool of %d threads", threads[t]);
        if (!p) continue;
        j.n_threads = threads[t];
        int64_t wrong = 0;
        // Many back-to-back jobs of random sizes (1 .. 3000 tasks): late workers meet the next job's word.
        for (int k = 0; k < 3000; k++) wrong += run_check(p, &j, 1 + rand() % 3000);
        CHECK(wrong == 0, "%d threads, back-to-back jobs: %lld tasks not run exactly once", threads[t],
              (long long)wrong);
        // Jobs 0..3 ms apart: the workers' spin ends and they sleep on the condition variable between jobs.
        wrong = 0;
        for (int k = 0; k < 40; k++) {
            sleep_us(rand() % 3000);
            wrong += run_check(p, &j, 1 + rand() % 64);
        }
        CHECK(wrong == 0, "%d threads, jobs with pauses: %lld wrong", threads[t], (long long)wrong);
        // One slow task: the caller runs out of work and waits for it (spin, then its condition variable).
        j.slow_task = 5;
        wrong = run_check(p, &j, 16);
        j.slow_task = -1;
        CHECK(wrong == 0, "%d threads, a slow task: %lld wrong", threads[t], (long long)wrong);
        // The spin-hold mode of the hybrid CPU experts' pool.
        st_pool_set_spin(p, 0.002);
        wrong = 0;
        for (int k = 0; k < 200; k++) wrong += run_check(p, &j, 1 + rand() % 200);
        st_pool_set_spin(p, 0);
        CHECK(wrong == 0, "%d threads, spin hold: %lld wrong", threads[t], (long long)wrong);
        if (threads[t] == 4) {  // a job split over two claim words
            wrong = run_check(p, &j, big + 5000);
            CHECK(wrong == 0, "4 threads, %lld tasks: %lld wrong", (long long)(big + 5000), (long long)wrong);
        }
        CHECK(atomic_load(&j.bad_thread) == 0, "%d threads: %d tasks saw a thread index out of range", threads[t],
              atomic_load(&j.bad_thread));
        st_pool_destroy(p);
    }
    free((void *)j.count);
    printf(failures ? "FAIL (%d)\n" : "ALL PASS\n", failures);
    return failures != 0;
}

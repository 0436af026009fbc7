// A CUDA injection library: with CUDA_INJECTION64_PATH=<path>/libstrata_timeline.so the CUDA driver loads it into
// any program at cuInit and calls InitializeInjection, which turns on CUPTI's activity records for kernels (the
// concurrent mode: kernels keep overlapping as they would), memory copies and memsets. Every record becomes one CSV
// line, for bench/timeline.py. Why: Nsight Systems cannot make reports on the GPU machines (.library/device
// KINDS.md), and the hybrid decode's open question is which branch of its CUDA graph bounds a step; CUPTI gives
// each kernel's start and end on the GPU's clock, graph replays included (one correlation id per cudaGraphLaunch).
//   STRATA_TIMELINE_OUT  the CSV (default strata-timeline.csv); STRATA_TIMELINE_MAX  records written at most
//                        (default 4,000,000; the rest are counted and reported on stderr)
// CSV columns: kind (K kernel, C copy, S memset), name (kernel; copy kind; -), start_ns, end_ns, stream,
// correlation, graph_id, graph_node, grid (x*y*z; copy / memset: bytes), block (x*y*z; else 0).
// Not part of the engine: nothing in Strata links it. Records are flushed at the context's destruction and at exit.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#define TL_BUFFER_BYTES (8u << 20)  // per activity buffer CUPTI asks for
#define TL_DEFAULT_MAX 4000000ull

static pthread_mutex_t tl_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *tl_out;
static unsigned long long tl_written, tl_skipped, tl_max = TL_DEFAULT_MAX;
static CUpti_SubscriberHandle tl_sub;

static void tl_warn(const char *what, CUptiResult r) {
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "strata timeline: %s failed: %s\n", what, msg ? msg : "?");
}

static void CUPTIAPI tl_buffer_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, TL_BUFFER_BYTES);
    *size = *buffer ? TL_BUFFER_BYTES : 0;
    *max_records = 0;  // as many as fit
}

// Writes one record (tl_mu held). Kernel names are CUPTI's, valid during this callback only: printed here.
static void tl_write(const CUpti_Activity *r) {
    if (tl_written >= tl_max) {
        tl_skipped++;
        return;
    }
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        const char *name = k->name ? k->name : "?";
        // (mangled names hold no commas or quotes; quoted anyway for demangled ones)
        fprintf(tl_out, "K,\"%s\",%llu,%llu,%u,%u,%u,%llu,%lld,%lld\n", name, (unsigned long long)k->start,
                (unsigned long long)k->end, k->streamId, k->correlationId, k->graphId,
                (unsigned long long)k->graphNodeId, (long long)k->gridX * k->gridY * k->gridZ,
                (long long)k->blockX * k->blockY * k->blockZ);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)r;
        fprintf(tl_out, "C,copy%u,%llu,%llu,%u,%u,%u,%llu,%llu,0\n", (unsigned)c->copyKind,
                (unsigned long long)c->start, (unsigned long long)c->end, c->streamId, c->correlationId, c->graphId,
                (unsigned long long)c->graphNodeId, (unsigned long long)c->bytes);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *s = (const CUpti_ActivityMemset4 *)r;
        fprintf(tl_out, "S,-,%llu,%llu,%u,%u,%u,%llu,%llu,0\n", (unsigned long long)s->start,
                (unsigned long long)s->end, s->streamId, s->correlationId, s->graphId,
                (unsigned long long)s->graphNodeId, (unsigned long long)s->bytes);
        break;
    }
    default:
        return;
    }
    tl_written++;
}

static void CUPTIAPI tl_buffer_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    pthread_mutex_lock(&tl_mu);
    CUpti_Activity *r = NULL;
    while (tl_out && cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) tl_write(r);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        fprintf(stderr, "strata timeline: CUPTI dropped %zu records\n", dropped);
    pthread_mutex_unlock(&tl_mu);
    free(buffer);
}

static void tl_flush(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&tl_mu);
    if (tl_out) fflush(tl_out);
    pthread_mutex_unlock(&tl_mu);
}

// A context is about to go: its records first (they are lost with it otherwise).
static void CUPTIAPI tl_callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void *data) {
    (void)ud, (void)data;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) tl_flush();
}

static void tl_at_exit(void) {
    tl_flush();
    pthread_mutex_lock(&tl_mu);
    if (tl_out) {
        fclose(tl_out);
        tl_out = NULL;
        fprintf(stderr, "strata timeline: %llu records written%s", tl_written, tl_skipped ? "" : "\n");
        if (tl_skipped) fprintf(stderr, ", %llu past STRATA_TIMELINE_MAX left out\n", tl_skipped);
    }
    pthread_mutex_unlock(&tl_mu);
}

// Called by the CUDA driver once (CUDA_INJECTION64_PATH); 1 = loaded.
int InitializeInjection(void) {
    const char *path = getenv("STRATA_TIMELINE_OUT"), *max = getenv("STRATA_TIMELINE_MAX");
    if (!path || !*path) path = "strata-timeline.csv";
    if (max && *max) tl_max = strtoull(max, NULL, 10);
    tl_out = fopen(path, "w");
    if (!tl_out) {
        fprintf(stderr, "strata timeline: cannot write %s\n", path);
        return 0;
    }
    fprintf(tl_out, "kind,name,start_ns,end_ns,stream,correlation,graph_id,graph_node,grid,block\n");
    CUptiResult r;
    if ((r = cuptiActivityRegisterCallbacks(tl_buffer_request, tl_buffer_complete)) != CUPTI_SUCCESS) {
        tl_warn("cuptiActivityRegisterCallbacks", r);
        return 0;
    }
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((r = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) tl_warn("cuptiActivityEnable", r);
    if ((r = cuptiSubscribe(&tl_sub, tl_callback, NULL)) != CUPTI_SUCCESS ||
        (r = cuptiEnableCallback(1, tl_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)) !=
            CUPTI_SUCCESS)
        tl_warn("cuptiSubscribe (records are still flushed at exit)", r);
    atexit(tl_at_exit);
    fprintf(stderr, "strata timeline: recording kernels, copies and memsets to %s\n", path);
    return 1;
}

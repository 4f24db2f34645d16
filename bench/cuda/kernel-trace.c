/*
 * kernel-trace.c - every kernel's start and end on the GPU, for a step's
 * breakdown where nsys is not installed (the rented GPU hosts) and ncu
 * cannot help (it serializes kernels and flushes caches between them).
 *
 *   CUDA_INJECTION64_PATH=build/bench/libhr-kernel-trace.so \
 *   HR_TRACE_OUT=trace.tsv build/bench/bench-cuda ...
 *   python3 bench/cuda/trace-summary.py trace.tsv
 *
 * The CUDA driver loads this library into any CUDA program named by
 * CUDA_INJECTION64_PATH and calls InitializeInjection (the injection
 * interface CUPTI's own tools use). It asks CUPTI for concurrent-kernel
 * activity records, which take the GPU's own timestamps without
 * serializing kernels (programmatic dependent launches still overlap), and
 * writes one line per kernel at exit:
 *   start_ns  end_ns  correlation  graph_id  grid  block  name
 * correlation is the launch's API call: every kernel of one graph replay
 * shares it, which is how trace-summary.py finds a decode step.
 * A measuring tool: records cost a little per kernel (compare runs traced
 * alike, never a traced run against an untraced one).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cupti.h>

#define BUF_BYTES (8u << 20)

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUF_BYTES); /* CUPTI asks for 8-byte aligned buffers */
    *size = *buffer ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !out)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        fprintf(out, "%llu\t%llu\t%u\t%u\t%dx%dx%d\t%dx%dx%d\t%s\n", (unsigned long long)k->start,
                (unsigned long long)k->end, k->correlationId, k->graphId, k->gridX, k->gridY,
                k->gridZ, k->blockX, k->blockY, k->blockZ, k->name ? k->name : "?");
    }
    free(buffer);
}

static void finish(void)
{
    cuptiActivityFlushAll(1);
    if (out) {
        fclose(out);
        out = NULL;
    }
}

int InitializeInjection(void);
int InitializeInjection(void)
{
    const char *path = getenv("HR_TRACE_OUT");
    out = fopen(path ? path : "kernel-trace.tsv", "w");
    if (!out) {
        perror("kernel-trace: HR_TRACE_OUT");
        return 0;
    }
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel-trace: CUPTI refused the activity callbacks\n");
        return 0;
    }
    atexit(finish);
    return 1;
}

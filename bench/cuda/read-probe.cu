/*
 * read-probe.cu - bench-gemv's read roofline: a kernel that only streams
 * bytes in (16-byte loads, grid-stride, every SM busy) and writes one word
 * a block, so a GEMV's GB/s can be set beside what reading the same bytes
 * alone achieves on this card. Not part of the engine.
 */
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void read_probe_kernel(const uint4 *p, uint64_t n16, uint32_t *out)
{
    uint32_t acc = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    /* a store the compiler cannot drop, rarely taken */
    if (acc == 0x9E3779B9u)
        out[blockIdx.x] = acc;
}

/* Reads bytes (a multiple of 16) from p on stream s; out is a scratch word
 * per block (blocks = 4 x the SMs, at most 4096). */
extern "C" cudaError_t bench_read_probe(const void *p, uint64_t bytes, uint32_t *out, int blocks,
                                        cudaStream_t s)
{
    read_probe_kernel<<<blocks, 512, 0, s>>>((const uint4 *)p, bytes / 16, out);
    return cudaGetLastError();
}

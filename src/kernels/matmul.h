/*
 * matmul.h - the CPU matrix kernels the engine calls: Y = X * W^T for a
 * weight matrix W of any supported GGUF type and f32 activations X.
 *
 * Shapes follow GGUF/ggml: W has `n_out` rows of `k` elements (ne[0] = k is
 * the fastest dimension), stored in W's type; X has `m` rows (tokens) of `k`
 * floats; Y has `m` rows of `n_out` floats with row stride `ldy`.
 *
 * Supported weight types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (hr_matmul_supports).
 * k must be a multiple of the type's block size.
 *
 * Numerics match llama.cpp's CPU backend: activations are first converted to
 * the weight type's "vec-dot type" exactly as ggml-cpu does on x86 with AVX2
 * or AVX-512 (Q8_0 blocks for Q8_0, Q4_0, Q5_0, IQ4_NL and MXFP4 weights,
 * Q8_1 blocks for Q4_1 and Q5_1, Q8_K blocks for the K-quants and IQ4_XS,
 * f16 for F16, bf16 for BF16, f32 for F32; bit-identical, see
 * hr_convert_act_row in quant.h), and each output is a dot product between a
 * weight row and an activation row in that pair of formats. Integer block
 * products are exact; only the order of the float accumulation differs from
 * llama.cpp's (measured: within 5e-7 of ggml-cpu's vec_dot relative to the
 * sum of |terms|, tests/unit/test-quant-oracle.c). The result does not depend
 * on the number of threads, and every implementation computes the same
 * integer parts.
 *
 * Two phases, so the caller's threadpool can split both and put a barrier
 * between them (the engine owns threads; these functions never spawn any):
 *
 *   // phase 1: every thread converts its share of the m activation rows
 *   hr_matmul_prepare(wtype, X, m, k, act, ith, nth);
 *   barrier();
 *   // phase 2: every thread computes its share of the n_out output rows
 *   hr_matmul_compute(wtype, W, k, n_out, act, m, Y, ldy, ith, nth);
 *
 * `act` is caller-owned scratch of hr_matmul_act_bytes(wtype, m, k) bytes,
 * 64-byte aligned (the engine carves it from the step arena, sized by the
 * step plan). Its contents are private to the kernels: the vec-dot blocks
 * split into arrays the SIMD code loads directly (layout in matmul-impl.h).
 * Size and contents depend only on hr_matmul_vec_dot_type(wtype), m and k,
 * never on the thread count or the ISA: one prepared act may be used by
 * every weight matrix of the same vec-dot type and k (Q8_0, Q4_0, Q5_0,
 * IQ4_NL and MXFP4 share one, as do Q4_1 and Q5_1, and Q2_K .. Q6_K and
 * IQ4_XS), which saves a conversion for Q, K and V.
 * Nothing here allocates; hr_matmul_compute uses up to 64 KiB of its
 * thread's stack for the packed weight panel of the prefill kernels.
 *
 * Work split: phase 1 gives thread ith a contiguous range of activation
 * rows; phase 2 a contiguous range of weight rows (a multiple of 32), so each
 * thread streams its own slice of W once. Any thread may run any ith; the
 * calls for one matmul may run concurrently (they write disjoint bytes of
 * act, then of Y), but phase 2 must not start before all of phase 1 ended.
 *
 * Cost on the project's Zen 4 (2 cores; bench/bench-matmul.c): decode (m up
 * to 5-15 tokens) streams the weights at 17-26 GB/s per thread; prefill runs
 * packed GEMM micro-kernels at ~300 GOPS per core for Q8_0/Q4_K (vpdpbusd)
 * and ~90 GFLOP/s per core for F16 (fma, 75-80% of peak).
 *
 * Which implementation runs (AVX-512/VNNI, AVX2, portable C) is chosen once
 * from the CPU's features (CPUID), also in a portable build: the SIMD files
 * compile with per-function target attributes. hr_kernels_isa() names it;
 * the environment variable HR_KERNELS_ISA (generic, avx2, avx512vnni)
 * overrides the choice for debugging and benchmarks.
 * Every SIMD path is tested against the plain C reference in
 * tests/unit/test-kernels.c.
 */
#ifndef HR_KERNELS_MATMUL_H
#define HR_KERNELS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/ggml-types.h"

/* True when the engine can compute with weights of `type`. */
bool hr_matmul_supports(enum hr_ggml_type type);

/* The activation format paired with weight type `wtype` (ggml's vec_dot_type). */
enum hr_ggml_type hr_matmul_vec_dot_type(enum hr_ggml_type wtype);

/* Bytes of one row of `n` elements of `type` (n a multiple of its block size). */
size_t hr_row_bytes(enum hr_ggml_type type, size_t n);

/* Scratch bytes hr_matmul_prepare needs for m rows of k activations (a
 * multiple of 64). */
size_t hr_matmul_act_bytes(enum hr_ggml_type wtype, size_t m, size_t k);

/* Phase 1: converts thread ith's share of the m rows of x (m x k floats,
 * row stride k) into `act`. */
void hr_matmul_prepare(enum hr_ggml_type wtype, const float *x, size_t m, size_t k, void *act,
                       int ith, int nth);

/* Phase 2: writes thread ith's share of the n_out columns of y (m rows,
 * stride ldy >= n_out); `w` is n_out rows of k elements of wtype (an mmap'd
 * tensor: read-only, any alignment). */
void hr_matmul_compute(enum hr_ggml_type wtype, const void *w, size_t k, size_t n_out,
                       const void *act, size_t m, float *y, size_t ldy, int ith, int nth);

/*
 * Packed weights. The AVX-512 kernels read Q8_0, Q4_K and F16 matrices
 * fastest in layouts of their own (matmul-impl.h). Q8_0: 32 rows interleaved
 * so that one vpdpbusd advances 16 of them, the panel the prefill GEMM
 * otherwise builds at every call; decode then streams the weights with a
 * quarter of the vector work, and prefill skips its packing. Q4_K: 16 rows'
 * nibbles interleaved by dword with the 6-bit scales unpacked to bytes (2.8%
 * more memory than the file's layout): decode runs 4.6x faster from cache
 * (97 GB/s per thread against 21, bench-matmul's expert shapes), so it is
 * bound by DRAM, not by unpacking. F16: 4 rows interleaved in
 * 16-value chunks, so the 4-row tile reads one sequential stream instead of
 * 4. The model packs each matrix it can once, at load, into memory of the
 * same size (Q4_K: 2.8% more), and frees the file's pages of it. The packed kernels run the
 * row-major kernels' arithmetic in the same order: the results are equal
 * bit for bit (test-kernels).
 *
 *   hr_matmul_packed_bytes: bytes of the packed copy of an n_out x k matrix,
 *       or 0 when this CPU's kernels read `type` as stored (or when
 *       HR_KERNELS_PACK=0 is set in the environment, for A/B runs)
 *   hr_matmul_pack: writes it to `dst` (64-byte aligned)
 *   hr_matmul_compute_packed: hr_matmul_compute on the packed copy (same
 *       contract; if another ISA was forced since, it unpacks row by row)
 *   hr_matmul_packed_row: dequantizes one row of it (tied embeddings)
 */
size_t hr_matmul_packed_bytes(enum hr_ggml_type type, size_t k, size_t n_out);
void hr_matmul_pack(enum hr_ggml_type type, const void *w, size_t k, size_t n_out, void *dst);
void hr_matmul_compute_packed(enum hr_ggml_type type, const void *w, size_t k, size_t n_out,
                              const void *act, size_t m, float *y, size_t ldy, int ith, int nth);
void hr_matmul_packed_row(enum hr_ggml_type type, const void *packed, size_t k, size_t row,
                          float *dst);

/* Dequantizes one row of `n` elements of `type` to f32 (embedding lookups). */
void hr_dequantize_row_any(enum hr_ggml_type type, const void *src, float *dst, size_t n);

/*
 * Batch invariance (on by default): a token's outputs do not depend on the
 * other tokens of the call, bit for bit, for every weight type and ISA, so
 * ragged batches and prefill chunking cannot change a sequence's results.
 * On AVX-512 this makes the Q8_0/Q4_0 decode kernel (m = 1) fold each
 * block's integer sum to a scalar before scaling, as the prefill GEMM does,
 * at ~25% of its DRAM bandwidth, and runs the float types (F32/F16/BF16)
 * through one kernel whose per-output summation order is the same at every
 * m. Off selects the free-running Q8_0/Q4_0 decode kernel and the packed
 * float GEMM (results then differ with m at the 1e-7 level, which activation
 * rounding can amplify to 1e-3 in the logits). The K-quants are invariant
 * either way at no cost. HR_KERNELS_INVARIANT=0 in the environment turns it
 * off at start. Set before computing; not thread-safe.
 */
void hr_kernels_set_batch_invariant(bool on);
bool hr_kernels_batch_invariant(void);

/* "avx512vnni", "avx2" or "generic". */
const char *hr_kernels_isa(void);

/* Forces an implementation for tests and benchmarks: "avx512vnni", "avx2",
 * "generic", or "best" (the automatic choice); returns false if this CPU or
 * build cannot run it. Not thread-safe with respect to running matmuls. */
bool hr_kernels_force_isa(const char *name);

#endif

/*
 * cuda-engine.c - the forward pass on the GPU; see cuda-engine.h.
 *
 * A step is a sequence of kernel launches on one stream, in the order of
 * engine.c's forward_worker: embeddings and the RoPE table; per layer the
 * attention norm, Q/K/V matmuls, biases + Q/K norms + RoPE + KV store (one
 * kernel), paged attention, the output projection added into the residual,
 * the FFN norm, gate/up, SwiGLU, the down projection added into the
 * residual; then the final norm of the logit rows and the output matmul.
 * Every buffer is a view into the device arena at an offset from
 * hr_cuda_plan_layout; the step's metadata (tokens, positions, block
 * tables) goes up in one copy from pinned staging and the logits come back
 * in one copy, after which the host waits once.
 *
 * Matmuls: up to HR_CUDA_GEMV_MAX_ROWS rows (decode, small batches) run the
 * dequantizing GEMV kernel. More rows (prefill) run on the tensor cores.
 * In MoE models (int_gemm_model), types whose CPU dot is integer sums per
 * block of 32 on Q8_0 inputs (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4; Q4_K on
 * Q8_K under HR_CUDA_GEMM=int) take the integer GEMM: inputs quantized as
 * the CPU does, exact int8 MMAs, the scales per block. In dense models
 * the steps of up to HR_CUDA_GEMM_SMALL_ROWS rows past the GEMV's (decode
 * batches) multiply Q4_K matrices as they lie on a kernel of their own
 * (hr_cuda_gemm_q4k_small; HR_CUDA_GEMM_SMALL=0: not), and the other
 * integer types (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4) take the general integer
 * GEMM in steps of up to N rows under HR_CUDA_INT_ROWS=N (the A/B switch).
 * The other types and models:
 * the inputs are rounded to the weight's vec-dot format and stored as f16
 * (bf16 for BF16 weights), the weight matrix is dequantized to f16 into the
 * arena's wdq scratch (F16 and BF16 weights are used as they lie), and
 * cuBLASLt multiplies with f32 accumulation. F32 weights keep the tiled f32
 * GEMM kernel (full precision on the CUDA cores), as does every type under
 * HR_CUDA_GEMM=simt; HR_CUDA_GEMM=int or f16 picks the integer GEMM or
 * cuBLASLt for every model (the A/B switches benchmarks use).
 *
 * A first version on cuBLAS SGEMM was dropped after its first H200 run:
 * cuBLAS picked kernels per shape and loaded them lazily inside steps (free
 * device memory fell 2 MiB during random steps), and its result for a
 * token changed with the batch (8e-2 in the logits). Both are fixed here by
 * choosing the algorithm once per matrix shape at init (cuBLASLt's
 * heuristic at the largest step, kept only without split-K, no workspace)
 * and running each chosen algorithm once at init: every later GEMM of that
 * shape runs the same kernel, already loaded, whose output for one row is
 * the same chain of MMAs over k whatever the other rows are.
 */
#include "cuda/cuda-engine.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda.h> /* the driver API's types; its entry points come through cudart */
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "base/log.h"
#include "base/sys.h"
#include "cuda/cuda-kernels.h"
#include "kernels/matmul.h"

_Static_assert(HR_CUDA_T_F32 == HR_GGML_F32 && HR_CUDA_T_F16 == HR_GGML_F16 &&
                   HR_CUDA_T_BF16 == HR_GGML_BF16 && HR_CUDA_T_Q8_0 == HR_GGML_Q8_0 &&
                   HR_CUDA_T_Q4_0 == HR_GGML_Q4_0 && HR_CUDA_T_Q4_K == HR_GGML_Q4_K &&
                   HR_CUDA_T_Q5_K == HR_GGML_Q5_K && HR_CUDA_T_Q6_K == HR_GGML_Q6_K &&
                   HR_CUDA_T_Q4_1 == HR_GGML_Q4_1 && HR_CUDA_T_Q5_0 == HR_GGML_Q5_0 &&
                   HR_CUDA_T_Q5_1 == HR_GGML_Q5_1 && HR_CUDA_T_Q2_K == HR_GGML_Q2_K &&
                   HR_CUDA_T_Q3_K == HR_GGML_Q3_K && HR_CUDA_T_IQ4_NL == HR_GGML_IQ4_NL &&
                   HR_CUDA_T_IQ4_XS == HR_GGML_IQ4_XS && HR_CUDA_T_MXFP4 == HR_GGML_MXFP4,
               "the kernels' type ids are ggml's");
_Static_assert(sizeof(struct hr_cuda_rope) == sizeof(struct hr_rope) &&
                   offsetof(struct hr_cuda_rope, theta_scale) == offsetof(struct hr_rope, theta_scale) &&
                   offsetof(struct hr_cuda_rope, freq_scale) == offsetof(struct hr_rope, freq_scale) &&
                   offsetof(struct hr_cuda_rope, ext_factor) == offsetof(struct hr_rope, ext_factor) &&
                   offsetof(struct hr_cuda_rope, attn_factor) == offsetof(struct hr_rope, attn_factor) &&
                   offsetof(struct hr_cuda_rope, corr_dims) == offsetof(struct hr_rope, corr_dims),
               "the kernels' RoPE constants are engine.h's");

/*
 * cuBLASLt is opened at first use, not linked: the library is hundreds of
 * MiB of kernels and relocations, and linking it cost every headroom
 * process about half a second at start, GPU or not (the test suite starts
 * hundreds). Only these entry points are used; the header's inline *Init
 * helpers call the _internal ones with the struct's size.
 */
static struct {
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*destroy)(cublasLtHandle_t);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,
                             const void *, cublasLtMatrixLayout_t, const void *,
                             cublasLtMatrixLayout_t, const void *, const void *,
                             cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                             const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
    cublasStatus_t (*algo_check)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                 cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                 cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                 const cublasLtMatmulAlgo_t *,
                                 cublasLtMatmulHeuristicResult_t *);
    cublasStatus_t (*algo_config_get)(const cublasLtMatmulAlgo_t *,
                                      cublasLtMatmulAlgoConfigAttributes_t, void *, size_t,
                                      size_t *);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*desc_init)(cublasLtMatmulDesc_t, size_t, cublasComputeType_t,
                                cudaDataType_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                               const void *, size_t);
    cublasStatus_t (*pref_init)(cublasLtMatmulPreference_t, size_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t,
                               cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_init)(cublasLtMatrixLayout_t, size_t, cudaDataType, uint64_t,
                                  uint64_t, int64_t);
    char error[512]; /* empty once every entry point resolved */
} lt_api;

#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

static void lt_api_open(void)
{
    void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#ifdef HR_CUDA_LIBDIR
    if (!h) /* the toolkit's own directory, when the loader's path lacks it */
        h = dlopen(HR_CUDA_LIBDIR "/" LT_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
    if (!h) {
        snprintf(lt_api.error, sizeof(lt_api.error), "cannot open %s: %s", LT_SONAME,
                 dlerror());
        return;
    }
    const struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&lt_api.create, "cublasLtCreate"},
        {(void **)&lt_api.destroy, "cublasLtDestroy"},
        {(void **)&lt_api.matmul, "cublasLtMatmul"},
        {(void **)&lt_api.algo_check, "cublasLtMatmulAlgoCheck"},
        {(void **)&lt_api.algo_config_get, "cublasLtMatmulAlgoConfigGetAttribute"},
        {(void **)&lt_api.heuristic, "cublasLtMatmulAlgoGetHeuristic"},
        {(void **)&lt_api.desc_init, "cublasLtMatmulDescInit_internal"},
        {(void **)&lt_api.desc_set, "cublasLtMatmulDescSetAttribute"},
        {(void **)&lt_api.pref_init, "cublasLtMatmulPreferenceInit_internal"},
        {(void **)&lt_api.pref_set, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&lt_api.layout_init, "cublasLtMatrixLayoutInit_internal"},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].fn = dlsym(h, syms[i].name); /* POSIX: object to function pointer is fine */
        if (!*syms[i].fn) {
            snprintf(lt_api.error, sizeof(lt_api.error), "%s lacks %s", LT_SONAME,
                     syms[i].name);
            return;
        }
    }
}

/* Opens cuBLASLt once per process; the error says what was missing. */
static enum hr_status lt_api_load(struct hr_err *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, lt_api_open);
    if (lt_api.error[0])
        return hr_err_set(err, HR_ERR_DEVICE, "cuBLASLt: %s", lt_api.error);
    return HR_OK;
}


/* A weight in device memory. */
struct dweight {
    enum hr_ggml_type type;
    const uint8_t *d;       /* NULL when absent */
    uint64_t ne0, ne1, row_bytes;
    uint64_t mat_bytes;     /* stacked experts: expert x's matrix at d + x mat_bytes */
    enum hr_cuda_act act;   /* how its inputs are rounded (the vec-dot type) */
};

/* Every tensor of a layer, by its name in model.h's hr_layer and here, in
 * upload order: X(name, M), M = 1 for a matrix multiplied by the GEMMs and
 * GEMVs (tensor cores in prefill), 2 for the DeltaNet's beta and alpha
 * (matrices the mixer multiplies in f32 itself), 0 for vectors. The one
 * list the upload, the dims and the cuBLASLt shapes all read. */
#define LAYER_TENSORS(X)                                                                           \
    X(attn_norm, 0) X(wq, 1) X(wk, 1) X(wv, 1) X(bq, 0) X(bk, 0) X(bv, 0) X(q_norm, 0)            \
    X(k_norm, 0) X(wo, 1) X(bo, 0) X(sinks, 0) X(ffn_norm, 0) X(w_gate, 1) X(w_up, 1)               \
    X(w_down, 1) X(gate_inp, 1) X(gate_inp_b, 0) X(exp_probs_b, 0) X(gate_exps, 1)                 \
    X(up_exps, 1) X(down_exps, 1) X(gate_exps_b, 0) X(up_exps_b, 0) X(down_exps_b, 0)              \
    X(gate_inp_shexp, 0) X(gate_shexp, 1) X(up_shexp, 1) X(down_shexp, 1) X(ssm_qkv, 1)            \
    X(ssm_z, 1) X(ssm_beta, 2) X(ssm_alpha, 2) X(ssm_ba, 2) X(ssm_out, 1) X(ssm_conv1d, 0)         \
    X(ssm_dt, 0) X(ssm_a, 0) X(ssm_norm, 0)
#define LT_COUNT(name, M) +1
#define LT_MAT(name, M) +((M) != 0)
enum { LAYER_TENSORS_N = 0 LAYER_TENSORS(LT_COUNT), LAYER_MATS = 0 LAYER_TENSORS(LT_MAT) };
#undef LT_COUNT
#undef LT_MAT

struct dlayer {
    struct dweight attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, bo, sinks, ffn_norm;
    uint32_t window;        /* sliding window (gpt-oss); 0: full causal */
    struct dweight w_gate, w_up, w_down;
    /* MoE (model.h's hr_layer names) */
    bool moe;
    struct dweight gate_inp, gate_inp_b, exp_probs_b, gate_exps, up_exps, down_exps;
    struct dweight gate_exps_b, up_exps_b, down_exps_b;
    struct dweight gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
    /* the mixer: attention (its layer in the KV pool) or a Gated DeltaNet
     * (its part of a state slot) */
    bool dn;
    uint32_t kv_layer, dn_layer;
    struct dweight ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_ba, ssm_out;
    struct dweight ssm_conv1d, ssm_dt, ssm_a, ssm_norm;
};

/* What a captured decode graph is valid for (see run_graph). */
struct graph_key {
    struct hr_cuda_plan p;
    uint32_t T, L, S, pad;
};

/* One cuBLASLt algorithm per GEMM shape (n weight rows of k), chosen and
 * loaded at init. */
#define LT_MAX_SHAPES 16
struct lt_shape {
    uint32_t n, k;
    int bf16;
    bool ok;                /* false: no algorithm without split-K; the f32 GEMM runs */
    const void *sample_w;   /* an F16/BF16 matrix of this shape (the first run), or NULL */
    cublasLtMatmulAlgo_t algo;
};

struct seq_info {
    uint32_t first_token, n_tokens, pos0, first_logit, n_logits;
};

struct hr_cuda_engine {
    const struct hr_model *m;
    struct hr_cuda_config cfg;
    struct hr_cuda_plan_dims dims;
    uint32_t int_gemm_rows; /* GEMM steps of up to this many rows: integer GEMM types on it */
    struct hr_cuda_mem mem;
    char device_name[320];
    bool lost;

    cudaStream_t stream;
    cudaEvent_t ev0, ev1;

    uint8_t *d_weights;
    struct dweight tok_embd, output_norm, output, rope_freqs;
    struct dlayer *layers;

    struct hr_kv_pool *kv; /* books only: which blocks are used; bytes in d_kv */
    bool windowed;         /* the pool has windowed blocks for the sliding-window layers */
    uint8_t *d_kv;
    /* cfg.kv_lazy: d_kv is reserved address space, groups [0, kv_mapped)
     * of kv_group blocks (kv_chunk bytes) mapped (see kv_vmm_init). */
    bool kv_vmm;
    uint32_t kv_unit;  /* the fewest blocks whose bytes are whole granules */
    uint32_t kv_group, kv_n_groups, kv_mapped;
    uint64_t kv_chunk; /* a group's bytes (the last group's may be fewer) */
    CUmemGenericAllocationHandle *kv_handles;

    uint8_t *d_arena;
    uint64_t arena_cap, high_water;
    uint8_t *h_stage;      /* pinned: the plan's meta prefix of the largest step */
    uint64_t stage_cap;
    float *h_logits;       /* pinned: max_step_logits x n_vocab */
    int32_t *h_moe_off;    /* pinned: a MoE layer's group ends (n_expert) */
    uint64_t n_allocs_init, n_allocs;

    /* the prepared matmul input (see prep_have) */
    bool prep_valid;
    const float *prep_x;
    uint32_t prep_m, prep_k;
    enum hr_cuda_act prep_act;
    int prep_kind;
    /* a decode step's RMSNorm left to the Q4_K GEMV after it (norm_for,
     * HR_CUDA_NORM_FUSE=1): its inputs, until matmul_parts takes it or
     * norm_flush launches it */
    bool norm_pending;
    const float *norm_x, *norm_w;
    float *norm_xn;
    float norm_eps;
    int norm_kind; /* the inputs it makes: HR_CUDA_NORM_PREP_Q8_K or _Q8_0 */
    const struct dweight *norm_next;
    /* a form a fused norm made (norm_for): good for the next request only */
    bool prime_valid;
    const float *prime_x;
    uint32_t prime_m, prime_k;
    enum hr_cuda_act prime_act;
    int prime_kind;

    /* decode steps as a CUDA graph (run_graph) */
    bool graphs;
    cudaGraphExec_t gexec;
    struct graph_key gkey;
    uint64_t n_graph_captures, n_graph_instantiations;

    cublasLtHandle_t lt;
    cublasLtMatmulDescOpaque_t lt_desc;
    struct lt_shape lt_shapes[LT_MAX_SHAPES];
    uint32_t n_lt_shapes;

    struct hr_cuda_rope rope;
    /* Hybrid models: the recurrent state slots (books in `state`, one
     * allocation d_state of n_slots x slot bytes), cfg.max_step_seqs of them */
    struct hr_state_pool *state;
    uint8_t *d_state;
    struct seq_info *seqs; /* max_step_seqs */
    uint32_t n_seqs;
    float last_ms;
};

/* ---- errors ------------------------------------------------------------- */

/* Errors after which the context cannot be used again (CUDA's "sticky"
 * errors); the others fail one call. */
static bool sticky(cudaError_t ce)
{
    switch (ce) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
        return true;
    default:
        return false;
    }
}

static enum hr_status cuda_fail(struct hr_cuda_engine *e, struct hr_err *err, cudaError_t ce,
                                const char *what)
{
    if (e && sticky(ce))
        e->lost = true;
    return hr_err_set(err, HR_ERR_DEVICE, "CUDA error in %s: %s (%s)%s", what,
                      cudaGetErrorString(ce), cudaGetErrorName(ce),
                      e && e->lost ? "; the CUDA context is lost" : "");
}

#define CU(call, what)                                                                            \
    do {                                                                                          \
        cudaError_t ce_ = (call);                                                                 \
        if (ce_ != cudaSuccess)                                                                   \
            return cuda_fail(e, err, ce_, what);                                                  \
    } while (0)

/* Every device allocation of the engine goes through here (init only). */
static enum hr_status dev_alloc(struct hr_cuda_engine *e, void **p, uint64_t bytes,
                                const char *what, struct hr_err *err)
{
    *p = NULL;
    if (!bytes)
        return HR_OK;
    cudaError_t ce = cudaMalloc(p, bytes);
    e->n_allocs++;
    if (ce == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* clear it: an allocation failure is not sticky */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return hr_err_set(err, HR_ERR_NOMEM, "cannot allocate %llu bytes of device memory for "
                          "the %s (%llu free of %llu)", (unsigned long long)bytes, what,
                          (unsigned long long)fr, (unsigned long long)tot);
    }
    CU(ce, what);
    return HR_OK;
}

/* ---- the KV pool on virtual memory (cfg.kv_lazy) -------------------------
 *
 * The pool's bytes as reserved address space (cuMemAddressReserve) with
 * physical memory mapped a group of blocks at a time (cuMemCreate,
 * cuMemMap): the pool's books hand out only blocks of mapped groups
 * (hr_kv_pool_set_usable). hr_cuda_engine_kv_ensure maps groups, between
 * steps, while the device has room for them; hr_cuda_engine_kv_give_back
 * unmaps trailing groups whose blocks are all free when another process
 * has left the device short. A group is the fewest blocks whose bytes are
 * a multiple of the allocation granule, so the pool stays one contiguous
 * range and block addressing is unchanged. The driver API comes through
 * cudart (cudaGetDriverEntryPointByVersion): nothing links libcuda.
 */
static struct {
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                            CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                    unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} vmm;

static enum hr_status vmm_load(struct hr_err *err)
{
    const struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&vmm.granularity, "cuMemGetAllocationGranularity"},
        {(void **)&vmm.reserve, "cuMemAddressReserve"},
        {(void **)&vmm.address_free, "cuMemAddressFree"},
        {(void **)&vmm.create, "cuMemCreate"},
        {(void **)&vmm.release, "cuMemRelease"},
        {(void **)&vmm.map, "cuMemMap"},
        {(void **)&vmm.unmap, "cuMemUnmap"},
        {(void **)&vmm.set_access, "cuMemSetAccess"},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion(syms[i].name, syms[i].fn, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !*syms[i].fn)
            return hr_err_set(err, HR_ERR_DEVICE, "the CUDA driver lacks %s (virtual memory "
                              "management, for the KV pool)", syms[i].name);
    }
    return HR_OK;
}

static CUmemAllocationProp vmm_prop(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        const uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Blocks a group holds, in units of the fewest blocks whose bytes are a
 * multiple of the granule: at least HR_CUDA_KV_GROUP_BLOCKS (16) blocks.
 * Mapping a group costs the driver calls, a memset and a stream sync,
 * about 50 us whatever its size (H100: 49.5 us for 2 MiB, 56.7 us for
 * 32 MiB), between steps, counted as scheduling. A large model's block is
 * a whole granule, and one block a group mapped a new group every
 * block_tokens tokens of every stream: 8B Q4_K, 32 streams through serve,
 * the first burst's scheduling was 17-21 ms with groups of one block and
 * 9-10 ms with 16 (--no-governor, two rounds each). Give-back frees whole
 * trailing groups, so they stay small. HR_CUDA_KV_GROUP_BLOCKS=1 restores
 * the fewest (an A/B switch). */
static uint32_t kv_units_per_group(uint32_t unit)
{
    uint32_t want = HR_CUDA_KV_GROUP_BLOCKS;
    const char *v = getenv("HR_CUDA_KV_GROUP_BLOCKS");
    if (v && atoi(v) > 0)
        want = (uint32_t)atoi(v);
    return want > unit ? (want + unit - 1) / unit : 1;
}

/* Group g's first byte and its bytes: every group is kv_chunk bytes but the
 * last, which maps only the units that hold the pool's blocks, so the
 * mapped pool never exceeds its budget rounded up to a granule. */
static uint64_t kv_group_at(const struct hr_cuda_engine *e, uint32_t g)
{
    return (uint64_t)g * e->kv_chunk;
}

static uint64_t kv_group_bytes(const struct hr_cuda_engine *e, uint32_t g)
{
    const uint32_t n = hr_kv_n_blocks(e->kv), first = g * e->kv_group;
    const uint32_t blocks = n - first < e->kv_group ? n - first : e->kv_group;
    const uint32_t units = (blocks + e->kv_unit - 1) / e->kv_unit;
    return (uint64_t)units * e->kv_unit * hr_kv_block_bytes(e->kv);
}

/* Reserves the address space of a pool already made (its books), maps
 * nothing; every block is unusable until hr_cuda_engine_kv_ensure. */
static enum hr_status kv_vmm_init(struct hr_cuda_engine *e, struct hr_err *err)
{
    enum hr_status st = vmm_load(err);
    if (st != HR_OK)
        return st;
    const CUmemAllocationProp prop = vmm_prop(e->cfg.device);
    size_t gran = 0;
    if (vmm.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS ||
        !gran)
        gran = HR_CUDA_ALLOC_GRANULE;
    const uint64_t bb = hr_kv_block_bytes(e->kv);
    const uint32_t n = hr_kv_n_blocks(e->kv);
    e->kv_unit = (uint32_t)(gran / gcd64(gran, bb));
    e->kv_group = e->kv_unit * kv_units_per_group(e->kv_unit);
    e->kv_chunk = (uint64_t)e->kv_group * bb;
    e->kv_n_groups = (n + e->kv_group - 1) / e->kv_group;
    e->kv_handles = calloc(e->kv_n_groups, sizeof(*e->kv_handles));
    if (!e->kv_handles)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    CUdeviceptr base = 0;
    const uint64_t span = kv_group_at(e, e->kv_n_groups - 1) + kv_group_bytes(e, e->kv_n_groups - 1);
    if (vmm.reserve(&base, span, gran, 0, 0) != CUDA_SUCCESS) {
        free(e->kv_handles);
        e->kv_handles = NULL;
        return hr_err_set(err, HR_ERR_DEVICE, "cannot reserve %.1f MiB of device address "
                          "space for the KV pool", (double)span / 1048576.0);
    }
    e->d_kv = (uint8_t *)(uintptr_t)base;
    e->kv_vmm = true;
    e->mem.kv_reserved_bytes = span;
    e->mem.kv_bytes = 0;
    hr_kv_pool_set_usable(e->kv, 0);
    return HR_OK;
}

static void kv_vmm_free(struct hr_cuda_engine *e)
{
    if (!e->kv_vmm)
        return;
    for (uint32_t g = 0; g < e->kv_mapped; g++) {
        vmm.unmap((CUdeviceptr)(uintptr_t)(e->d_kv + kv_group_at(e, g)), kv_group_bytes(e, g));
        vmm.release(e->kv_handles[g]);
    }
    vmm.address_free((CUdeviceptr)(uintptr_t)e->d_kv, e->mem.kv_reserved_bytes);
    free(e->kv_handles);
    e->d_kv = NULL;
    e->kv_vmm = false;
}

/* Maps group e->kv_mapped; false when the driver has no memory for it (or
 * another error, logged: the pool simply does not grow). */
static bool kv_map_group(struct hr_cuda_engine *e)
{
    const uint32_t g = e->kv_mapped;
    const CUmemAllocationProp prop = vmm_prop(e->cfg.device);
    const CUdeviceptr at = (CUdeviceptr)(uintptr_t)(e->d_kv + kv_group_at(e, g));
    const uint64_t bytes = kv_group_bytes(e, g);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = vmm.create(&h, bytes, &prop, 0);
    if (r != CUDA_SUCCESS) {
        if (r != CUDA_ERROR_OUT_OF_MEMORY)
            hr_log_warn("cuda", "cuMemCreate for a KV group failed (%d)", (int)r);
        return false;
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if ((r = vmm.map(at, bytes, 0, h, 0)) != CUDA_SUCCESS) {
        vmm.release(h);
        hr_log_warn("cuda", "cuMemMap of a KV group failed (%d)", (int)r);
        return false;
    }
    /* Zeroed: a block's bytes never hold another process's data, or NaN
     * patterns, before they are first written. */
    if ((r = vmm.set_access(at, bytes, &acc, 1)) != CUDA_SUCCESS ||
        cudaMemsetAsync((void *)(uintptr_t)at, 0, bytes, e->stream) != cudaSuccess ||
        cudaStreamSynchronize(e->stream) != cudaSuccess) {
        cudaGetLastError();
        vmm.unmap(at, bytes);
        vmm.release(h);
        hr_log_warn("cuda", "making a KV group accessible failed (%d)", (int)r);
        return false;
    }
    e->kv_handles[g] = h;
    e->kv_mapped++;
    e->mem.kv_bytes += bytes;
    const uint64_t usable = (uint64_t)e->kv_mapped * e->kv_group;
    hr_kv_pool_set_usable(e->kv, (uint32_t)(usable < hr_kv_n_blocks(e->kv)
                                                ? usable
                                                : hr_kv_n_blocks(e->kv)));
    return true;
}

uint32_t hr_cuda_engine_kv_ensure(struct hr_cuda_engine *e, uint32_t n_free)
{
    if (!e->kv_vmm || e->lost)
        return hr_kv_n_free(e->kv);
    while (hr_kv_n_free(e->kv) < n_free && e->kv_mapped < e->kv_n_groups) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
            cudaGetLastError();
            break;
        }
        /* Only while another process would still find the low-water mark
         * free afterwards: the room it took is not ours to take back. */
        if ((uint64_t)fr < kv_group_bytes(e, e->kv_mapped) + HR_CUDA_KV_LOW_WATER)
            break;
        if (!kv_map_group(e))
            break;
    }
    return hr_kv_n_free(e->kv);
}

bool hr_cuda_engine_kv_short(struct hr_cuda_engine *e)
{
    size_t fr = 0, tot = 0;
    if (!e->kv_vmm || e->lost || !e->kv_mapped)
        return false;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return (uint64_t)fr < HR_CUDA_KV_LOW_WATER;
}

uint64_t hr_cuda_engine_kv_give_back(struct hr_cuda_engine *e)
{
    if (!e->kv_vmm || e->lost || !e->kv_mapped)
        return 0;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    uint64_t freed = 0;
    while ((uint64_t)fr + freed < HR_CUDA_KV_LOW_WATER && e->kv_mapped > 0) {
        const uint32_t g = e->kv_mapped - 1, first = g * e->kv_group;
        if (hr_kv_n_used_from(e->kv, first))
            break; /* the last group holds KV in use: it stays */
        hr_kv_pool_set_usable(e->kv, first);
        const uint64_t bytes = kv_group_bytes(e, g);
        vmm.unmap((CUdeviceptr)(uintptr_t)(e->d_kv + kv_group_at(e, g)), bytes);
        vmm.release(e->kv_handles[g]);
        e->kv_mapped--;
        e->mem.kv_bytes -= bytes;
        freed += bytes;
    }
    return freed;
}

/* ---- init --------------------------------------------------------------- */

static uint64_t align256(uint64_t x)
{
    return (x + 255) & ~(uint64_t)255;
}

static uint64_t weight_bytes(const struct hr_weight *w)
{
    return w->data ? hr_row_bytes(w->type, w->ne0) * w->ne1 * (w->n_mat ? w->n_mat : 1) : 0;
}

/* The matrices of layer L a forward pass multiplies by (the stacked
 * experts once: their slices share a shape); returns how many. */
static size_t layer_mats(const struct hr_layer *L, const struct hr_weight **out)
{
    size_t n = 0;
#define MAT(name, M)                                                                               \
    if ((M) && L->name.data)                                                                       \
        out[n++] = &L->name;
    LAYER_TENSORS(MAT)
#undef MAT
    return n;
}

static enum hr_cuda_act act_of(enum hr_ggml_type t)
{
    switch (hr_matmul_vec_dot_type(t)) {
    case HR_GGML_F16: return HR_CUDA_ACT_F16;
    case HR_GGML_BF16: return HR_CUDA_ACT_BF16;
    /* Q8_1 (Q4_1, Q5_1) holds Q8_0's quants and scale, plus a sum the
     * CPU's dot uses for the offset term; the inputs' values are Q8_0's */
    case HR_GGML_Q8_0: case HR_GGML_Q8_1: return HR_CUDA_ACT_Q8_0;
    case HR_GGML_Q8_K: return HR_CUDA_ACT_Q8_K;
    default: return HR_CUDA_ACT_F32;
    }
}

static bool kernel_type(enum hr_ggml_type t)
{
    switch (t) {
    case HR_GGML_F32: case HR_GGML_F16: case HR_GGML_BF16: case HR_GGML_Q8_0:
    case HR_GGML_Q4_0: case HR_GGML_Q4_1: case HR_GGML_Q5_0: case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL: case HR_GGML_MXFP4: case HR_GGML_Q2_K: case HR_GGML_Q3_K:
    case HR_GGML_Q4_K: case HR_GGML_Q5_K: case HR_GGML_Q6_K: case HR_GGML_IQ4_XS:
        return true;
    default:
        return false;
    }
}

/* The host tensors in upload order, with their device twins. */
struct upload {
    const struct hr_weight *w;
    struct dweight *dw;
    bool matrix; /* multiplied by (any kernel type); else a vector that must be F32 */
};

static size_t list_uploads(struct hr_cuda_engine *e, struct upload *u)
{
    const struct hr_model *m = e->m;
    size_t n = 0;
#define ADD(host, dev, mat) u[n++] = (struct upload){&(host), &(dev), mat}
    ADD(m->tok_embd, e->tok_embd, true);
    ADD(m->output_norm, e->output_norm, false);
    ADD(m->output, e->output, true);
    ADD(m->rope_freqs, e->rope_freqs, false);
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        struct dlayer *D = &e->layers[l];
#define UP(name, M) ADD(L->name, D->name, (M) != 0);
        LAYER_TENSORS(UP)
#undef UP
        D->moe = L->ffn_kind == HR_FFN_MOE;
        D->dn = L->mixer == HR_MIXER_DELTANET;
        D->kv_layer = L->kv_layer;
        D->dn_layer = L->dn_layer;
        D->window = L->window;
    }
#undef ADD
    return n;
}

/* One allocation for every tensor, each uploaded once (a tied output is the
 * embedding's bytes, shared). */
static bool moe_rows_on(const struct hr_cuda_engine *e, uint32_t T);

static enum hr_status upload_weights(struct hr_cuda_engine *e, struct hr_err *err)
{
    const size_t cap = 4 + (size_t)LAYER_TENSORS_N * e->m->hp.n_layer;
    struct upload *u = calloc(cap, sizeof(*u));
    uint64_t *off = calloc(cap, sizeof(*off));
    if (!u || !off) {
        free(u);
        free(off);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    size_t n = list_uploads(e, u);
    enum hr_status st = HR_OK;
    uint64_t total = 0;
    for (size_t i = 0; i < n && st == HR_OK; i++) {
        const struct hr_weight *w = u[i].w;
        off[i] = UINT64_MAX;
        if (!w->data)
            continue;
        if (u[i].matrix ? !kernel_type(w->type) || w->ne0 % 32 : w->type != HR_GGML_F32) {
            st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor '%s' has type %s, which the CUDA "
                            "kernels cannot compute with", w->name ? w->name : "?",
                            hr_ggml_type_name(w->type));
            break;
        }
        for (size_t j = 0; j < i; j++) /* shared bytes (tied output) */
            if (u[j].w->data == w->data && off[j] != UINT64_MAX)
                off[i] = off[j];
        if (off[i] == UINT64_MAX) {
            off[i] = total;
            total = align256(total + weight_bytes(w));
        }
    }
    if (st == HR_OK)
        st = dev_alloc(e, (void **)&e->d_weights, total, "weights", err);
    for (size_t i = 0; i < n && st == HR_OK; i++) {
        const struct hr_weight *w = u[i].w;
        struct dweight *d = u[i].dw;
        memset(d, 0, sizeof(*d));
        if (!w->data)
            continue;
        d->type = w->type;
        d->ne0 = w->ne0;
        d->ne1 = w->ne1;
        d->row_bytes = hr_row_bytes(w->type, w->ne0);
        d->mat_bytes = d->row_bytes * w->ne1;
        d->act = act_of(w->type);
        d->d = e->d_weights + off[i];
        bool first = true;
        for (size_t j = 0; j < i; j++)
            if (u[j].w->data == w->data)
                first = false;
        if (first) {
            cudaError_t ce = cudaMemcpy(e->d_weights + off[i], w->data, weight_bytes(w),
                                        cudaMemcpyHostToDevice);
            if (ce != cudaSuccess)
                st = cuda_fail(e, err, ce, "uploading the weights");
            /* a model opened for the device keeps no host copy: the tensor's
             * file pages go as soon as it is up (loading holds one tensor) */
            if (st == HR_OK)
                hr_model_release_pages(e->m, w->data, weight_bytes(w));
        }
    }
    e->mem.weights_bytes = total;
    free(u);
    free(off);
    return st;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint64_t dev_used(void)
{
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    return (uint64_t)(tot - fr);
}

void hr_cuda_config_defaults(struct hr_cuda_config *cfg)
{
    if (!cfg->kv_block_tokens)
        cfg->kv_block_tokens = HR_KV_DEFAULT_BLOCK_TOKENS;
    if (!cfg->max_step_tokens)
        cfg->max_step_tokens = 512;
    if (!cfg->max_step_logits || cfg->max_step_logits > cfg->max_step_tokens)
        cfg->max_step_logits = cfg->max_step_tokens;
    if (!cfg->max_step_seqs)
        cfg->max_step_seqs = 64;
    if (cfg->max_step_seqs > cfg->max_step_tokens)
        cfg->max_step_seqs = cfg->max_step_tokens;
    if (!cfg->max_seq_tokens)
        cfg->max_seq_tokens = 4096;
}

/* Whether the integer-GEMM types (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4) take the
 * integer GEMM in prefill (else cuBLASLt on f16 tiles): in MoE models, whose
 * routing is discrete (an f16 rounding of the prefill chose other experts
 * for 3 of 55 rows of a qwen35moe Q8_0 model; none with the integer GEMM);
 * not in dense ones, where f16 tiles are within KL 2e-4 of the CPU and
 * about 3x faster today (H200, 8B Q8_0 pp512: 6.1K tok/s integer on
 * 2026-12-06, 18.2K on f16 tiles on 2026-12-02; not one call).
 * HR_CUDA_GEMM=int or f16 picks one for every model. */
static bool int_gemm_model(const struct hr_model *m)
{
    const char *g = getenv("HR_CUDA_GEMM");
    if (g && !strcmp(g, "int"))
        return true;
    if (g && (!strcmp(g, "f16") || !strcmp(g, "simt")))
        return false;
    return m->moe.n_expert > 0;
}

/* Dense models' steps of more rows than the GEMV takes and at most
 * HR_CUDA_GEMM_SMALL_ROWS multiply their Q4_K matrices on the small integer
 * GEMM, which reads each matrix once as it lies (the f16 path writes and
 * reads a dequantized copy, 4.6 bytes a weight). The general integer GEMM
 * is slower than the f16 path at these sizes (8B shape, 32 rows, H100, same
 * call, 2026-12-07: Q4_K 31.3 ms a step against 25.5, Q8_0 33.3 against
 * 25.6; its stages' loads wait one after another), so the other types stay
 * on the f16 path unless HR_CUDA_INT_ROWS=N sends every integer type's
 * steps of up to N rows to it (the A/B switch). HR_CUDA_GEMM_SMALL=0: the
 * small kernel off. */
static bool small_gemm_on(void)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_GEMM_SMALL");
    return v;
}

/* The types the integer GEMM takes by default: Q4_K only when asked for
 * (HR_CUDA_GEMM=int) - its prefill speed in MoE models is unmeasured, and
 * before 2026-12-07 they multiplied Q4_K on the f16 path. */
static bool int_type(int type, enum hr_cuda_act act)
{
    static int all = -1;
    if (all < 0) {
        const char *g = getenv("HR_CUDA_GEMM");
        all = g && !strcmp(g, "int");
    }
    return hr_cuda_gemm_int_type(type, act) && (all || type != HR_CUDA_T_Q4_K);
}

/* The types a dense model's decode batches take the integer GEMM for:
 * Q4_K (the small kernel), and under HR_CUDA_INT_ROWS the general one's
 * (int_type: Q4_K there only under HR_CUDA_GEMM=int). */
static bool int_type_batch(int type, enum hr_cuda_act act)
{
    if (type == HR_CUDA_T_Q4_K && act == HR_CUDA_ACT_Q8_K && small_gemm_on())
        return true;
    return getenv("HR_CUDA_INT_ROWS") && int_type(type, act);
}

static uint32_t int_gemm_rows(const struct hr_model *m)
{
    const char *g = getenv("HR_CUDA_GEMM"), *r = getenv("HR_CUDA_INT_ROWS");
    if (int_gemm_model(m))
        return UINT32_MAX;
    if (g && (!strcmp(g, "f16") || !strcmp(g, "simt")))
        return 0;
    return r ? (uint32_t)strtoul(r, NULL, 10) : small_gemm_on() ? HR_CUDA_GEMM_SMALL_ROWS : 0;
}

void hr_cuda_engine_dims(const struct hr_model *m, const struct hr_cuda_config *cfg,
                         struct hr_cuda_plan_dims *d)
{
    const struct hr_hparams *hp = &m->hp;
    memset(d, 0, sizeof(*d));
    d->n_embd = hp->n_embd;
    d->n_head = hp->n_head;
    d->n_head_kv = hp->n_head_kv;
    d->head_dim = hp->head_dim_k;
    d->n_rot = hp->n_rot;
    d->n_ff = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if (m->layers[l].ffn_kind == HR_FFN_DENSE)
            d->n_ff = hp->n_ff;
    if (m->moe.n_expert) {
        d->n_ff = d->n_ff > m->moe.n_ff_shexp ? d->n_ff : m->moe.n_ff_shexp;
        d->n_expert = m->moe.n_expert;
        d->n_expert_used = m->moe.n_expert_used;
        d->n_ff_exp = m->moe.n_ff_exp;
    }
    d->attn_gated = m->attn_gated;
    if (m->dn.n_layers) {
        d->dn_conv_dim = m->dn.conv_dim;
        d->dn_value_dim = m->dn.value_dim;
        d->dn_n_v_heads = m->dn.n_v_heads;
    }
    d->n_vocab = hp->n_vocab;
    d->gemv_max_tokens = HR_CUDA_GEMV_MAX_ROWS;
    /* Tensor-core GEMMs for every matrix not in F32; the scratch holds the
     * largest layer matrix of a type that needs dequantizing, and at least
     * 4096 rows of the output matrix (which goes through it in slices). */
    const char *g = getenv("HR_CUDA_GEMM");
    const bool simt = g && !strcmp(g, "simt");
    uint64_t wdq = 0;
    bool tc = false, igm = false;
    /* int_all: every GEMM step of an integer type takes the integer GEMM
     * (no dequantized copy); int_some: the small ones (int_gemm_rows) */
    const bool int_all = int_gemm_model(m), int_some = int_gemm_rows(m) > 0;
    const struct hr_weight *ws[LAYER_MATS];
    for (uint32_t l = 0; l < hp->n_layer && !simt; l++) {
        const size_t n = layer_mats(&m->layers[l], ws);
        for (size_t i = 0; i < n; i++) {
            if (ws[i]->type == HR_GGML_F32)
                continue;
            tc = true;
            const bool it = int_type((int)ws[i]->type, act_of(ws[i]->type));
            if (int_all ? it : int_some && int_type_batch((int)ws[i]->type, act_of(ws[i]->type)))
                igm = true; /* multiplied as it lies, inputs quantized into act16 */
            if (!(it && int_all) && ws[i]->type != HR_GGML_F16 && ws[i]->type != HR_GGML_BF16)
                wdq = max64(wdq, ws[i]->ne0 * ws[i]->ne1);
        }
    }
    const struct hr_weight *out = m->output.data ? &m->output : &m->tok_embd;
    if (!simt && out->data && out->type != HR_GGML_F32) {
        tc = true;
        const bool it = int_type((int)out->type, act_of(out->type));
        if (int_all ? it : int_some && int_type_batch((int)out->type, act_of(out->type)))
            igm = true;
        if (!(it && int_all) && out->type != HR_GGML_F16 && out->type != HR_GGML_BF16)
            wdq = max64(wdq, out->ne0 * (out->ne1 < 4096 ? out->ne1 : 4096));
    }
    d->tc_gemm = tc;
    d->int_gemm = igm;
    d->wdq_elems = wdq;
    /* The integer GEMV's quantized inputs, when a matrix has one. */
    bool ig = out->data && hr_cuda_gemv_int_type((int)out->type, act_of(out->type));
    for (uint32_t l = 0; l < hp->n_layer && !ig; l++) {
        const size_t n = layer_mats(&m->layers[l], ws);
        for (size_t i = 0; i < n; i++)
            if (hr_cuda_gemv_int_type((int)ws[i]->type, act_of(ws[i]->type)))
                ig = true;
    }
    d->int_gemv = ig;
    struct hr_kv_config kc;
    hr_engine_kv_config(m, cfg->kv_type, cfg->kv_block_tokens, cfg->kv_full_window, &kc);
    d->kv_block_bytes = hr_kv_block_bytes_for(&kc);
    d->kv_window = kc.window;
}

static struct hr_cuda_sizing sizing_of(const struct hr_cuda_config *cfg)
{
    return (struct hr_cuda_sizing){.max_step_tokens = cfg->max_step_tokens,
                                   .max_step_logits = cfg->max_step_logits,
                                   .max_step_seqs = cfg->max_step_seqs,
                                   .max_seq_tokens = cfg->max_seq_tokens,
                                   .kv_block_tokens = cfg->kv_block_tokens,
                                   .kv_budget_bytes = cfg->kv_budget_bytes};
}

void hr_cuda_engine_max_plan(const struct hr_cuda_plan_dims *d, const struct hr_cuda_config *cfg,
                             struct hr_cuda_plan *p)
{
    const struct hr_cuda_sizing z = sizing_of(cfg);
    hr_cuda_plan_max(d, &z, p);
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/*
 * Sizes cfg's KV pool and step under cfg->device_limit_bytes from what the
 * device holds now (context, library, weights, and any other process);
 * hr_cuda_plan_size does the arithmetic. Two allocations remain, each
 * rounded up by the driver to its page (2 MiB): that slack is kept out of
 * the room.
 */
static enum hr_status size_under_limit(struct hr_cuda_engine *e, struct hr_cuda_config *cfg,
                                       struct hr_err *err)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return cuda_fail(e, err, cudaGetLastError(), "cudaMemGetInfo");
    const uint64_t slack = 2 * HR_CUDA_ALLOC_GRANULE;
    const uint64_t limit = cfg->device_limit_bytes < tot ? cfg->device_limit_bytes : tot;
    const uint64_t used = (uint64_t)(tot - fr);
    uint64_t room = limit > used + slack ? limit - used - slack : 0;
    if (room > (uint64_t)fr)
        room = fr;
    struct hr_cuda_sizing z = sizing_of(cfg);
    if (hr_cuda_plan_size(&e->dims, &z, room) != 0) {
        struct hr_cuda_plan p;
        hr_cuda_plan_max(&e->dims, &z, &p);
        return hr_err_set(err, HR_ERR_LIMIT,
                          "under the device ceiling of %.1f MiB, %.1f MiB remain after the "
                          "context, library and weights (%.1f MiB in use): not enough for a "
                          "%u-token step arena (%.1f MiB) and the KV of one %u-token "
                          "sequence (%.1f MiB)", mib(limit), mib(room), mib(used),
                          z.max_step_tokens, mib(p.arena_bytes), z.max_seq_tokens,
                          mib(hr_cuda_plan_kv_min(&e->dims, &z)));
    }
    cfg->max_step_tokens = z.max_step_tokens;
    cfg->max_step_logits = z.max_step_logits;
    cfg->max_step_seqs = z.max_step_seqs;
    cfg->kv_budget_bytes = z.kv_budget_bytes;
    return HR_OK;
}

static enum hr_status lt_init(struct hr_cuda_engine *e, struct hr_err *err);

enum hr_status hr_cuda_engine_init(const struct hr_model *m, const struct hr_cuda_config *cfg_in,
                                   struct hr_cuda_engine **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_cuda_config cfg = *cfg_in;
    hr_cuda_config_defaults(&cfg);

    const struct hr_hparams *hp = &m->hp;
    if (m->arch != HR_ARCH_LLAMA && m->arch != HR_ARCH_QWEN2 && m->arch != HR_ARCH_QWEN3 &&
        m->arch != HR_ARCH_QWEN2MOE && m->arch != HR_ARCH_QWEN3MOE && m->arch != HR_ARCH_GPTOSS &&
        m->arch != HR_ARCH_QWEN35 && m->arch != HR_ARCH_QWEN35MOE && m->arch != HR_ARCH_QWEN3NEXT)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "the CUDA engine cannot run architecture %s",
                          hr_arch_name(m->arch));
    if (m->moe.n_expert > HR_CUDA_MOE_MAX_EXPERTS)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "the CUDA engine routes at most %d experts, "
                          "not %u", HR_CUDA_MOE_MAX_EXPERTS, m->moe.n_expert);
    if (hp->head_dim_k != hp->head_dim_v || hp->head_dim_k % 32 ||
        hp->head_dim_k > HR_CUDA_MAX_HEAD_DIM || hp->n_rot > hp->head_dim_k || hp->n_rot % 2)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "the CUDA engine needs head_dim (key %u, value "
                          "%u) equal, a multiple of 32 and at most %u, and n_rot (%u) even and "
                          "within it", hp->head_dim_k, hp->head_dim_v, HR_CUDA_MAX_HEAD_DIM,
                          hp->n_rot);
    if (m->dn.n_layers && (!hr_cuda_dn_head_ok(m->dn.head_k_dim) ||
                           m->dn.head_v_dim != m->dn.head_k_dim ||
                           m->dn.conv_kernel > HR_CUDA_DN_MAX_CONV))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "the CUDA engine's Gated DeltaNet needs head "
                          "dims (key %u, value %u) equal and 32, 64, 96, 128, 192 or 256, and a "
                          "conv of at most %d (not %u)", m->dn.head_k_dim, m->dn.head_v_dim,
                          HR_CUDA_DN_MAX_CONV, m->dn.conv_kernel);
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "n_head %u is not a multiple of n_head_kv %u",
                          hp->n_head, hp->n_head_kv);
    if (cfg.kv_type != HR_GGML_F16 && cfg.kv_type != HR_GGML_F32)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "the CUDA engine's KV cache is f16 or f32, "
                          "not %s", hr_kv_type_name(cfg.kv_type));

    struct hr_cuda_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    e->m = m;
    e->cfg = cfg;
    e->layers = calloc(hp->n_layer, sizeof(*e->layers));
    e->seqs = calloc(cfg.max_step_seqs, sizeof(*e->seqs));
    if (!e->layers || !e->seqs) {
        hr_cuda_engine_free(e);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    enum hr_status st;
#define TRY(call)                                                                                 \
    do {                                                                                          \
        if ((st = (call)) != HR_OK) {                                                             \
            hr_cuda_engine_free(e);                                                               \
            return st;                                                                            \
        }                                                                                         \
    } while (0)
#define TRY_CU(call, what) TRY((call) == cudaSuccess ? HR_OK : cuda_fail(e, err, cudaGetLastError(), what))

    /* The context: created by the first runtime call; what the device then
     * holds is the context's overhead (plus any other process's memory). */
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || cfg.device < 0 || cfg.device >= n_dev) {
        hr_cuda_engine_free(e);
        return hr_err_set(err, HR_ERR_DEVICE, "no CUDA device %d (%d found%s%s)", cfg.device,
                          ce == cudaSuccess ? n_dev : 0, ce == cudaSuccess ? "" : ": ",
                          ce == cudaSuccess ? "" : cudaGetErrorString(ce));
    }
    TRY_CU(cudaSetDevice(cfg.device), "cudaSetDevice");
    TRY_CU(cudaFree(NULL), "creating the CUDA context");
    struct cudaDeviceProp prop;
    TRY_CU(cudaGetDeviceProperties(&prop, cfg.device), "cudaGetDeviceProperties");
    snprintf(e->device_name, sizeof(e->device_name), "%.200s, sm_%d%d, %d SMs, %.1f GiB",
             prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1u << 30));
    size_t fr = 0, tot = 0;
    TRY_CU(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
    e->mem.device_total = tot;
    e->mem.context_bytes = (uint64_t)(tot - fr);

    /* Library: the stream, events and our kernels' code (loaded now, not
     * lazily at first launch inside a step). */
    uint64_t before = dev_used();
    TRY_CU(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    TRY_CU(cudaEventCreate(&e->ev0), "cudaEventCreate");
    TRY_CU(cudaEventCreate(&e->ev1), "cudaEventCreate");
    TRY_CU(hr_cuda_kernels_preload(), "loading the kernels");

    /* Dims and the largest step's plan. */
    struct hr_cuda_plan_dims *d = &e->dims;
    hr_cuda_engine_dims(m, &cfg, d);
    e->int_gemm_rows = int_gemm_rows(m);
    struct hr_kv_config kc;
    hr_engine_kv_config(m, cfg.kv_type, cfg.kv_block_tokens, cfg.kv_full_window, &kc);
    kc.budget_bytes = cfg.kv_budget_bytes;

    TRY(upload_weights(e, err));
    /* Each attention layer's place in a KV block of its kind: a windowed
     * pool (gpt-oss) numbers the sliding-window and full layers apart. */
    e->windowed = kc.window != 0;
    {
        uint32_t *slot = calloc(hp->n_layer ? hp->n_layer : 1, sizeof(*slot));
        if (!slot) {
            hr_cuda_engine_free(e);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        }
        hr_engine_kv_slots(m, e->windowed, slot);
        for (uint32_t l = 0; l < hp->n_layer; l++)
            e->layers[l].kv_layer = slot[l];
        free(slot);
    }
    /* The recurrent state slots (hybrid models): one per sequence a step
     * may hold, allocated now so that the sizing below sees them. */
    uint64_t state_delta = 0;
    if (m->dn.n_layers) {
        const uint64_t slot_floats =
            (uint64_t)m->dn.n_layers * (m->dn.conv_floats + m->dn.ssm_floats);
        TRY(hr_state_pool_init_books(cfg.max_step_seqs, slot_floats, &e->state, err));
        e->mem.state_bytes = hr_state_pool_bytes(e->state);
        const uint64_t s0 = dev_used();
        TRY(dev_alloc(e, (void **)&e->d_state, e->mem.state_bytes, "recurrent state", err));
        state_delta = dev_used() - s0;
    }
    /* Under a device ceiling the KV pool and the arena take what the
     * context, the library and the weights left: measured now, not
     * estimated, so the ceiling holds by construction. */
    if (cfg.device_limit_bytes) {
        TRY(size_under_limit(e, &cfg, err));
        e->cfg = cfg;
        kc.budget_bytes = cfg.kv_budget_bytes;
    }

    TRY(hr_kv_pool_init(&kc, &e->kv, err));
    e->mem.kv_reserved_bytes = (uint64_t)hr_kv_n_blocks(e->kv) * hr_kv_block_bytes(e->kv);
    uint64_t alloc_before = dev_used();
    if (cfg.kv_lazy) {
        TRY(kv_vmm_init(e, err));
    } else {
        e->mem.kv_bytes = e->mem.kv_reserved_bytes;
        TRY(dev_alloc(e, (void **)&e->d_kv, e->mem.kv_bytes, "KV pool", err));
    }

    struct hr_cuda_plan max_plan;
    hr_cuda_engine_max_plan(d, &cfg, &max_plan);
    e->arena_cap = max_plan.arena_bytes;
    e->stage_cap = max_plan.meta_bytes;
    e->mem.arena_bytes = e->arena_cap;
    TRY(dev_alloc(e, (void **)&e->d_arena, e->arena_cap, "step arena", err));
    e->mem.alloc_delta_bytes = dev_used() - alloc_before;
    /* cuBLASLt's handle and the kernels of its chosen algorithms: library. */
    TRY(lt_init(e, err));

    const uint64_t logits_bytes = (uint64_t)cfg.max_step_logits * hp->n_vocab * sizeof(float);
    TRY_CU(cudaMallocHost((void **)&e->h_stage, e->stage_cap ? e->stage_cap : 1), "pinned staging");
    TRY_CU(cudaMallocHost((void **)&e->h_logits, logits_bytes), "pinned logits");
    const uint64_t moe_bytes = (uint64_t)(m->moe.n_expert ? m->moe.n_expert : 1) * sizeof(int32_t);
    TRY_CU(cudaMallocHost((void **)&e->h_moe_off, moe_bytes), "pinned MoE groups");
    e->mem.host_pinned_bytes = e->stage_cap + logits_bytes + moe_bytes;

    /* The library category: everything the device gained that is not ours. */
    e->mem.library_bytes =
        dev_used() - before - e->mem.weights_bytes - e->mem.alloc_delta_bytes - state_delta;
    TRY_CU(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
    e->mem.free_after_init = fr;

    struct hr_rope rope;
    hr_rope_init(m, &rope);
    memcpy(&e->rope, &rope, sizeof(e->rope));

    /* A one-token warm-up step: the decode graph's first instantiation
     * (and any memory the driver takes for it) happens here, not in a step. */
    const char *gv = getenv("HR_CUDA_GRAPH");
    /* MoE layers wait for their routing mid-step (moe_ffn): no graphs,
     * unless their decode runs on expert rows (moe_rows_on). */
    e->graphs = !(gv && !strcmp(gv, "0")) && (!m->moe.n_expert || moe_rows_on(e, 1));
    /* A lazy pool maps its first group now: the warm-up step needs a
     * block, and an empty pool would refuse every request's first step. */
    if (e->kv_vmm && hr_cuda_engine_kv_ensure(e, 1) == 0) {
        hr_cuda_engine_free(e);
        return hr_err_set(err, HR_ERR_NOMEM, "no device memory for the KV pool's first %.1f MiB",
                          mib(e->kv_chunk));
    }
    if (e->graphs) {
        const uint64_t g0 = dev_used();
        struct hr_kv_seq ws;
        int32_t tok0 = 0;
        TRY(hr_cuda_engine_seq_init(e, &ws, 1, err));
        struct hr_step_seq wi = {.kv = &ws, .tokens = &tok0, .n_tokens = 1, .n_logits = 1};
        struct hr_step wst = {.seqs = &wi, .n_seqs = 1};
        st = hr_cuda_engine_step(e, &wst, err);
        hr_state_release(e->state, &ws);
        hr_kv_seq_free(&ws, e->kv);
        if (st != HR_OK) {
            hr_cuda_engine_free(e);
            return st;
        }
        const uint64_t g1 = dev_used();
        e->mem.graph_bytes = g1 > g0 ? g1 - g0 : 0;
        /* The ceiling was sized before the graph existed: if what the
         * graph took crosses it, steps run without graphs. */
        if (cfg.device_limit_bytes && g1 > cfg.device_limit_bytes) {
            cudaGraphExecDestroy(e->gexec);
            e->gexec = NULL;
            e->graphs = false;
            e->mem.graph_bytes = 0;
            hr_log_warn("cuda", "the decode graph (%.1f MiB) would cross the device ceiling; "
                        "steps run without graphs", mib(g1 - g0));
        }
        TRY_CU(cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
        e->mem.free_after_init = fr;
    }
    e->n_allocs_init = e->n_allocs;
#undef TRY
#undef TRY_CU
    *out = e;
    return HR_OK;
}

void hr_cuda_engine_free(struct hr_cuda_engine *e)
{
    if (!e)
        return;
    if (e->stream)
        cudaStreamSynchronize(e->stream);
    if (e->gexec)
        cudaGraphExecDestroy(e->gexec);
    if (e->lt)
        lt_api.destroy(e->lt);
    cudaFree(e->d_weights);
    if (e->kv_vmm)
        kv_vmm_free(e);
    else
        cudaFree(e->d_kv);
    cudaFree(e->d_arena);
    cudaFree(e->d_state);
    hr_state_pool_free(e->state);
    cudaFreeHost(e->h_stage);
    cudaFreeHost(e->h_logits);
    cudaFreeHost(e->h_moe_off);
    if (e->ev0)
        cudaEventDestroy(e->ev0);
    if (e->ev1)
        cudaEventDestroy(e->ev1);
    if (e->stream)
        cudaStreamDestroy(e->stream);
    hr_kv_pool_free(e->kv);
    free(e->layers);
    free(e->seqs);
    free(e);
}

const char *hr_cuda_engine_device_name(const struct hr_cuda_engine *e) { return e->device_name; }
const struct hr_cuda_mem *hr_cuda_engine_mem(const struct hr_cuda_engine *e) { return &e->mem; }
struct hr_kv_pool *hr_cuda_engine_kv_pool(struct hr_cuda_engine *e) { return e->kv; }
struct hr_state_pool *hr_cuda_engine_state_pool(struct hr_cuda_engine *e) { return e->state; }

enum hr_status hr_cuda_engine_state_copy(struct hr_cuda_engine *e, int32_t slot, void *host,
                                         bool to_host, struct hr_err *err)
{
    if (e->lost)
        return hr_err_set(err, HR_ERR_DEVICE, "the CUDA context is lost (an earlier error)");
    HR_ASSERT(e->state && slot >= 0 && (uint32_t)slot < hr_state_n_slots(e->state));
    const uint64_t bytes = hr_state_slot_bytes(e->state);
    uint8_t *d = e->d_state + (uint64_t)slot * bytes;
    cudaError_t ce = to_host ? cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, e->stream)
                             : cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, e->stream);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(e->stream);
    if (ce != cudaSuccess)
        return cuda_fail(e, err, ce, to_host ? "saving a state slot" : "restoring a state slot");
    return HR_OK;
}

const struct hr_cuda_plan_dims *hr_cuda_engine_plan_dims(const struct hr_cuda_engine *e)
{
    return &e->dims;
}
uint64_t hr_cuda_engine_arena_high_water(const struct hr_cuda_engine *e) { return e->high_water; }
uint64_t hr_cuda_engine_arena_capacity(const struct hr_cuda_engine *e) { return e->arena_cap; }
void *hr_cuda_engine_arena_device(struct hr_cuda_engine *e) { return e->d_arena; }
uint64_t hr_cuda_engine_n_device_allocs(const struct hr_cuda_engine *e)
{
    return e->n_allocs - e->n_allocs_init;
}
float hr_cuda_engine_last_step_ms(const struct hr_cuda_engine *e) { return e->last_ms; }
bool hr_cuda_engine_lost(const struct hr_cuda_engine *e) { return e->lost; }

enum hr_status hr_cuda_engine_kv_copy(struct hr_cuda_engine *e, const int32_t *blocks, uint32_t n,
                                      void *host, bool to_host, struct hr_err *err)
{
    if (e->lost)
        return hr_err_set(err, HR_ERR_DEVICE, "the CUDA context is lost (an earlier error)");
    const uint64_t bb = e->dims.kv_block_bytes;
    uint8_t *h = host;
    for (uint32_t i = 0; i < n; i++, h += bb) {
        HR_ASSERT(blocks[i] >= 0 && (uint32_t)blocks[i] < hr_kv_n_blocks(e->kv));
        uint8_t *d = e->d_kv + (uint64_t)blocks[i] * bb;
        cudaError_t ce = to_host ? cudaMemcpyAsync(h, d, bb, cudaMemcpyDeviceToHost, e->stream)
                                 : cudaMemcpyAsync(d, h, bb, cudaMemcpyHostToDevice, e->stream);
        if (ce != cudaSuccess)
            return cuda_fail(e, err, ce, to_host ? "parking KV blocks" : "restoring KV blocks");
    }
    cudaError_t ce = cudaStreamSynchronize(e->stream);
    if (ce != cudaSuccess)
        return cuda_fail(e, err, ce, "the KV copy");
    return HR_OK;
}
const struct hr_cuda_config *hr_cuda_engine_config(const struct hr_cuda_engine *e)
{
    return &e->cfg;
}

enum hr_status hr_cuda_engine_seq_init(struct hr_cuda_engine *e, struct hr_kv_seq *seq,
                                       uint32_t max_tokens, struct hr_err *err)
{
    if (max_tokens > e->cfg.max_seq_tokens)
        return hr_err_set(err, HR_ERR_LIMIT, "a sequence of %u tokens exceeds the CUDA engine's "
                          "max_seq_tokens %u", max_tokens, e->cfg.max_seq_tokens);
    return hr_kv_seq_init(seq, max_tokens, e->cfg.kv_block_tokens, err);
}

void hr_cuda_engine_step_shape(const struct hr_cuda_engine *e, const struct hr_step *step,
                               struct hr_cuda_step_shape *shape)
{
    memset(shape, 0, sizeof(*shape));
    shape->n_seqs = step->n_seqs;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        uint32_t need = hr_kv_blocks_needed(s->kv->n_blocks, s->kv->n_tokens + s->n_tokens,
                                            e->cfg.kv_block_tokens);
        shape->n_tokens += s->n_tokens;
        shape->n_logits += s->n_logits;
        /* both kinds in a windowed pool; the windowed table is as long */
        shape->new_blocks += hr_kv_seq_new_blocks(s->kv, e->kv, s->n_tokens);
        shape->n_table += s->kv->n_blocks + need;
    }
}

void hr_cuda_engine_plan(const struct hr_cuda_engine *e, const struct hr_step *step,
                         struct hr_cuda_plan *plan)
{
    struct hr_cuda_step_shape shape;
    hr_cuda_engine_step_shape(e, step, &shape);
    hr_cuda_plan_layout(&e->dims, &shape, plan);
}

const float *hr_cuda_engine_logits(const struct hr_cuda_engine *e, uint32_t seq, uint32_t j)
{
    HR_ASSERT(seq < e->n_seqs && j < e->seqs[seq].n_logits);
    return e->h_logits + (uint64_t)(e->seqs[seq].first_logit + j) * e->dims.n_vocab;
}

/* ---- tensor-core GEMMs (cuBLASLt) ------------------------------------------ */

static const char *lt_status_str(cublasStatus_t cs)
{
    switch (cs) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

#define LT(call, what)                                                                            \
    do {                                                                                          \
        cublasStatus_t cs_ = (call);                                                              \
        if (cs_ != CUBLAS_STATUS_SUCCESS) {                                                       \
            cudaError_t ce2_ = cudaGetLastError();                                                \
            if (ce2_ != cudaSuccess)                                                              \
                return cuda_fail(e, err, ce2_, what);                                             \
            return hr_err_set(err, HR_ERR_DEVICE, "cuBLASLt error in %s: %s (%d)", what,          \
                              lt_status_str(cs_), (int)cs_);                                      \
        }                                                                                         \
    } while (0)

/*
 * The layouts of y = x W^T in cuBLAS's column-major terms: A = W, n rows of
 * k stored row-major, is k x n column-major, taken transposed (op T); B = x,
 * m rows of k, is k x m (op N); C = D = y, m rows of ldy floats, is n x m
 * with ld ldy. The "TN" layout, the tensor cores' fastest.
 */
static void lt_layouts(uint32_t n, uint32_t k, uint32_t m, uint32_t ldy, int bf16,
                       cublasLtMatrixLayoutOpaque_t *a, cublasLtMatrixLayoutOpaque_t *b,
                       cublasLtMatrixLayoutOpaque_t *c)
{
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    lt_api.layout_init(a, sizeof(*a), t, k, n, k);
    lt_api.layout_init(b, sizeof(*b), t, k, m, k);
    lt_api.layout_init(c, sizeof(*c), CUDA_R_32F, n, m, ldy);
}

static struct lt_shape *lt_find(struct hr_cuda_engine *e, uint32_t n, uint32_t k, int bf16)
{
    for (uint32_t i = 0; i < e->n_lt_shapes; i++) {
        struct lt_shape *sh = &e->lt_shapes[i];
        if (sh->n == n && sh->k == k && sh->bf16 == bf16)
            return sh;
    }
    return NULL;
}

/* y (+)= a16 w16^T: m rows, n weight rows of k (both 16-bit, ld k). */
static enum hr_status lt_matmul(struct hr_cuda_engine *e, const struct lt_shape *sh,
                                const void *w16, const void *a16, uint32_t m, float *y,
                                uint32_t ldy, int accumulate, struct hr_err *err)
{
    cublasLtMatrixLayoutOpaque_t la, lb, lc;
    lt_layouts(sh->n, sh->k, m, ldy, sh->bf16, &la, &lb, &lc);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    LT(lt_api.matmul(e->lt, &e->lt_desc, &alpha, w16, &la, a16, &lb, &beta, y, &lc, y, &lc,
                      &sh->algo, NULL, 0, e->stream), "the tensor-core GEMM");
    return HR_OK;
}

/*
 * Chooses the algorithm of shape (n, k): cuBLASLt's heuristic for the
 * largest step (m = max_step_tokens rows), no workspace; the first
 * candidate without split-K that also runs the smallest GEMM step (m =
 * gemv_max + 1; in a MoE model 1, an expert's group of one row) is kept.
 * None: the shape stays on the f32 GEMM kernel.
 */
static enum hr_status lt_add_shape(struct hr_cuda_engine *e, uint32_t n, uint32_t k, int bf16,
                                   const void *sample_w, struct hr_err *err)
{
    if (lt_find(e, n, k, bf16))
        return HR_OK;
    if (e->n_lt_shapes == LT_MAX_SHAPES)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "more than %d GEMM shapes", LT_MAX_SHAPES);
    struct lt_shape *sh = &e->lt_shapes[e->n_lt_shapes++];
    memset(sh, 0, sizeof(*sh));
    sh->n = n, sh->k = k, sh->bf16 = bf16, sh->sample_w = sample_w;
    /* an expert's group may be one row of a larger step (moe_ffn) */
    const uint32_t m_max = e->cfg.max_step_tokens;
    const uint32_t m_min = e->dims.n_expert ? 1 : e->dims.gemv_max_tokens + 1;
    cublasLtMatrixLayoutOpaque_t la, lb, lc, sa, sb, sc;
    lt_layouts(n, k, m_max, n, bf16, &la, &lb, &lc);
    lt_layouts(n, k, m_min, n, bf16, &sa, &sb, &sc);
    cublasLtMatmulPreferenceOpaque_t pref;
    LT(lt_api.pref_init(&pref, sizeof(pref)), "cublasLtMatmulPreferenceInit");
    const uint64_t ws = 0;
    LT(lt_api.pref_set(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t res[16];
    int n_res = 0;
    LT(lt_api.heuristic(e->lt, &e->lt_desc, &la, &lb, &lc, &lc, &pref, 16, res,
                                      &n_res), "the cuBLASLt heuristic");
    for (int i = 0; i < n_res && !sh->ok; i++) {
        int32_t splitk = 1;
        size_t wr = 0;
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize)
            continue;
        if (lt_api.algo_config_get(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &splitk, sizeof(splitk), &wr) ==
                CUBLAS_STATUS_SUCCESS && splitk > 1)
            continue;
        cublasLtMatmulHeuristicResult_t chk;
        if (lt_api.algo_check(e->lt, &e->lt_desc, &sa, &sb, &sc, &sc, &res[i].algo, &chk) !=
                CUBLAS_STATUS_SUCCESS || chk.workspaceSize)
            continue;
        sh->algo = res[i].algo;
        sh->ok = true;
    }
    if (!sh->ok)
        hr_log_warn("cuda", "no cuBLASLt algorithm without split-K for a %u x %u %s GEMM; it runs "
                    "on the f32 GEMM kernel", n, k, bf16 ? "bf16" : "f16");
    return HR_OK;
}

/* Rows of a matrix of k columns that one dequantized slice holds. */
static uint32_t wdq_rows(const struct hr_cuda_engine *e, uint32_t n, uint32_t k)
{
    uint64_t r = e->dims.wdq_elems / k;
    if (r >= n)
        return n;
    return (uint32_t)(r / 64 * 64); /* slices start 256-byte aligned in y */
}

static bool tc_type(const struct dweight *w)
{
    return w->d && w->type != HR_GGML_F32;
}

/* Multiplied on the int8 tensor cores (hr_cuda_gemm_int), not cuBLASLt,
 * in a GEMM step of step_rows rows (int_gemm_rows: all of them in models
 * that take the integer GEMM, int_gemm_model; decode batches in others). */
static bool int_gemm(const struct hr_cuda_engine *e, const struct dweight *w, uint32_t step_rows)
{
    return e->dims.int_gemm && step_rows <= e->int_gemm_rows && w->d &&
           (e->int_gemm_rows == UINT32_MAX ? int_type((int)w->type, w->act)
                                           : int_type_batch((int)w->type, w->act));
}

/* Multiplied by cuBLASLt on 16-bit tiles in some step. */
static bool lt_type(const struct hr_cuda_engine *e, const struct dweight *w)
{
    return tc_type(w) && !int_gemm(e, w, UINT32_MAX);
}

static bool raw16(const struct dweight *w)
{
    return w->type == HR_GGML_F16 || w->type == HR_GGML_BF16;
}

/* Registers the shapes of matrix w's GEMMs: whole, or its slices. */
static enum hr_status lt_add_matrix(struct hr_cuda_engine *e, const struct dweight *w,
                                    struct hr_err *err)
{
    const uint32_t n = (uint32_t)w->ne1, k = (uint32_t)w->ne0;
    const uint32_t r = raw16(w) ? n : wdq_rows(e, n, k);
    const int bf = w->type == HR_GGML_BF16;
    HR_ASSERT(r > 0);
    enum hr_status st = lt_add_shape(e, r, k, bf, raw16(w) ? w->d : NULL, err);
    if (st == HR_OK && n % r)
        st = lt_add_shape(e, n % r, k, bf, NULL, err);
    return st;
}

/* The shapes the forward pass can multiply on the tensor cores, each
 * chosen and run once (loading its kernel now, not in a step): on arena
 * bytes whose values do not matter, or the weights themselves for F16 and
 * BF16. Needs the arena of the largest step. */
static enum hr_status lt_init(struct hr_cuda_engine *e, struct hr_err *err)
{
    if (!e->dims.tc_gemm || e->cfg.max_step_tokens <= e->dims.gemv_max_tokens)
        return HR_OK;
    enum hr_status ls = lt_api_load(err);
    if (ls != HR_OK)
        return ls;
    LT(lt_api.create(&e->lt), "cublasLtCreate");
    LT(lt_api.desc_init(&e->lt_desc, sizeof(e->lt_desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
       "cublasLtMatmulDescInit");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT(lt_api.desc_set(&e->lt_desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
       "cublasLtMatmulDescSetAttribute");
    LT(lt_api.desc_set(&e->lt_desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
       "cublasLtMatmulDescSetAttribute");
    enum hr_status st = HR_OK;
    for (uint32_t l = 0; l < e->m->hp.n_layer && st == HR_OK; l++) {
        const struct dlayer *D = &e->layers[l];
#define LT_MATRIX(name, M)                                                                         \
    if ((M) == 1 && st == HR_OK && lt_type(e, &D->name))                                           \
        st = lt_add_matrix(e, &D->name, err);
        LAYER_TENSORS(LT_MATRIX)
#undef LT_MATRIX
    }
    const uint32_t n_layer_shapes = e->n_lt_shapes;
    if (st == HR_OK && e->cfg.max_step_logits > e->dims.gemv_max_tokens && lt_type(e, &e->output))
        st = lt_add_matrix(e, &e->output, err);
    if (st != HR_OK)
        return st;
    struct hr_cuda_plan p;
    hr_cuda_engine_max_plan(&e->dims, &e->cfg, &p);
    const uint32_t m = e->dims.gemv_max_tokens + 1;
    for (uint32_t i = 0; i < e->n_lt_shapes; i++) {
        const struct lt_shape *sh = &e->lt_shapes[i];
        if (!sh->ok)
            continue;
        /* y: the act buffer holds m rows of any layer's output (max_in),
         * the logits buffer m rows of the output matrix's */
        const uint64_t y_off = i < n_layer_shapes ? p.off_act : p.off_logits;
        const void *w = sh->sample_w ? sh->sample_w : (const void *)(e->d_arena + p.off_wdq);
        HR_ASSERT(y_off + (uint64_t)m * sh->n * 4 <= e->arena_cap);
        HR_ASSERT(sh->sample_w || p.off_wdq + (uint64_t)sh->n * sh->k * 2 <= e->arena_cap);
        st = lt_matmul(e, sh, w, e->d_arena + p.off_act16, m, (float *)(e->d_arena + y_off),
                       sh->n, 0, err);
        if (st != HR_OK)
            return st;
    }
    CU(cudaStreamSynchronize(e->stream), "the tensor-core GEMMs' first run");
    return HR_OK;
}

/* ---- the forward pass ------------------------------------------------------ */

/* Decode attention a block per KV head's group of query heads, sharing
 * the K/V tiles (H100, same call: 8B Q4_K tg128 at 16K 62.6 -> 107.7
 * tok/s), on tensor cores where the shape allows (hr_cuda_attn_args.gqa
 * 2); HR_CUDA_ATTN_GQA=1: the f32 block per group, 0: a warp per head
 * (the A/B switches). */
static uint32_t attn_gqa_on(void)
{
    static int v = -1;
    if (v < 0) {
        const char *s = getenv("HR_CUDA_ATTN_GQA");
        v = s && (!strcmp(s, "0") || !strcmp(s, "1")) ? s[0] - '0' : 2;
    }
    return (uint32_t)v;
}

/* HR_CUDA_ATTN_SPLIT=0: decode attention one warp per (token, head), not
 * split over keys (the A/B switch benchmarks use). */
static bool attn_split_on(void)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_ATTN_SPLIT");
    return v;
}

/* A decode token's keys in up to this many runs (blocks) of the split
 * attention: HR_CUDA_ATTN_NSPLIT (1 .. HR_CUDA_ATTN_SPLITS, the plan's
 * room), else about 256 blocks a token over its KV heads (two a streaming
 * multiprocessor on an H100 or H200, one wave): the tensor-core kernel at
 * 16K positions, H100, 2026-12-07, same call: the 8B shape (8 KV heads)
 * 215 tok/s at 64 runs and 225 at 32, Qwen2.5-0.5B (2) 869 at 64 and 790
 * at 32. From the model only, never the step, so that a token's result
 * does not depend on its batch. */
static uint32_t attn_nsplit(const struct hr_cuda_engine *e)
{
    static long env = -1;
    if (env < 0) {
        const char *s = getenv("HR_CUDA_ATTN_NSPLIT");
        const unsigned long n = s ? strtoul(s, NULL, 10) : 0;
        env = n >= 1 && n <= HR_CUDA_ATTN_SPLITS ? (long)n : 0;
    }
    if (env)
        return (uint32_t)env;
    const uint32_t v = 256 / (e->dims.n_head_kv ? e->dims.n_head_kv : 1);
    return v < 1 ? 1 : v > HR_CUDA_ATTN_SPLITS ? HR_CUDA_ATTN_SPLITS : v;
}

/* Every buffer the runner touches comes through here, so the high-water mark
 * is exactly the end of the furthest buffer used. */
static void *view(struct hr_cuda_engine *e, uint64_t off, uint64_t bytes)
{
    HR_ASSERT(off + bytes <= e->arena_cap);
    if (bytes && off + bytes > e->high_water)
        e->high_water = off + bytes;
    return e->d_arena + off;
}

struct fwd {
    int32_t *tokens, *pos, *seq_of, *rows, *tab_off, *tables, *seq_fa, *tiles;
    int32_t *wtables; /* windowed pools: the sliding-window layers' tables (tab_off's offsets) */
    uint32_t n_tiles;
    float *rope, *x, *xn, *act, *q, *k, *v, *attn, *gate, *up, *out_x, *logits;
    /* MoE (cuda-plan.h); NULL in dense models */
    float *moe_logits, *moe_w, *moe_shg, *moe_x, *moe_gu, *moe_h;
    int32_t *moe_sel, *moe_row, *moe_tok, *moe_rx, *moe_off;
    /* gated attention and the Gated DeltaNet (cuda-plan.h); NULL where absent */
    float *qg, *qgate, *dn_qkv, *dn_z, *dn_beta, *dn_g, *dn_conv, *dn_o;
    float *attn_part; /* decode steps: the split attention's runs; else NULL */
    int32_t *seq_tok, *seq_slot;
    uint32_t *ctr; /* the fused decode kernels' counters (cuda-plan.h's ctr) */
    void *act16, *wdq; /* NULL in steps without tensor-core GEMMs */
    struct hr_cuda_q8_act actq; /* q NULL in models without integer GEMVs */
    struct hr_cuda_q8_act actq16; /* the integer GEMM's inputs in act16; q NULL without */
};

#define TRY(call)                                                                                 \
    do {                                                                                          \
        enum hr_status st_ = (call);                                                              \
        if (st_ != HR_OK)                                                                         \
            return st_;                                                                           \
    } while (0)

/*
 * A matmul's input is prepared in one of four forms: rounded to the
 * vec-dot type as f32 (act), quantized for the integer GEMV (actq) or the
 * integer GEMM (actq16, in act16's bytes), or rounded and stored as 16-bit
 * floats (act16). Matmuls that share an input
 * (Q, K and V; gate and up) prepare it once: the form last made is
 * remembered until the forward pass rewrites a buffer (prep_forget). A
 * norm may also have made the form its first reader asks for (norm_for):
 * that "prime" answers the next request only, whatever it asks, so no
 * later write to act/actq can leave it stale.
 */
enum prep_kind { PREP_F32, PREP_INT, PREP_HALF, PREP_HALF_BF, PREP_INT_WIDE };

static bool prep_have(struct hr_cuda_engine *e, const float *x, uint32_t m, uint32_t k,
                      enum hr_cuda_act act, enum prep_kind kind)
{
    if (e->prep_valid && e->prep_x == x && e->prep_m == m && e->prep_k == k &&
        e->prep_act == act && e->prep_kind == (int)kind)
        return true;
    const bool primed = e->prime_valid && e->prime_x == x && e->prime_m == m &&
                        e->prime_k == k && e->prime_act == act && e->prime_kind == (int)kind;
    e->prime_valid = false;
    e->prep_valid = true, e->prep_x = x, e->prep_m = m, e->prep_k = k;
    e->prep_act = act, e->prep_kind = (int)kind;
    return primed;
}

static void prep_forget(struct hr_cuda_engine *e)
{
    e->prep_valid = false;
}

/* y (+)= round(x) W^T on the tensor cores; false when the shape has no
 * algorithm (the caller runs the f32 GEMM). */
static enum hr_status matmul_tc(struct hr_cuda_engine *e, const struct fwd *f,
                                const struct dweight *w, const float *x, uint32_t m, float *y,
                                uint32_t ldy, int accumulate, bool *done, struct hr_err *err)
{
    const uint32_t k = (uint32_t)w->ne0, n = (uint32_t)w->ne1;
    const int bf = w->type == HR_GGML_BF16;
    const uint32_t r = raw16(w) ? n : wdq_rows(e, n, k);
    const struct lt_shape *full = lt_find(e, r, k, bf);
    const struct lt_shape *rest = n % r ? lt_find(e, n % r, k, bf) : full;
    *done = false;
    if (!full || !full->ok || !rest || !rest->ok || !f->act16)
        return HR_OK;
    if (!prep_have(e, x, m, k, w->act, bf ? PREP_HALF_BF : PREP_HALF))
        CU(hr_cuda_act_round_half(w->act, x, m, k, f->act16, bf, e->stream),
           "rounding matmul inputs to 16 bits");
    for (uint32_t r0 = 0; r0 < n; r0 += r) {
        const uint32_t nr = n - r0 < r ? n - r0 : r;
        const void *w16 = w->d + (uint64_t)r0 * w->row_bytes;
        if (!raw16(w)) {
            CU(hr_cuda_dequant_half((int)w->type, w->d, w->row_bytes, k, r0, nr, f->wdq, bf,
                                    e->stream), "dequantizing a weight tile");
            w16 = f->wdq;
        }
        TRY(lt_matmul(e, nr == r ? full : rest, w16, f->act16, m, y + r0, ldy, accumulate, err));
    }
    *done = true;
    return HR_OK;
}

/* y (+)= round(x) W^T (+ b) on the f32 GEMM kernel (CUDA cores), on the
 * inputs rounded to the vec-dot format: the CPU's values, no 16-bit tile. */
static enum hr_status matmul_simt(struct hr_cuda_engine *e, const struct fwd *f,
                                  const struct dweight *w, const float *x, uint32_t m, float *y,
                                  uint32_t ldy, const float *b, int accumulate, struct hr_err *err)
{
    const uint32_t k = (uint32_t)w->ne0, n = (uint32_t)w->ne1;
    const float *in = x;
    if (w->act != HR_CUDA_ACT_F32) {
        if (!prep_have(e, x, m, k, w->act, PREP_F32))
            CU(hr_cuda_act_round(w->act, x, m, k, f->act, e->stream), "rounding matmul inputs");
        in = f->act;
    }
    CU(hr_cuda_gemm((int)w->type, w->d, w->row_bytes, k, n, in, m, y, ldy, b, accumulate,
                    e->stream), "the GEMM kernel");
    return HR_OK;
}

static void gemv_out_init(hr_cuda_gemv_out *o)
{
    memset(o, 0, sizeof(*o));
}

/* Appends matrix w (its rows to y, row stride ldy, bias b or NULL). */
static void gemv_out_add(hr_cuda_gemv_out *o, const struct dweight *w, float *y, uint32_t ldy,
                         const float *b)
{
    const uint32_t p = o->n_parts++;
    HR_ASSERT(p < HR_CUDA_GEMV_PARTS);
    o->w[p] = w->d, o->y[p] = y, o->bias[p] = b, o->ldy[p] = ldy;
    o->n += (uint32_t)w->ne1;
    for (uint32_t q = p; q < HR_CUDA_GEMV_PARTS; q++)
        o->end[q] = o->n;
}

/* The GEMV of o's parts (all of w's type and row length) on x's m rows:
 * the integer kernel on quantized inputs where the type has one, else the
 * float kernel on inputs rounded as the CPU's vec dot rounds them. */
static enum hr_status gemv_run(struct hr_cuda_engine *e, const struct fwd *f,
                               const struct dweight *w, const hr_cuda_gemv_out *o, const float *x,
                               uint32_t m, int accumulate, struct hr_err *err)
{
    const uint32_t k = (uint32_t)w->ne0;
    if (f->actq.q && hr_cuda_gemv_int_type((int)w->type, w->act)) {
        if (!prep_have(e, x, m, k, w->act, PREP_INT))
            CU(hr_cuda_quant_act(w->act, x, m, k, &f->actq, e->stream),
               "quantizing matmul inputs");
        CU(hr_cuda_gemv_int_parts((int)w->type, w->row_bytes, k, o, &f->actq, m, accumulate,
                                  e->stream), "the integer GEMV kernel");
        return HR_OK;
    }
    const float *in = x;
    if (w->act != HR_CUDA_ACT_F32) {
        if (!prep_have(e, x, m, k, w->act, PREP_F32))
            CU(hr_cuda_act_round(w->act, x, m, k, f->act, e->stream), "rounding matmul inputs");
        in = f->act;
    }
    CU(hr_cuda_gemv_parts((int)w->type, w->row_bytes, k, o, in, m, accumulate, e->stream),
       "the GEMV kernel");
    return HR_OK;
}

/* The decode step's fusions, each the same bits with a launch less and
 * off until measured on a GPU (HR_CUDA_<name>_FUSE=1):
 * - NORM: the RMSNorm before Q/K/V and gate/up inside their GEMV when it
 *   is the pipelined kernel (hr_cuda_gemv_normed; one-token steps);
 * - SWIGLU (with NORM): the SwiGLU and down's inputs inside that gate/up
 *   launch (hr_cuda_swiglu_q8);
 * - ATTN: the attention merges its key runs and makes Wo's inputs in its
 *   own last blocks (hr_cuda_attn_args.ctr);
 * - QKV (with ATTN): the biases, Q/K norms, RoPE and KV store done by the
 *   attention kernel (hr_cuda_attn_args.qkv; steps of one token a
 *   sequence). */
enum fusion { FUSE_NORM, FUSE_SWIGLU, FUSE_ATTN, FUSE_QKV, FUSE_N };

static bool fusion_on(enum fusion fu)
{
    static const char *const name[FUSE_N] = {"HR_CUDA_NORM_FUSE", "HR_CUDA_SWIGLU_FUSE",
                                             "HR_CUDA_ATTN_FUSE", "HR_CUDA_QKV_FUSE"};
    static int v[FUSE_N] = {-1, -1, -1, -1};
    if (v[fu] < 0) {
        const char *s = getenv(name[fu]);
        v[fu] = s && !strcmp(s, "1");
    }
    return v[fu];
}

/* y (+)= round(x) W^T (+ bias) over m rows, on the GEMV kernels when the
 * step has at most gemv_max_tokens rows (step_rows), else the GEMM. */
static enum hr_status norm_flush(struct hr_cuda_engine *e, const struct fwd *f,
                                 struct hr_err *err);

static enum hr_status matmul_in_step(struct hr_cuda_engine *e, const struct fwd *f,
                                     const struct dweight *w, const float *x, uint32_t m,
                                     uint32_t step_rows, float *y, uint32_t ldy,
                                     const struct dweight *bias, int accumulate,
                                     struct hr_err *err)
{
    const uint32_t k = (uint32_t)w->ne0, n = (uint32_t)w->ne1;
    const float *b = bias && bias->d ? (const float *)bias->d : NULL;
    HR_ASSERT(m <= step_rows);
    if (e->norm_pending)
        TRY(norm_flush(e, f, err));
    if (step_rows <= e->dims.gemv_max_tokens) {
        hr_cuda_gemv_out o;
        gemv_out_init(&o);
        gemv_out_add(&o, w, y, ldy, b);
        return gemv_run(e, f, w, &o, x, m, accumulate, err);
    }
    if (f->actq16.q && int_gemm(e, w, step_rows)) {
        if (!prep_have(e, x, m, k, w->act, PREP_INT_WIDE))
            CU(hr_cuda_quant_act(w->act, x, m, k, &f->actq16, e->stream),
               "quantizing matmul inputs");
        if (e->int_gemm_rows != UINT32_MAX && w->type == HR_GGML_Q4_K && small_gemm_on() &&
            step_rows <= HR_CUDA_GEMM_SMALL_ROWS)
            CU(hr_cuda_gemm_q4k_small(w->d, w->row_bytes, k, n, &f->actq16, m, y, ldy, b,
                                      accumulate, e->stream), "the small integer GEMM kernel");
        else
            CU(hr_cuda_gemm_int((int)w->type, w->d, w->row_bytes, k, n, &f->actq16, m, y, ldy,
                                b, accumulate, e->stream), "the integer GEMM kernel");
        return HR_OK;
    }
    if (tc_type(w)) {
        bool done = false;
        TRY(matmul_tc(e, f, w, x, m, y, ldy, accumulate, &done, err));
        if (done) {
            if (b)
                CU(hr_cuda_add_bias(y, m, n, ldy, b, e->stream), "the bias");
            return HR_OK;
        }
    }
    return matmul_simt(e, f, w, x, m, y, ldy, b, accumulate, err);
}

/* y (+)= round(x) W^T (+ bias): all m rows of the step. */
static enum hr_status matmul(struct hr_cuda_engine *e, const struct fwd *f,
                             const struct dweight *w, const float *x, uint32_t m, float *y,
                             uint32_t ldy, const struct dweight *bias, int accumulate,
                             struct hr_err *err)
{
    return matmul_in_step(e, f, w, x, m, m, y, ldy, bias, accumulate, err);
}

/* Matrices of one type and row length on the same inputs (Q, K, V; gate
 * and up): in a GEMV step ONE launch (hr_cuda_gemv_parts computes each row
 * as its matrix alone would, so results do not change), else a matmul
 * each. HR_CUDA_FUSE=0: a launch each (the A/B switch). */
static bool fuse_on(void)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_FUSE");
    return v;
}

/* The attention merge makes Wo's Q8_K inputs too (a block per super-block
 * of heads), where a separate quant_q8k launch did before 2026-12-07; its
 * bit-for-bit check against that launch (test-cuda-kernels) and the engine
 * tests with it passed on an H100 that day. 8B Q4_K decode step there
 * (HR_BENCH_QUICK=1 bench-cuda, two alternating rounds): 2.770 / 2.770 ms
 * with it against 2.800 / 2.799 without. HR_CUDA_MERGE_Q8K=0 for A/B. */
static bool merge_q8k_on(void)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_MERGE_Q8K");
    return v;
}

static enum hr_status matmul_parts(struct hr_cuda_engine *e, const struct fwd *f,
                                   const struct dweight *const *w, float *const *y,
                                   const uint32_t *ldy, uint32_t n_parts, const float *x,
                                   uint32_t m, struct hr_err *err)
{
    bool one = fuse_on() && m <= e->dims.gemv_max_tokens && n_parts <= HR_CUDA_GEMV_PARTS;
    for (uint32_t p = 1; one && p < n_parts; p++)
        one = w[p]->type == w[0]->type && w[p]->act == w[0]->act && w[p]->ne0 == w[0]->ne0 &&
              w[p]->row_bytes == w[0]->row_bytes;
    if (!one) {
        for (uint32_t p = 0; p < n_parts; p++)
            TRY(matmul(e, f, w[p], x, m, y[p], ldy[p], NULL, 0, err));
        return HR_OK;
    }
    hr_cuda_gemv_out o;
    gemv_out_init(&o);
    for (uint32_t p = 0; p < n_parts; p++)
        gemv_out_add(&o, w[p], y[p], ldy[p], NULL);
    /* the one launch is xn's one reader: it may do the deferred norm */
    if (e->norm_pending && x == e->norm_xn && m == 1 && w[0]->type == e->norm_next->type &&
        w[0]->ne0 == e->dims.n_embd) {
        e->norm_pending = false;
        prep_forget(e); /* neither xn nor the quantized inputs are written */
        CU(hr_cuda_gemv_normed((int)w[0]->type, w[0]->row_bytes, (uint32_t)w[0]->ne0, &o,
                               e->norm_x, e->norm_w, e->norm_eps, NULL, 0, e->stream),
           "the integer GEMV with its norm");
        return HR_OK;
    }
    TRY(norm_flush(e, f, err));
    return gemv_run(e, f, w[0], &o, x, m, 0, err);
}

/* y = round(x) W^T on the CUDA cores in f32 whatever the step's size: the
 * GEMV up to gemv_max_tokens rows, else the f32 GEMM on inputs rounded to
 * the vec-dot format (the CPU's values; no f16 tile). For the few-row
 * matrices whose outputs a recurrence compounds (see deltanet_mixer). */
static enum hr_status matmul_f32(struct hr_cuda_engine *e, const struct fwd *f,
                                 const struct dweight *w, const float *x, uint32_t m, float *y,
                                 uint32_t ldy, struct hr_err *err)
{
    if (m <= e->dims.gemv_max_tokens)
        return matmul(e, f, w, x, m, y, ldy, NULL, 0, err);
    return matmul_simt(e, f, w, x, m, y, ldy, NULL, 0, err);
}

/* Expert x of a stacked weight as a plain matrix. */
static struct dweight expert_of(const struct dweight *w, uint32_t x)
{
    struct dweight s = *w;
    s.d = w->d + (uint64_t)x * w->mat_bytes;
    return s;
}

/* What a fused kernel can make for `next`'s GEMV on a T x k input: Q8_0
 * (or Q8_K where the kernel can: q8k_ok) for the integer GEMV, f16-rounded
 * values for F16 weights; none else (or past the GEMV, or with
 * HR_CUDA_FUSE=0). */
static hr_cuda_norm_prep prep_for(const struct hr_cuda_engine *e, const struct fwd *f,
                                  const struct dweight *next, uint32_t T, uint32_t k,
                                  bool q8k_ok, enum prep_kind *kind)
{
    hr_cuda_norm_prep pr;
    memset(&pr, 0, sizeof(pr));
    *kind = PREP_F32;
    if (!next || !fuse_on() || T > e->dims.gemv_max_tokens || k % 32)
        return pr;
    const bool int_gemv = f->actq.q && hr_cuda_gemv_int_type((int)next->type, next->act);
    if (int_gemv && next->act == HR_CUDA_ACT_Q8_0)
        pr.kind = HR_CUDA_NORM_PREP_Q8_0, pr.q = f->actq, *kind = PREP_INT;
    else if (int_gemv && next->act == HR_CUDA_ACT_Q8_K && k % 256 == 0 && q8k_ok)
        pr.kind = HR_CUDA_NORM_PREP_Q8_K, pr.q = f->actq, *kind = PREP_INT;
    else if (!int_gemv && next->act == HR_CUDA_ACT_F16)
        pr.kind = HR_CUDA_NORM_PREP_F16, pr.act = f->act;
    return pr;
}

/* prep_have's answer for the next request: x's m x k made for `next`. */
static void prep_prime(struct hr_cuda_engine *e, const float *x, uint32_t m, uint32_t k,
                       const struct dweight *next, enum prep_kind kind)
{
    e->prime_valid = true, e->prime_x = x, e->prime_m = m, e->prime_k = k;
    e->prime_act = next->act, e->prime_kind = (int)kind;
}

/* The deferred norm launched after all (its reader is not the GEMV that
 * takes it), exactly as norm_for would have. */
static enum hr_status norm_flush(struct hr_cuda_engine *e, const struct fwd *f,
                                 struct hr_err *err)
{
    if (!e->norm_pending)
        return HR_OK;
    e->norm_pending = false;
    hr_cuda_norm_prep pr;
    memset(&pr, 0, sizeof(pr));
    pr.kind = e->norm_kind, pr.q = f->actq;
    const uint32_t E = e->dims.n_embd;
    CU(hr_cuda_rms_norm_prep((float *)e->norm_x, 1, E, e->norm_w, e->norm_eps, e->norm_xn, &pr,
                             e->stream), "a norm with the next matmul's inputs");
    prep_prime(e, e->norm_xn, 1, E, e->norm_next, PREP_INT);
    return HR_OK;
}

/* gate = silu(gate) * up (T x F), with wd's inputs made too where a fused
 * kernel can (prep_for). */
static enum hr_status swiglu_for(struct hr_cuda_engine *e, const struct fwd *f,
                                 const struct dweight *wd, uint32_t T, uint32_t F,
                                 struct hr_err *err)
{
    enum prep_kind kind;
    const hr_cuda_norm_prep pr = prep_for(e, f, wd, T, F, true, &kind);
    e->prime_valid = false;
    if (pr.kind == HR_CUDA_NORM_PREP_NONE) {
        CU(hr_cuda_swiglu(f->gate, f->up, (uint64_t)T * F, e->stream), "SwiGLU");
        return HR_OK;
    }
    CU(hr_cuda_swiglu_prep(f->gate, f->up, (uint64_t)T * F, &pr, e->stream),
       "SwiGLU with the down matmul's inputs");
    prep_prime(e, f->gate, T, F, wd, kind);
    return HR_OK;
}

/* Gate/up, the SwiGLU and down's inputs in one launch where the pending
 * norm is xn's and everything the fused kernel needs holds (FUSE_SWIGLU);
 * *done false: nothing was launched. */
static enum hr_status swiglu_fused(struct hr_cuda_engine *e, const struct fwd *f,
                                   const struct dweight *wg, const struct dweight *wu,
                                   const struct dweight *wd, uint32_t T, bool *done,
                                   struct hr_err *err)
{
    const uint32_t F = (uint32_t)wg->ne1, E = e->dims.n_embd;
    *done = false;
    const bool q4k = wg->type == HR_GGML_Q4_K;
    if (!fusion_on(FUSE_SWIGLU) || !e->norm_pending || e->norm_xn != f->xn || T != 1 ||
        !e->dims.int_gemv || F % (q4k ? 256 : 32) || F > e->dims.n_ff ||
        wu->type != wg->type || e->norm_next != wg || wu->ne1 != F || wg->ne0 != E ||
        wu->ne0 != E || wu->row_bytes != wg->row_bytes || !hr_cuda_gemv_normed_ok((int)wg->type, E))
        return HR_OK;
    enum prep_kind kind;
    const hr_cuda_norm_prep pr = prep_for(e, f, wd, T, F, true, &kind);
    if (pr.kind != (q4k ? HR_CUDA_NORM_PREP_Q8_K : HR_CUDA_NORM_PREP_Q8_0))
        return HR_OK;
    hr_cuda_gemv_out o;
    gemv_out_init(&o);
    gemv_out_add(&o, wg, f->gate, F, NULL);
    gemv_out_add(&o, wu, f->up, F, NULL);
    /* the attention's counters first (hr_cuda_plan_ctr_bytes) */
    const hr_cuda_swiglu_q8 sw = {.q = pr.q, .ctr = f->ctr + hr_cuda_plan_ctr_attn(&e->dims)};
    e->norm_pending = false;
    prep_forget(e);
    e->prime_valid = false;
    CU(hr_cuda_gemv_normed((int)wg->type, wg->row_bytes, E, &o, e->norm_x, e->norm_w,
                           e->norm_eps, &sw, 0, e->stream),
       "the integer GEMV with its norm and SwiGLU");
    prep_prime(e, f->gate, T, F, wd, kind);
    *done = true;
    return HR_OK;
}

/* gate (T x F) = silu(xn Wg^T) * (xn Wu^T); y (+)= gate Wd^T. */
static enum hr_status dense_ffn(struct hr_cuda_engine *e, const struct fwd *f,
                                const struct dweight *wg, const struct dweight *wu,
                                const struct dweight *wd, uint32_t T, float *y, int accumulate,
                                struct hr_err *err)
{
    const uint32_t F = (uint32_t)wg->ne1, E = e->dims.n_embd;
    prep_forget(e);
    bool fused;
    TRY(swiglu_fused(e, f, wg, wu, wd, T, &fused, err));
    if (!fused) {
        const struct dweight *gu[2] = {wg, wu};
        float *const gy[2] = {f->gate, f->up};
        const uint32_t gl[2] = {F, F};
        TRY(matmul_parts(e, f, gu, gy, gl, 2, f->xn, T, err));
        TRY(swiglu_for(e, f, wd, T, F, err));
    }
    prep_forget(e);
    TRY(matmul(e, f, wd, f->gate, T, y, E, NULL, accumulate, err));
    prep_forget(e);
    return HR_OK;
}

/* A MoE layer's experts in a GEMV step as one launch on expert rows
 * (hr_cuda_gemv_out.rx) instead of a launch per expert after the groups
 * come back to the host: no wait mid-step, so MoE decode steps run as a
 * CUDA graph too. Each row is computed as before (a GEMV row's sum depends
 * on k only), so the results are the same. The default since 2026-12-07
 * (H100, the Qwen3-30B-A3B shape cut to 8 layers, Q8_0, through serve, one
 * round: 1 stream 571.3 -> 912.7 tok/s, 8 streams 1,983.6 -> 2,698.7);
 * HR_CUDA_MOE_ROWS=0 keeps the grouped launches and the wait. */
static bool moe_rows_on(const struct hr_cuda_engine *e, uint32_t T)
{
    static int v = -1;
    if (v < 0)
        v = hr_env_on("HR_CUDA_MOE_ROWS");
    return v && T <= e->dims.gemv_max_tokens;
}

/* moe_ffn's steps 7 and 8, after the experts' down matmuls: the shared
 * expert, on xn, into xn; then per token the weighted experts in slot
 * order, the shared expert, the residual. */
static enum hr_status moe_finish(struct hr_cuda_engine *e, const struct fwd *f,
                                 const struct dlayer *D, uint32_t T, struct hr_err *err)
{
    const struct hr_moe *mo = &e->m->moe;
    prep_forget(e);
    if (mo->shexp != HR_SHEXP_NONE)
        TRY(dense_ffn(e, f, &D->gate_shexp, &D->up_shexp, &D->down_shexp, T, f->xn, 0, err));
    struct hr_cuda_moe_combine_args ca = {
        .x = f->x, .y = f->moe_x, .down_b = (const float *)D->down_exps_b.d,
        .shx = mo->shexp != HR_SHEXP_NONE ? f->xn : NULL,
        .shg = mo->shexp == HR_SHEXP_SIGMOID ? f->moe_shg : NULL, .row = f->moe_row,
        .sel = f->moe_sel, .w = f->moe_w, .n_tokens = T, .k = mo->n_expert_used,
        .n_embd = e->dims.n_embd};
    CU(hr_cuda_moe_combine(&ca, e->stream), "combining the experts");
    return HR_OK;
}

/* moe_ffn's steps 4-6 in a GEMV step, the experts on expert rows: gate and
 * up as one launch over the TK gathered rows (row r by expert moe_rx[r]),
 * the activation, down the same way; then moe_finish. */
static enum hr_status moe_experts_rows(struct hr_cuda_engine *e, const struct fwd *f,
                                       const struct dlayer *D, uint32_t T, struct hr_err *err)
{
    const struct hr_moe *mo = &e->m->moe;
    const uint32_t E = e->dims.n_embd, K = mo->n_expert_used, FX = mo->n_ff_exp, TK = T * K;
    cudaStream_t s = e->stream;
    hr_cuda_gemv_out o;
    prep_forget(e);
    gemv_out_init(&o);
    gemv_out_add(&o, &D->gate_exps, f->moe_gu, 2 * FX, NULL);
    if (D->up_exps.d) {
        HR_ASSERT(D->up_exps.type == D->gate_exps.type &&
                  D->up_exps.mat_bytes == D->gate_exps.mat_bytes);
        gemv_out_add(&o, &D->up_exps, f->moe_gu + FX, 2 * FX, NULL);
    }
    o.rx = f->moe_rx, o.mat_bytes = D->gate_exps.mat_bytes;
    TRY(gemv_run(e, f, &D->gate_exps, &o, f->moe_x, TK, 0, err));
    CU(hr_cuda_moe_act(f->moe_gu, f->moe_rx, TK, FX, (const float *)D->gate_exps_b.d,
                       (const float *)D->up_exps_b.d, mo->act == HR_FFN_ACT_SWIGLU_OAI,
                       f->moe_h, s), "the MoE activation");
    prep_forget(e);
    gemv_out_init(&o);
    gemv_out_add(&o, &D->down_exps, f->moe_x, E, NULL);
    o.rx = f->moe_rx, o.mat_bytes = D->down_exps.mat_bytes;
    TRY(gemv_run(e, f, &D->down_exps, &o, f->moe_h, TK, 0, err));
    return moe_finish(e, f, D, T, err);
}

/*
 * The MoE FFN (engine.c's moe_ffn, the same steps): x += sum over each
 * token's k experts of weight x expert(xn) [+ the shared expert].
 *
 * Routing and the grouping of the T k (token, slot) pairs by expert run on
 * the device; the groups' ends come back to the host (one small copy and a
 * wait per layer), which then runs each expert that has rows as one matmul
 * over them, on the kernels the step's size picks for every matrix (the
 * GEMV for up to gemv_max_tokens tokens, else the tensor-core GEMM, even
 * for a group of one row): a token's result depends only on its own rows
 * and on that threshold, as with dense matrices, never on how many other
 * tokens chose its experts. The wait keeps MoE steps out of CUDA graphs;
 * in a GEMV step the experts can instead run on expert rows, with no wait
 * (moe_rows_on, moe_experts_rows).
 */
static enum hr_status moe_ffn(struct hr_cuda_engine *e, const struct fwd *f,
                              const struct dlayer *D, uint32_t T, struct hr_err *err)
{
    const struct hr_moe *mo = &e->m->moe;
    const uint32_t E = e->dims.n_embd, K = mo->n_expert_used, NX = mo->n_expert;
    const uint32_t FX = mo->n_ff_exp, TK = T * K;
    cudaStream_t s = e->stream;

    /* 1. The router's logits, each token's experts and weights. */
    prep_forget(e);
    TRY(matmul(e, f, &D->gate_inp, f->xn, T, f->moe_logits, NX, NULL, 0, err));
    struct hr_cuda_moe_route_args ra = {
        .logits = f->moe_logits, .logit_b = (const float *)D->gate_inp_b.d,
        .sel_b = (const float *)D->exp_probs_b.d,
        .shexp_gate = mo->shexp == HR_SHEXP_SIGMOID ? (const float *)D->gate_inp_shexp.d : NULL,
        .xn = f->xn, .n_tokens = T, .n_expert = NX, .k = K, .n_embd = E,
        .gating = (int)mo->gating, .norm_w = mo->norm_w, .w_scale = mo->w_scale,
        .sel = f->moe_sel, .w = f->moe_w, .shg = f->moe_shg};
    CU(hr_cuda_moe_route(&ra, s), "the MoE router");
    /* 2. The pairs grouped by expert; the groups' ends to the host (not
     * in a GEMV step on expert rows: moe_rows_on). */
    const bool rows = moe_rows_on(e, T);
    CU(hr_cuda_moe_group(f->moe_sel, T, K, NX, f->moe_row, f->moe_tok, f->moe_rx, f->moe_off, s),
       "grouping the MoE rows");
    if (!rows)
        CU(cudaMemcpyAsync(e->h_moe_off, f->moe_off, NX * sizeof(int32_t),
                           cudaMemcpyDeviceToHost, s), "copying the MoE groups back");
    /* 3. Each group's input rows, gathered. */
    CU(hr_cuda_moe_gather(f->xn, f->moe_tok, TK, E, f->moe_x, s), "gathering the MoE rows");
    if (rows)
        return moe_experts_rows(e, f, D, T, err);
    CU(cudaStreamSynchronize(s), "the MoE routing");
    const int32_t *off = e->h_moe_off;
    /* 4. Gate and up, per expert with rows (fused: one matrix, gate rows
     * then up rows). */
    prep_forget(e);
    for (uint32_t x = 0, start = 0; x < NX; start = (uint32_t)off[x], x++) {
        const uint32_t n = (uint32_t)off[x] - start;
        if (!n)
            continue;
        const float *in = f->moe_x + (uint64_t)start * E;
        float *y = f->moe_gu + (uint64_t)start * 2 * FX;
        const struct dweight wg = expert_of(&D->gate_exps, x);
        TRY(matmul_in_step(e, f, &wg, in, n, T, y, 2 * FX, NULL, 0, err));
        if (D->up_exps.d) {
            const struct dweight wu = expert_of(&D->up_exps, x);
            TRY(matmul_in_step(e, f, &wu, in, n, T, y + FX, 2 * FX, NULL, 0, err));
        }
    }
    /* 5. The activation. */
    CU(hr_cuda_moe_act(f->moe_gu, f->moe_rx, TK, FX, (const float *)D->gate_exps_b.d,
                       (const float *)D->up_exps_b.d, mo->act == HR_FFN_ACT_SWIGLU_OAI,
                       f->moe_h, s), "the MoE activation");
    /* 6. Down, into moe_x (its inputs are dead). */
    prep_forget(e);
    for (uint32_t x = 0, start = 0; x < NX; start = (uint32_t)off[x], x++) {
        const uint32_t n = (uint32_t)off[x] - start;
        if (!n)
            continue;
        const struct dweight wd = expert_of(&D->down_exps, x);
        TRY(matmul_in_step(e, f, &wd, f->moe_h + (uint64_t)start * FX, n, T,
                           f->moe_x + (uint64_t)start * E, E, NULL, 0, err));
    }
    /* 7 and 8: the shared expert, the combine. */
    return moe_finish(e, f, D, T, err);
}

/* Attention (engine.c's attention_mixer): xn -> Q/K/V (a gated layer's Wq
 * also yields the gate), biases + Q/K norms + RoPE + the KV store, paged
 * attention, the gate, then x += attn Wo^T + bo. */
static enum hr_status attention_mixer(struct hr_cuda_engine *e, const struct fwd *f,
                                      const struct dlayer *D, uint32_t T,
                                      struct hr_cuda_kv_view kv, struct hr_err *err)
{
    const struct hr_model *m = e->m;
    const struct hr_hparams *hp = &m->hp;
    const uint32_t E = hp->n_embd, hd = hp->head_dim_k;
    const uint32_t q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd;
    cudaStream_t s = e->stream;
    kv.layer = D->kv_layer;
    if (D->window && e->windowed)
        kv.tables = f->wtables;
    prep_forget(e);
    const struct dweight *qkv[3] = {&D->wq, &D->wk, &D->wv};
    float *const qy[3] = {m->attn_gated ? f->qg : f->q, f->k, f->v};
    const uint32_t ql[3] = {m->attn_gated ? 2 * q_dim : q_dim, kv_dim, kv_dim};
    TRY(matmul_parts(e, f, qkv, qy, ql, 3, f->xn, T, err));
    if (m->attn_gated)
        CU(hr_cuda_gate_split(f->qg, f->q, f->qgate, T, hp->n_head, hd, s),
           "splitting the queries from their gates");
    struct hr_cuda_qkv_args qa = {
        .q = f->q, .k = f->k, .v = f->v, .bq = (const float *)D->bq.d,
        .bk = (const float *)D->bk.d, .bv = (const float *)D->bv.d,
        .q_norm = (const float *)D->q_norm.d, .k_norm = (const float *)D->k_norm.d,
        .rope = f->rope, .n_tokens = T, .n_head = hp->n_head, .n_rot = hp->n_rot,
        .neox = m->rope_neox, .eps = hp->rms_eps, .kv = kv};
    struct hr_cuda_attn_args aa = {.q = f->q, .out = f->attn, .n_tokens = T,
                                   .n_head = hp->n_head, .scale = 1.0f / sqrtf((float)hd),
                                   .kv = kv, .seq_fa = f->n_tiles ? f->seq_fa : NULL,
                                   .tiles = f->tiles, .n_tiles = f->n_tiles,
                                   .window = D->window, .sinks = (const float *)D->sinks.d,
                                   .part = f->attn_part, .n_split = attn_nsplit(e),
                                   .gqa = attn_gqa_on()};
    /* Wo's inputs made by the merge (split decode; not under the gate); Q8_K
     * where a super-block is whole heads */
    enum prep_kind wo_kind = PREP_F32;
    if (f->attn_part && !m->attn_gated)
        aa.prep = prep_for(e, f, &D->wo, T, q_dim, merge_q8k_on() && 256 % hd == 0, &wo_kind);
    /* HR_CUDA_ATTN_FUSE=1: the merge in the attention kernel (its counters
     * first in the step's ctr) */
    if (fusion_on(FUSE_ATTN) && T <= e->dims.gemv_max_tokens) {
        aa.ctr = f->ctr;
        if (!hr_cuda_attention_merged_ok(&aa))
            aa.ctr = NULL;
    }
    /* HR_CUDA_QKV_FUSE=1: qkv_post's work in the attention kernel too, in
     * steps of one token a sequence (a token's K/V is its own block's) */
    if (fusion_on(FUSE_QKV) && aa.ctr && T == e->n_seqs) {
        aa.qkv = qa;
        if (!hr_cuda_attention_qkv_ok(&aa))
            memset(&aa.qkv, 0, sizeof(aa.qkv));
    }
    if (!aa.qkv.q)
        CU(hr_cuda_qkv_post(&qa, s), "biases, Q/K norms, RoPE and the KV store");
    e->prime_valid = false;
    CU(hr_cuda_attention(&aa, s), "attention");
    if (aa.prep.kind != HR_CUDA_NORM_PREP_NONE)
        prep_prime(e, f->attn, T, q_dim, &D->wo, wo_kind);
    if (m->attn_gated)
        CU(hr_cuda_gate_mul(f->attn, f->qgate, (uint64_t)T * q_dim, s), "the attention gate");
    prep_forget(e);
    TRY(matmul(e, f, &D->wo, f->attn, T, f->x, E, &D->bo, 1, err));
    return HR_OK;
}

/* The Gated DeltaNet (engine.c's deltanet_mixer): xn -> the q|k|v, z, beta
 * and alpha projections (one input, prepared once), the rest on the
 * sequences' state slots (hr_cuda_dn_mix), then x += o ssm_out^T.
 *
 * beta and alpha (n_v_heads rows each: a few hundredths of the layer's
 * weights) are multiplied in f32 even in prefill: alpha sets the state's
 * decay, which every later token's state multiplies in, so a rounding there
 * compounds along the sequence, where the tensor cores' f16 tiles would add
 * one. They cost nothing measurable; what they gained was small too
 * (docs/architecture.md, "The hybrids": measured on an H100). */
static enum hr_status deltanet_mixer(struct hr_cuda_engine *e, const struct fwd *f,
                                     const struct dlayer *D, uint32_t T, uint32_t S,
                                     struct hr_err *err)
{
    const struct hr_model *m = e->m;
    const struct hr_deltanet *dn = &m->dn;
    const uint32_t HV = dn->n_v_heads, VD = dn->value_dim, CD = dn->conv_dim;
    prep_forget(e);
    TRY(matmul(e, f, &D->ssm_qkv, f->xn, T, f->dn_qkv, CD, NULL, 0, err));
    TRY(matmul(e, f, &D->ssm_z, f->xn, T, f->dn_z, VD, NULL, 0, err));
    if (D->ssm_ba.d) { /* qwen3next: fused, into dn_conv until the conv */
        TRY(matmul_f32(e, f, &D->ssm_ba, f->xn, T, f->dn_conv, 2 * HV, err));
    } else {
        TRY(matmul_f32(e, f, &D->ssm_beta, f->xn, T, f->dn_beta, HV, err));
        TRY(matmul_f32(e, f, &D->ssm_alpha, f->xn, T, f->dn_g, HV, err));
    }
    const struct hr_cuda_dn_args a = {
        .seq_tok = f->seq_tok, .seq_slot = f->seq_slot, .state = e->d_state,
        .slot_bytes = hr_state_slot_bytes(e->state),
        .layer_floats = (uint64_t)D->dn_layer * (dn->conv_floats + dn->ssm_floats),
        .conv_floats = dn->conv_floats, .n_seqs = S, .n_tokens = T, .conv_dim = CD,
        .conv_kernel = dn->conv_kernel, .n_k_heads = dn->n_k_heads, .n_v_heads = HV,
        .head_dim = dn->head_k_dim, .key_dim = dn->key_dim, .value_dim = VD,
        .k_blocked = dn->k_blocked};
    const struct hr_cuda_dn_layer L = {
        .qkv = f->dn_qkv, .z = f->dn_z, .ba = D->ssm_ba.d ? f->dn_conv : NULL,
        .conv = f->dn_conv, .beta = f->dn_beta, .g = f->dn_g, .o = f->dn_o,
        .conv_w = (const float *)D->ssm_conv1d.d, .dt_bias = (const float *)D->ssm_dt.d,
        .a = (const float *)D->ssm_a.d, .norm_w = (const float *)D->ssm_norm.d,
        .eps = m->hp.rms_eps};
    CU(hr_cuda_dn_mix(&a, &L, e->stream), "the Gated DeltaNet");
    prep_forget(e);
    TRY(matmul(e, f, &D->ssm_out, f->dn_o, T, f->x, m->hp.n_embd, NULL, 1, err));
    return HR_OK;
}

/* xn = rmsnorm(x) * w for the T rows. In a GEMV step whose first reader of
 * xn (`next`; NULL: not known here) takes Q8_0 inputs on the integer GEMV
 * or f16-rounded ones, the norm makes those too (hr_cuda_rms_norm_prep: a
 * launch less, the same bytes) and primes prep_have with them. */
static enum hr_status norm_for(struct hr_cuda_engine *e, const struct fwd *f,
                               const struct dweight *w, const struct dweight *next, uint32_t T,
                               struct hr_err *err)
{
    const uint32_t E = e->dims.n_embd;
    const float eps = e->m->hp.rms_eps;
    enum prep_kind kind;
    const hr_cuda_norm_prep pr = prep_for(e, f, next, T, E, true, &kind);
    e->prime_valid = false;
    TRY(norm_flush(e, f, err));
    if (next && T == 1 && fusion_on(FUSE_NORM) && hr_cuda_gemv_normed_ok((int)next->type, E) &&
        pr.kind == (next->type == HR_GGML_Q4_K ? HR_CUDA_NORM_PREP_Q8_K : HR_CUDA_NORM_PREP_Q8_0)) {
        /* left to the GEMV (matmul_parts), or launched by norm_flush */
        e->norm_pending = true, e->norm_x = f->x, e->norm_w = (const float *)w->d;
        e->norm_xn = f->xn, e->norm_eps = eps, e->norm_next = next, e->norm_kind = pr.kind;
        return HR_OK;
    }
    if (pr.kind == HR_CUDA_NORM_PREP_NONE) {
        CU(hr_cuda_rms_norm(f->x, NULL, NULL, T, E, (const float *)w->d, eps, f->xn, e->stream),
           "a norm");
        return HR_OK;
    }
    CU(hr_cuda_rms_norm_prep(f->x, T, E, (const float *)w->d, eps, f->xn, &pr, e->stream),
       "a norm with the next matmul's inputs");
    prep_prime(e, f->xn, T, E, next, kind);
    return HR_OK;
}

static enum hr_status forward(struct hr_cuda_engine *e, const struct fwd *f, uint32_t T,
                              uint32_t L, uint32_t S, struct hr_err *err)
{
    const struct hr_model *m = e->m;
    const struct hr_hparams *hp = &m->hp;
    const uint32_t E = hp->n_embd, hd = hp->head_dim_k;
    cudaStream_t s = e->stream;

    prep_forget(e);
    e->norm_pending = false; /* none outlives a step, even one that failed */
    CU(hr_cuda_embed((int)e->tok_embd.type, e->tok_embd.d, e->tok_embd.row_bytes, E, f->tokens,
                     T, f->x, s), "the embedding lookup");
    CU(hr_cuda_rope_table(f->pos, T, hp->n_rot, &e->rope,
                          (const float *)e->rope_freqs.d, f->rope, s), "the RoPE table");
    const struct hr_cuda_kv_view kv = {
        .pool = e->d_kv, .block_bytes = hr_kv_block_bytes(e->kv),
        .block_tokens = e->cfg.kv_block_tokens, .n_head_kv = hp->n_head_kv, .head_dim = hd,
        .f16 = e->cfg.kv_type == HR_GGML_F16, .pos = f->pos, .seq_of = f->seq_of,
        .tab_off = f->tab_off, .tables = f->tables};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const struct dlayer *D = &e->layers[l];
        TRY(norm_for(e, f, &D->attn_norm, D->dn ? NULL : &D->wq, T, err));
        if (D->dn)
            TRY(deltanet_mixer(e, f, D, T, S, err));
        else
            TRY(attention_mixer(e, f, D, T, kv, err));
        TRY(norm_for(e, f, &D->ffn_norm, D->moe ? NULL : &D->w_gate, T, err));
        if (D->moe)
            TRY(moe_ffn(e, f, D, T, err));
        else
            TRY(dense_ffn(e, f, &D->w_gate, &D->w_up, &D->w_down, T, f->x, 1, err));
    }
    TRY(norm_flush(e, f, err)); /* none is left by then; so nothing is lost if one were */
    if (!L)
        return HR_OK;
    CU(hr_cuda_rms_norm(f->x, NULL, f->rows, L, E, (const float *)e->output_norm.d, hp->rms_eps,
                        f->out_x, s), "the output norm");
    prep_forget(e);
    TRY(matmul(e, f, &e->output, f->out_x, L, f->logits, hp->n_vocab, NULL, 0, err));
    return HR_OK;
}

/*
 * Decode steps (up to gemv_max_tokens rows, no tiled attention) run as a
 * CUDA graph: the step's ~13 launches a layer are captured once and
 * replayed with one launch, which takes the host's launch cost (several
 * microseconds each, more than a small model's kernels take) out of the
 * token's time. A graph is valid for one plan (every offset), T, L and S:
 * the kernels read positions and block tables from the arena, so the same
 * graph serves every step of that shape; a new shape is captured again
 * and the executable graph updated in place (cudaGraphExecUpdate), or
 * instantiated again when the update fails. The first instantiation runs
 * at init (a one-token warm-up step), where the device memory it takes is
 * measured (hr_cuda_mem.graph_bytes). HR_CUDA_GRAPH=0 turns graphs off.
 */
static enum hr_status run_graph(struct hr_cuda_engine *e, const struct fwd *f,
                                const struct hr_cuda_plan *p, uint32_t T, uint32_t L, uint32_t S,
                                struct hr_err *err)
{
    struct graph_key key;
    memset(&key, 0, sizeof(key));
    key.p = *p, key.T = T, key.L = L, key.S = S;
    if (!e->gexec || memcmp(&key, &e->gkey, sizeof(key)) != 0) {
        cudaGraph_t g = NULL;
        CU(cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeThreadLocal),
           "capturing the step");
        enum hr_status st = forward(e, f, T, L, S, err);
        if (st == HR_OK && L) {
            cudaError_t ce = cudaMemcpyAsync(e->h_logits, f->logits,
                                             (uint64_t)L * e->dims.n_vocab * sizeof(float),
                                             cudaMemcpyDeviceToHost, e->stream);
            if (ce != cudaSuccess)
                st = cuda_fail(e, err, ce, "copying the logits back");
        }
        cudaError_t ce = cudaStreamEndCapture(e->stream, &g);
        if (st != HR_OK) {
            if (g)
                cudaGraphDestroy(g);
            return st;
        }
        CU(ce, "capturing the step");
        if (e->gexec) {
            cudaGraphExecUpdateResultInfo info;
            if (cudaGraphExecUpdate(e->gexec, g, &info) != cudaSuccess) {
                cudaGetLastError();
                cudaGraphExecDestroy(e->gexec);
                e->gexec = NULL;
            }
        }
        if (!e->gexec) {
            ce = cudaGraphInstantiate(&e->gexec, g, 0);
            if (ce != cudaSuccess) {
                e->gexec = NULL;
                cudaGraphDestroy(g);
                return cuda_fail(e, err, ce, "instantiating the step's graph");
            }
            e->n_graph_instantiations++;
        }
        cudaGraphDestroy(g);
        e->gkey = key;
        e->n_graph_captures++;
    }
    CU(cudaGraphLaunch(e->gexec, e->stream), "launching the step's graph");
    return HR_OK;
}

enum hr_status hr_cuda_engine_step(struct hr_cuda_engine *e, struct hr_step *step,
                                   struct hr_err *err)
{
    if (e->lost)
        return hr_err_set(err, HR_ERR_DEVICE, "the CUDA context is lost (an earlier error); "
                          "the engine must be recreated");
    if (step->n_seqs == 0)
        return hr_err_set(err, HR_ERR_INVALID, "a step needs at least one sequence");
    if (step->n_seqs > e->cfg.max_step_seqs)
        return hr_err_set(err, HR_ERR_LIMIT, "step of %u sequences exceeds the engine's %u",
                          step->n_seqs, e->cfg.max_step_seqs);
    const uint32_t n_vocab = e->dims.n_vocab;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        if (!s->kv || !s->tokens || s->n_tokens == 0 || s->n_logits > s->n_tokens)
            return hr_err_set(err, HR_ERR_INVALID, "step sequence %u is malformed", i);
        for (uint32_t j = 0; j < i; j++)
            if (step->seqs[j].kv == s->kv)
                return hr_err_set(err, HR_ERR_INVALID, "sequence %u appears twice in a step", i);
        if (!hr_kv_seq_window_held(s->kv, e->kv))
            return hr_err_set(err, HR_ERR_INVALID, "sequence %u continues at position %u "
                              "without its sliding-window KV blocks", i, s->kv->n_tokens);
        uint64_t end = (uint64_t)s->kv->n_tokens + s->n_tokens;
        if (end > (uint64_t)s->kv->cap_blocks * e->cfg.kv_block_tokens ||
            end > e->cfg.max_seq_tokens)
            return hr_err_set(err, HR_ERR_LIMIT, "sequence %u would reach %llu tokens, past its "
                              "table of %u or the engine's %u", i, (unsigned long long)end,
                              s->kv->cap_blocks * e->cfg.kv_block_tokens, e->cfg.max_seq_tokens);
        for (uint32_t t = 0; t < s->n_tokens; t++)
            if (s->tokens[t] < 0 || (uint32_t)s->tokens[t] >= n_vocab)
                return hr_err_set(err, HR_ERR_INVALID, "token id %d is outside the vocabulary "
                                  "of %u", s->tokens[t], n_vocab);
    }
    struct hr_cuda_step_shape shape;
    hr_cuda_engine_step_shape(e, step, &shape);
    if (shape.n_tokens > e->cfg.max_step_tokens || shape.n_logits > e->cfg.max_step_logits)
        return hr_err_set(err, HR_ERR_LIMIT,
                          "step of %u tokens and %u logit rows exceeds the engine's %u and %u",
                          shape.n_tokens, shape.n_logits, e->cfg.max_step_tokens,
                          e->cfg.max_step_logits);
    if (shape.new_blocks > hr_kv_n_free(e->kv))
        return hr_err_set(err, HR_ERR_NOMEM, "the step needs %u KV blocks, %u are free",
                          shape.new_blocks, hr_kv_n_free(e->kv));
    /* Hybrid models: every sequence needs its recurrent state slot. */
    if (e->state) {
        enum hr_status st = hr_step_state_check(e->state, step, err);
        if (st != HR_OK)
            return st;
    }
    /* From here on nothing fails before the device runs. */
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        enum hr_status st = hr_kv_seq_reserve(step->seqs[i].kv, e->kv, step->seqs[i].n_tokens, err);
        HR_ASSERT(st == HR_OK);
    }

    struct hr_cuda_plan p;
    hr_cuda_plan_layout(&e->dims, &shape, &p);
    HR_ASSERT(p.meta_bytes <= e->stage_cap && p.arena_bytes <= e->arena_cap);
    e->high_water = 0;
    e->n_seqs = step->n_seqs;
    const uint32_t T = shape.n_tokens, L = shape.n_logits;
    const uint64_t fz = sizeof(float), iz = sizeof(int32_t);
    const uint64_t q_dim = (uint64_t)e->dims.n_head * e->dims.head_dim;
    const uint64_t kv_dim = (uint64_t)e->dims.n_head_kv * e->dims.head_dim;
    const uint64_t max_in = hr_cuda_plan_max_in(&e->dims);
    struct fwd f;
    f.tokens = view(e, p.off_tokens, T * iz);
    f.pos = view(e, p.off_pos, T * iz);
    f.seq_of = view(e, p.off_seq_of, T * iz);
    f.rows = view(e, p.off_rows, L * iz);
    f.tab_off = view(e, p.off_tab_off, step->n_seqs * iz);
    f.tables = view(e, p.off_tables, shape.n_table * iz);
    f.wtables = e->windowed ? view(e, p.off_wtables, shape.n_table * iz) : NULL;
    f.seq_fa = view(e, p.off_seq_fa, step->n_seqs * iz);
    f.tiles = view(e, p.off_tiles, (T / HR_CUDA_FA_TILE + step->n_seqs) * 2 * iz);
    f.rope = view(e, p.off_rope, T * e->dims.n_rot * fz);
    f.x = view(e, p.off_x, T * e->dims.n_embd * fz);
    f.xn = view(e, p.off_xn, T * e->dims.n_embd * fz);
    f.act = view(e, p.off_act, hr_cuda_plan_act_rows(&e->dims, T, L) * max_in * fz);
    f.q = view(e, p.off_q, T * q_dim * fz);
    f.k = view(e, p.off_k, T * kv_dim * fz);
    f.v = view(e, p.off_v, T * kv_dim * fz);
    f.attn = view(e, p.off_attn, T * q_dim * fz);
    /* planned in every step (the plan stays monotone in T), split only in
     * decode steps */
    f.attn_part = view(e, p.off_attn_part, hr_cuda_attn_part_bytes(&e->dims, T));
    if (T > e->dims.gemv_max_tokens || !attn_split_on())
        f.attn_part = NULL;
    f.gate = view(e, p.off_gate, T * e->dims.n_ff * fz);
    f.up = view(e, p.off_up, T * e->dims.n_ff * fz);
    const uint64_t NX = e->dims.n_expert, TK = (uint64_t)T * e->dims.n_expert_used;
    const uint64_t FX = e->dims.n_ff_exp;
    f.moe_logits = NX ? view(e, p.off_moe_logits, T * NX * fz) : NULL;
    f.moe_sel = NX ? view(e, p.off_moe_sel, TK * iz) : NULL;
    f.moe_w = NX ? view(e, p.off_moe_w, TK * fz) : NULL;
    f.moe_row = NX ? view(e, p.off_moe_row, TK * iz) : NULL;
    f.moe_tok = NX ? view(e, p.off_moe_tok, TK * iz) : NULL;
    f.moe_rx = NX ? view(e, p.off_moe_rx, TK * iz) : NULL;
    f.moe_off = NX ? view(e, p.off_moe_off, NX * iz) : NULL;
    f.moe_shg = NX ? view(e, p.off_moe_shg, T * fz) : NULL;
    f.moe_x = NX ? view(e, p.off_moe_x, TK * e->dims.n_embd * fz) : NULL;
    f.moe_gu = NX ? view(e, p.off_moe_gu, TK * 2 * FX * fz) : NULL;
    f.moe_h = NX ? view(e, p.off_moe_h, TK * FX * fz) : NULL;
    f.qg = f.qgate = f.dn_qkv = f.dn_z = f.dn_beta = f.dn_g = f.dn_conv = f.dn_o = NULL;
    f.seq_tok = f.seq_slot = NULL;
    if (e->dims.attn_gated) {
        f.qg = view(e, p.off_qg, T * 2 * q_dim * fz);
        f.qgate = view(e, p.off_qgate, T * q_dim * fz);
    }
    if (e->dims.dn_conv_dim) {
        const uint64_t CD = e->dims.dn_conv_dim, VD = e->dims.dn_value_dim;
        const uint64_t HV = e->dims.dn_n_v_heads;
        f.seq_tok = view(e, p.off_seq_tok, step->n_seqs * 2 * iz);
        f.seq_slot = view(e, p.off_seq_slot, step->n_seqs * iz);
        f.dn_qkv = view(e, p.off_dn_qkv, T * CD * fz);
        f.dn_z = view(e, p.off_dn_z, T * VD * fz);
        f.dn_beta = view(e, p.off_dn_beta, T * HV * fz);
        f.dn_g = view(e, p.off_dn_g, T * HV * fz);
        f.dn_conv = view(e, p.off_dn_conv, T * CD * fz);
        f.dn_o = view(e, p.off_dn_o, T * VD * fz);
    }
    const uint64_t ctr_bytes = hr_cuda_plan_ctr_bytes(&e->dims);
    f.ctr = view(e, p.off_ctr, ctr_bytes);
    const uint64_t R = T > L ? T : L;
    memset(&f.actq, 0, sizeof(f.actq));
    if (e->dims.int_gemv) {
        uint64_t d_off, s_off, bytes;
        hr_cuda_actq_parts(hr_cuda_plan_actq_rows(&e->dims, T, L), max_in, &d_off, &s_off, &bytes);
        uint8_t *q = view(e, p.off_actq, bytes);
        f.actq = (struct hr_cuda_q8_act){.q = (int8_t *)q, .d = (float *)(q + d_off),
                                         .s = (int16_t *)(q + s_off)};
    }
    const bool tc = e->dims.tc_gemm && R > e->dims.gemv_max_tokens;
    f.act16 = tc ? view(e, p.off_act16, hr_cuda_act16_bytes(&e->dims, R)) : NULL;
    memset(&f.actq16, 0, sizeof(f.actq16));
    if (tc && e->dims.int_gemm) {
        uint64_t d_off, s_off, bytes;
        hr_cuda_actq_parts(R, max_in, &d_off, &s_off, &bytes);
        uint8_t *q = f.act16;
        f.actq16 = (struct hr_cuda_q8_act){.q = (int8_t *)q, .d = (float *)(q + d_off),
                                           .s = (int16_t *)(q + s_off)};
    }
    f.wdq = tc && e->dims.wdq_elems ? view(e, p.off_wdq, e->dims.wdq_elems * 2) : NULL;
    f.out_x = view(e, p.off_out_x, L * e->dims.n_embd * fz);
    f.logits = view(e, p.off_logits, L * n_vocab * fz);

    /* The metadata, in the staging copy of the arena's first meta_bytes. */
    uint8_t *h = e->h_stage;
    memset(h + p.off_ctr, 0, ctr_bytes); /* the fused kernels' counters start at 0 */
    int32_t *tokens = (int32_t *)(h + p.off_tokens), *pos = (int32_t *)(h + p.off_pos);
    int32_t *seq_of = (int32_t *)(h + p.off_seq_of), *rows = (int32_t *)(h + p.off_rows);
    int32_t *tab_off = (int32_t *)(h + p.off_tab_off), *tables = (int32_t *)(h + p.off_tables);
    int32_t *seq_fa = (int32_t *)(h + p.off_seq_fa), *tiles = (int32_t *)(h + p.off_tiles);
    int32_t *seq_tok = (int32_t *)(h + p.off_seq_tok), *seq_slot = (int32_t *)(h + p.off_seq_slot);
    uint32_t t = 0, row = 0, tab = 0;
    /* The tiled attention takes the sequences with more than one token in
     * the step (a choice each sequence makes alone, so its results do not
     * depend on the others); models with F32 weights keep every step in f32. */
    const bool fa = e->dims.tc_gemm &&
                    hr_cuda_attention_tiled_ok(e->dims.head_dim, e->cfg.kv_type == HR_GGML_F16);
    f.n_tiles = 0;
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        const struct hr_step_seq *s = &step->seqs[i];
        struct seq_info *si = &e->seqs[i];
        si->first_token = t;
        si->n_tokens = s->n_tokens;
        si->pos0 = s->kv->n_tokens;
        si->first_logit = row;
        si->n_logits = s->n_logits;
        tab_off[i] = (int32_t)tab;
        if (e->state) {
            const int32_t slot = hr_state_acquire(e->state, s->kv);
            HR_ASSERT(slot >= 0);
            seq_tok[2 * i] = (int32_t)t;
            seq_tok[2 * i + 1] = (int32_t)s->n_tokens;
            seq_slot[i] = slot;
        }
        seq_fa[i] = fa && s->n_tokens > 1;
        for (uint32_t j = 0; seq_fa[i] && j < s->n_tokens; j += HR_CUDA_FA_TILE) {
            tiles[2 * f.n_tiles] = (int32_t)(t + j);
            tiles[2 * f.n_tiles + 1] = (int32_t)(s->n_tokens - j < HR_CUDA_FA_TILE
                                                     ? s->n_tokens - j : HR_CUDA_FA_TILE);
            f.n_tiles++;
        }
        memcpy(tables + tab, s->kv->blocks, s->kv->n_blocks * iz);
        if (e->windowed) /* indexed as the full tables (tab_off) */
            memcpy(h + p.off_wtables + tab * iz, s->kv->wblocks, s->kv->n_wblocks * iz);
        tab += s->kv->n_blocks;
        for (uint32_t j = 0; j < s->n_tokens; j++, t++) {
            tokens[t] = s->tokens[j];
            pos[t] = (int32_t)(si->pos0 + j);
            seq_of[t] = (int32_t)i;
            if (j >= s->n_tokens - s->n_logits)
                rows[row++] = (int32_t)t;
        }
    }
    HR_ASSERT(tab == shape.n_table && f.n_tiles <= T / HR_CUDA_FA_TILE + step->n_seqs);

    CU(cudaEventRecord(e->ev0, e->stream), "cudaEventRecord");
    if (p.meta_bytes)
        CU(cudaMemcpyAsync(e->d_arena, h, p.meta_bytes, cudaMemcpyHostToDevice, e->stream),
           "uploading the step's metadata");
    /* A sequence (re)starting at position 0 starts from a zero state. */
    for (uint32_t i = 0; e->state && i < step->n_seqs; i++)
        if (e->seqs[i].pos0 == 0) {
            const uint64_t sb = hr_state_slot_bytes(e->state);
            CU(cudaMemsetAsync(e->d_state + (uint64_t)seq_slot[i] * sb, 0, sb, e->stream),
               "zeroing a recurrent state slot");
        }
    if (e->graphs && T <= e->dims.gemv_max_tokens && L && !f.n_tiles) {
        TRY(run_graph(e, &f, &p, T, L, step->n_seqs, err));
    } else {
        TRY(forward(e, &f, T, L, step->n_seqs, err));
        if (L)
            CU(cudaMemcpyAsync(e->h_logits, f.logits, (uint64_t)L * n_vocab * fz,
                               cudaMemcpyDeviceToHost, e->stream), "copying the logits back");
    }
    CU(cudaEventRecord(e->ev1, e->stream), "cudaEventRecord");
    CU(cudaStreamSynchronize(e->stream), "the step");
    CU(cudaEventElapsedTime(&e->last_ms, e->ev0, e->ev1), "cudaEventElapsedTime");
    /* Windowed blocks now out of every later query's reach go back (the
     * stream runs in order: a step that takes one writes it after this
     * step's reads). */
    for (uint32_t i = 0; i < step->n_seqs; i++) {
        step->seqs[i].kv->n_tokens += step->seqs[i].n_tokens;
        hr_kv_seq_slide(step->seqs[i].kv, e->kv);
    }
    return HR_OK;
}

// The LM's products as ggml's CUDA backend runs them (BF16 weights and inputs, F32 output, F32 accumulation:
// cublasGemmEx(T, N, M, N, K) with CUBLAS_GEMM_DEFAULT_TENSOR_OP), timed as a step runs them, against every algorithm
// cuBLASLt's heuristic offers for the same call, with split-K variants of each where cuBLASLt accepts them.
//
// Why not tools/device/gemm_tunable.py: it timed torch calls in a Python loop, 16-18 us a product where the step's
// profile shows the same kernels at 7-9 us in ggml's CUDA graph; its times were the launch path's, not cuBLAS's.
// Here every timing is a CUDA graph of 28 launches (one a layer, each on its own copy of the weights, so that the
// weights come from HBM as in a step, not from the 50 MB L2), replayed; us a launch = graph time / 28.
//
// A faster algorithm is only worth having if a request's result does not depend on what it is batched with: the
// batched engine packs many requests' positions into one product of N = 4352-17408 columns, and its tokens equal one
// by one's because a column's result is the same whatever N is. So every candidate's columns at a lone request's N
// are compared bit for bit with the default's at N_big (the first N columns of the same inputs): "eq" = 1 where they
// are equal, the property a lone-request algorithm must keep.
//
//     nvcc -O3 -arch=sm_90 -std=c++17 -o .devcarry/glb tools/device/gemm_lt_bench.cu -lcublasLt -lcublas
//     ./glb [--n 272,346,1040,1090] [--big 17408] [--algos 32]            # on the device
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CHECK_BLAS(x) do { int s_ = (int) (x); if (s_ != 0) { \
    fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

static const int LAYERS = 28;

struct Shape { const char * name; int m, k; };
// Qwen3-0.6B: hidden 1024, q/k/v stacked 2048 + 1024 + 1024, FFN 3072 (gate and up stacked); the audio heads 8 x 1025
static const Shape SHAPES[] = {{"qkv", 4096, 1024}, {"o", 1024, 2048}, {"gate_up", 6144, 1024}, {"down", 1024, 3072}};

static std::vector<int> parse_list(const char * s) {
    std::vector<int> v;
    for (const char * p = s; *p; ) { v.push_back(atoi(p)); while (*p && *p != ',') p++; if (*p) p++; }
    return v;
}

static void fill_bf16(__nv_bfloat16 * dev, size_t n, unsigned seed) {
    std::vector<__nv_bfloat16> h(n);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16(nd(rng));
    CHECK(cudaMemcpy(dev, h.data(), n*sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
}

struct Bench {
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void * ws; size_t ws_size = 32u << 20;
    cudaEvent_t e0, e1;

    Bench() {
        CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        CHECK_BLAS(cublasCreate(&blas));
        CHECK_BLAS(cublasSetStream(blas, stream));
        CHECK_BLAS(cublasLtCreate(&lt));
        CHECK(cudaMalloc(&ws, ws_size));
        CHECK_BLAS(cublasSetWorkspace(blas, ws, ws_size));
        CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
    }

    // us a launch: `launch(l)` for l = 0..27 captured as one graph, replayed `reps` times after a warm-up
    template <typename F> float time_graph(F launch, int reps = 20) {
        cudaGraph_t g; cudaGraphExec_t ge;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int l = 0; l < LAYERS; l++) launch(l);
        CHECK(cudaStreamEndCapture(stream, &g));
        CHECK(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(ge, stream));
        CHECK(cudaEventRecord(e0, stream));
        for (int i = 0; i < reps; i++) CHECK(cudaGraphLaunch(ge, stream));
        CHECK(cudaEventRecord(e1, stream));
        CHECK(cudaEventSynchronize(e1));
        float ms; CHECK(cudaEventElapsedTime(&ms, e0, e1));
        CHECK(cudaGraphExecDestroy(ge)); CHECK(cudaGraphDestroy(g));
        return 1000.0f*ms/(reps*LAYERS);
    }
};

static std::string algo_desc(const cublasLtMatmulAlgo_t & a) {
    int id = -1, tile = -1, splitk = -1, red = -1, stages = -1, cluster = -1;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
    char buf[160];
    snprintf(buf, sizeof buf, "id=%d tile=%d splitk=%d red=%d stages=%d cluster=%d", id, tile, splitk, red, stages, cluster);
    return buf;
}

int main(int argc, char ** argv) {
    std::vector<int> ns = {272, 346, 1040, 1090};
    int n_big = 17408, n_algos = 32;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) ns = parse_list(argv[i + 1]);
        else if (!strcmp(argv[i], "--big")) n_big = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--algos")) n_algos = atoi(argv[i + 1]);
    }
    cudaDeviceProp prop; CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    Bench b;
    const float alpha = 1.0f, beta = 0.0f;
    printf("| product | M x K | N | default us | TFLOP/s | default eq | best Lt us | TFLOP/s | best eq | best algo | best eq=1 us | its algo |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Shape & s : SHAPES) {
        const size_t a_elems = (size_t) s.m*s.k;
        std::vector<__nv_bfloat16 *> A(LAYERS);
        for (int l = 0; l < LAYERS; l++) { CHECK(cudaMalloc(&A[l], a_elems*2)); fill_bf16(A[l], a_elems, 1000 + l); }
        __nv_bfloat16 * B; float * C; float * C_big;
        CHECK(cudaMalloc(&B, (size_t) s.k*n_big*2)); fill_bf16(B, (size_t) s.k*n_big, 7);
        CHECK(cudaMalloc(&C, (size_t) s.m*n_big*4));
        CHECK(cudaMalloc(&C_big, (size_t) s.m*n_big*4));

        // ggml's call: C[M, N] = op(A)^T B, A stored [K, M] (a weight row per output), B [K, N], C [M, N], column-major
        auto gemm_ex = [&](int l, int n, float * out) {
            CHECK_BLAS(cublasGemmEx(b.blas, CUBLAS_OP_T, CUBLAS_OP_N, s.m, n, s.k, &alpha, A[l], CUDA_R_16BF, s.k,
                                    B, CUDA_R_16BF, s.k, &beta, out, CUDA_R_32F, s.m, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT_TENSOR_OP));
        };
        gemm_ex(0, n_big, C_big);
        CHECK(cudaStreamSynchronize(b.stream));
        std::vector<float> h_big((size_t) s.m*n_big), h((size_t) s.m*n_big);
        CHECK(cudaMemcpy(h_big.data(), C_big, h_big.size()*4, cudaMemcpyDeviceToHost));
        auto equal_to_big = [&](int n) {  // C's first n columns against C_big's, bit for bit
            CHECK(cudaStreamSynchronize(b.stream));
            CHECK(cudaMemcpy(h.data(), C, (size_t) s.m*n*4, cudaMemcpyDeviceToHost));
            return memcmp(h.data(), h_big.data(), (size_t) s.m*n*4) == 0;
        };

        for (int n : ns) {
            const double flop = 2.0*s.m*s.k*n;
            gemm_ex(0, n, C);
            const bool def_eq = equal_to_big(n);
            const float def_us = b.time_graph([&](int l) { gemm_ex(l, n, C); });

            cublasLtMatmulDesc_t desc;
            CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
            CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
            CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
            cublasLtMatrixLayout_t la, lb, lc;
            CHECK_BLAS(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.m, s.k));
            CHECK_BLAS(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, n, s.k));
            CHECK_BLAS(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.m, n, s.m));
            cublasLtMatmulPreference_t pref;
            CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
            CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &b.ws_size,
                                                            sizeof(b.ws_size)));
            std::vector<cublasLtMatmulHeuristicResult_t> res(n_algos);
            int got = 0;
            CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(b.lt, desc, la, lb, lc, lc, pref, n_algos, res.data(), &got));

            // the heuristic's algorithms, and each with split-K 2..8 where cuBLASLt accepts it
            std::vector<cublasLtMatmulAlgo_t> cands;
            for (int i = 0; i < got; i++) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
                cands.push_back(res[i].algo);
                for (int sk : {2, 3, 4, 6, 8}) {
                    cublasLtMatmulAlgo_t a = res[i].algo;
                    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk))) continue;
                    cublasLtMatmulHeuristicResult_t chk;
                    if (cublasLtMatmulAlgoCheck(b.lt, desc, la, lb, lc, lc, &a, &chk) == CUBLAS_STATUS_SUCCESS &&
                        chk.workspaceSize <= b.ws_size) cands.push_back(a);
                }
            }
            float best = 1e9f, best_eq = 1e9f; std::string best_d = "-", best_eq_d = "-"; bool best_is_eq = false;
            for (const cublasLtMatmulAlgo_t & a : cands) {
                auto run = [&](int l) {
                    CHECK_BLAS(cublasLtMatmul(b.lt, desc, &alpha, A[l], la, B, lb, &beta, C, lc, C, lc, &a, b.ws,
                                              b.ws_size, b.stream));
                };
                run(0);
                const bool eq = equal_to_big(n);
                const float us = b.time_graph(run);
                printf("# %s n=%d %s: %.2f us eq=%d\n", s.name, n, algo_desc(a).c_str(), us, (int) eq);
                if (us < best) { best = us; best_d = algo_desc(a); best_is_eq = eq; }
                if (eq && us < best_eq) { best_eq = us; best_eq_d = algo_desc(a); }
            }
            printf("| %s | %d x %d | %d | %.2f | %.0f | %d | %.2f | %.0f | %d | %s | %.2f | %s |\n", s.name, s.m, s.k, n,
                   def_us, flop/def_us*1e-6, (int) def_eq, best, flop/best*1e-6, (int) best_is_eq, best_d.c_str(),
                   best_eq, best_eq_d.c_str());
            fflush(stdout);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(desc);
        }
        for (auto * a : A) CHECK(cudaFree(a));
        CHECK(cudaFree(B)); CHECK(cudaFree(C)); CHECK(cudaFree(C_big));
    }
    return 0;
}

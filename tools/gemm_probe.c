// How fast can one 2-core AVX2 host run the LM's products at best? A BLIS-style micro-kernel (16 output channels x
// 6 positions, 12 ymm accumulators, FMA) over weights packed once as F16 in k-major panels of 16 channels and
// activations packed per call into panels of 6 positions, k blocked by 256 (both panels in L1): the layout that
// reaches ~90 % of the FMA peak in BLAS libraries. One thread; compare with tools/matmul_bench.py (ggml, numpy,
// torch) on the same shapes, and with the FMA peak that `tools/gemm_probe.c peak` measures (and VPMADDWD's, the
// instruction of omnivoice/csrc/products.c).
//
//     gcc -O3 -march=native -o /tmp/gemm_probe tools/gemm_probe.c -lm
//     /tmp/gemm_probe peak; /tmp/gemm_probe 1024 3072 270; /tmp/gemm_probe 3072 1024 270; /tmp/gemm_probe 8192 1024 246
//
// C[n][m] = sum_k W[m][k] X[n][k]; M a multiple of 16, N of 6 (the probe does no edges).
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <math.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

#define MR 16
#define NR 6
#define KC 256

// pack W [M][K] (f32 source) into panels: for each 16-channel panel p, for each k: 16 halves
static void pack_w(const float *W, uint16_t *P, int M, int K) {
    for (int p = 0; p < M / MR; p++)
        for (int k = 0; k < K; k++) {
            __m256 a = _mm256_set_ps(W[(p*MR+7)*K+k],W[(p*MR+6)*K+k],W[(p*MR+5)*K+k],W[(p*MR+4)*K+k],W[(p*MR+3)*K+k],W[(p*MR+2)*K+k],W[(p*MR+1)*K+k],W[(p*MR+0)*K+k]);
            __m256 b = _mm256_set_ps(W[(p*MR+15)*K+k],W[(p*MR+14)*K+k],W[(p*MR+13)*K+k],W[(p*MR+12)*K+k],W[(p*MR+11)*K+k],W[(p*MR+10)*K+k],W[(p*MR+9)*K+k],W[(p*MR+8)*K+k]);
            _mm_storeu_si128((__m128i*)(P + ((size_t)p*K + k)*MR), _mm256_cvtps_ph(a, 0));
            _mm_storeu_si128((__m128i*)(P + ((size_t)p*K + k)*MR + 8), _mm256_cvtps_ph(b, 0));
        }
}

// C[n][m] for n in [n0, n0+6), m in panel p, k in [k0, k0+kc): accumulate into C
static inline void kernel_6x16(const uint16_t *Pw, const float *X, int K, float *C, int M, int kc, int first) {
    __m256 c00=_mm256_setzero_ps(),c01=c00,c10=c00,c11=c00,c20=c00,c21=c00,c30=c00,c31=c00,c40=c00,c41=c00,c50=c00,c51=c00;
    for (int k = 0; k < kc; k++) {
        const float *xk = X + k*NR;
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(Pw + k*MR)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(Pw + k*MR + 8)));
        __m256 b;
        b=_mm256_broadcast_ss(xk+0); c00=_mm256_fmadd_ps(w0,b,c00); c01=_mm256_fmadd_ps(w1,b,c01);
        b=_mm256_broadcast_ss(xk+1); c10=_mm256_fmadd_ps(w0,b,c10); c11=_mm256_fmadd_ps(w1,b,c11);
        b=_mm256_broadcast_ss(xk+2); c20=_mm256_fmadd_ps(w0,b,c20); c21=_mm256_fmadd_ps(w1,b,c21);
        b=_mm256_broadcast_ss(xk+3); c30=_mm256_fmadd_ps(w0,b,c30); c31=_mm256_fmadd_ps(w1,b,c31);
        b=_mm256_broadcast_ss(xk+4); c40=_mm256_fmadd_ps(w0,b,c40); c41=_mm256_fmadd_ps(w1,b,c41);
        b=_mm256_broadcast_ss(xk+5); c50=_mm256_fmadd_ps(w0,b,c50); c51=_mm256_fmadd_ps(w1,b,c51);
    }
    __m256 cs[12]={c00,c01,c10,c11,c20,c21,c30,c31,c40,c41,c50,c51};
    for (int n = 0; n < NR; n++) for (int h = 0; h < 2; h++) {
        float *dst = C + (size_t)n*M + h*8;
        if (first) _mm256_storeu_ps(dst, cs[2*n+h]);
        else _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), cs[2*n+h]));
    }
}

static float *XP;
static void packx(const float *X, int N, int K) {
    for (int nb = 0; nb < N / NR; nb++)
        for (int k = 0; k < K; k++)
            for (int i = 0; i < NR; i++) XP[((size_t)nb*K + k)*NR + i] = X[(size_t)(nb*NR+i)*K + k];
}
static void gemm(const uint16_t *P, const float *X, float *C, int M, int N, int K) {
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = K - k0 < KC ? K - k0 : KC;
        for (int p = 0; p < M / MR; p++) {
            const uint16_t *Pw = P + ((size_t)p*K + k0)*MR;
            for (int n0 = 0; n0 + NR <= N; n0 += NR)
                kernel_6x16(Pw, XP + ((size_t)(n0/NR)*K + k0)*NR, K, C + (size_t)n0*M + p*MR, M, kc, k0 == 0);
        }
    }
}


static void peak(void) {  // 12 independent FMA chains in registers: the core's FMA rate
    __m256 a[12];
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(i * 0.001f);
    const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
    const long n = 400000000 / 12;
    double t = now();
    for (long i = 0; i < n; i++)
        for (int j = 0; j < 12; j++) a[j] = _mm256_fmadd_ps(a[j], b, c);
    t = now() - t;
    float s = 0, v[8];
    for (int i = 0; i < 12; i++) { _mm256_storeu_ps(v, a[i]); s += v[0]; }
    printf("FMA peak, one thread: %.1f GFLOP/s (checksum %g)\n", 2.0 * 8 * 12 * n / t / 1e9, s);
    /* VPMADDWD (16 int16 multiply-adds into 8 int32) and VPADDD into 8 independent sums, in assembly so that
     * nothing is hoisted out of the loop: the rate of omnivoice/csrc/products.c's inner loop */
    const long m = 100000000;
    t = now();
    for (long i = 0; i < m; i++)
        __asm__ volatile(
            "vpmaddwd %%ymm14, %%ymm15, %%ymm8\n vpaddd %%ymm8, %%ymm0, %%ymm0\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm9\n vpaddd %%ymm9, %%ymm1, %%ymm1\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm10\n vpaddd %%ymm10, %%ymm2, %%ymm2\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm11\n vpaddd %%ymm11, %%ymm3, %%ymm3\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm8\n vpaddd %%ymm8, %%ymm4, %%ymm4\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm9\n vpaddd %%ymm9, %%ymm5, %%ymm5\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm10\n vpaddd %%ymm10, %%ymm6, %%ymm6\n"
            "vpmaddwd %%ymm14, %%ymm15, %%ymm11\n vpaddd %%ymm11, %%ymm7, %%ymm7\n"
            ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
    t = now() - t;
    printf("VPMADDWD peak, one thread: %.1f G int16 multiply-adds/s (%.1f GFLOP/s equivalent)\n",
           16.0 * 8 * m / t / 1e9, 2.0 * 16 * 8 * m / t / 1e9);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "peak")) { peak(); return 0; }
    if (argc != 4) { fprintf(stderr, "usage: %s peak | M K N\n", argv[0]); return 2; }
    int M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
    if (M % MR || N % NR || M <= 0 || K <= 0 || N <= 0) { fprintf(stderr, "M must be a multiple of 16, N of 6\n"); return 2; }
    float *W = malloc(sizeof(float)*M*K), *X = malloc(sizeof(float)*N*K), *C = malloc(sizeof(float)*N*M);
    uint16_t *P = aligned_alloc(64, sizeof(uint16_t)*M*K);
    XP = aligned_alloc(64, sizeof(float)*N*K);
    srand(1); for (size_t i=0;i<(size_t)M*K;i++) W[i]=(rand()/(float)RAND_MAX-0.5f);
    for (size_t i=0;i<(size_t)N*K;i++) X[i]=(rand()/(float)RAND_MAX-0.5f);
    pack_w(W, P, M, K);
    double tp=now(); packx(X, N, K); tp=now()-tp;
    gemm(P, X, C, M, N, K);
    // check a few entries against double with f16-rounded weights
    double maxerr=0; for (int t=0;t<50;t++){int n=rand()%N,m=rand()%M; double s=0; for(int k=0;k<K;k++){ float w=_cvtsh_ss(_cvtss_sh(W[(size_t)m*K+k],0)); s+=(double)w*X[(size_t)n*K+k];} double e=fabs(s-C[(size_t)n*M+m]); if(e>maxerr)maxerr=e;}
    double best=1e9; for (int r=0;r<7;r++){double t=now(); gemm(P,X,C,M,N,K); t=now()-t; if(t<best)best=t;}
    printf("M=%d K=%d N=%d: %.2f ms a product (best of 7; packing the activations %.2f ms more), %.1f GFLOP/s, "
           "max abs error %.2e against double\n", M, K, N, best*1e3, tp*1e3, 2.0*M*N*K/best/1e9, maxerr);
    return 0;
}

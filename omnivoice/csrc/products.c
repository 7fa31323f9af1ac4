/* Matrix products in 16-bit integers for x86 CPUs with AVX2 (the LM's products on the CPU, `cpu_products="i16"`).
 *
 * Why: on a CPU without AVX-512 every float kernel of ggml is bound by the FMA rate (8 multiply-adds an
 * instruction, two a cycle). VPMADDWD does 16 multiply-adds of int16 pairs into int32 an instruction, and a Zen 3
 * issues ~1.7 a cycle: about 1.65x the FMA rate. On the LM's shapes this kernel runs ahead of ggml's F16 GEMM
 * (tools/matmul_bench.py --types i16,f16; BENCHMARKS.md).
 *
 * Numbers: both operands are quantized per block of 128 along K with one float scale each (W per row and block,
 * at load; X per column and block, in the product) to 13 bits (|q| <= 4095), rounded to nearest. A block's sum of
 * 128 products then fits int32 exactly (128 * 4095^2 < 2^31), and the blocks are summed in float. On the
 * full-size random checkpoint the LM then agrees with float32 as ggml's F16 products do (step-0 logits cosine
 * 0.9999994, 99.2 % of the teacher-forced choices from F32 weights, 98.6 % from the F16 file; ggml's F16
 * 0.9999994 and 99.0 %); 256-value blocks with 12-bit weights gave 98.5 % and twice the logits' error.
 *
 * Layout: W is packed once into panels of 16 rows; per panel and block, 64 k-pairs x 16 rows x 2 int16 (what
 * one VPMADDWD reads for 8 rows: two adjacent k of each row); after every panel, the 16 scales of each panel and
 * block. X is packed per call into groups of 6 columns the same way (a pair of int16 broadcast as one int32).
 * The micro-kernel keeps 6 x 16 int32 sums in 12 registers over a block.
 *
 * Threads split the columns (tokens): each packs only the columns it multiplies, into a buffer of its own, so the
 * product is one graph node with no barrier between packing and multiplying.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define MR 16    /* rows of W a panel */
#define NR 6     /* columns of X a group */
#define KB 128   /* K a block: one scale per row (column) and block */
#define QW 4095.0f
#define QX 4095.0f

/* The packed weight a product reads (userdata of its node): `data` holds n_panels * K * MR int16, then
 * n_panels * (K / KB) * MR float scales. */
struct omnivoice_i16_weight {
    const void * data;
    int64_t M, K;
};

int64_t omnivoice_i16_packed_bytes(int64_t M, int64_t K) {
    const int64_t panels = (M + MR - 1) / MR;
    return panels * K * MR * 2 + panels * (K / KB) * MR * 4;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "integer.h"

int omnivoice_i16_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* 16 values of v / s rounded to int16 pairs: 8 int32, each two adjacent k (a quantize_fn; no offset). */
TARGET static __m256i quantize16(const float * v, __m256 inv, int off) {
    (void) off;
    const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v), inv));
    const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8), inv));
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);  /* packs interleaves the 128-bit lanes */
}

/* Block b of n_lanes rows of src as int16 pairs (pair kp of lane r at int32 kp * n_lanes + r): quantize_lanes. */
TARGET static void quantize_block(const float * src, int64_t stride, int rows, int n_lanes, float qmax,
                                  int32_t * dst, float * scales) {
    quantize_lanes(src, stride, rows, n_lanes, KB, 2, qmax, 0, quantize16, dst, scales);
}

/* W [M][K] row-major floats (ggml's [K, M]) -> the packed layout above; K a multiple of KB. */
TARGET void omnivoice_i16_pack(const float * w, int64_t M, int64_t K, void * out) {
    const int64_t panels = (M + MR - 1) / MR, nb = K / KB;
    int16_t * q = (int16_t *) out;
    float * scales = (float *) (q + panels * K * MR);
    for (int64_t p = 0; p < panels; p++) {
        const int rows = (int) (M - p * MR < MR ? M - p * MR : MR);
        for (int64_t b = 0; b < nb; b++)
            quantize_block(w + p * MR * K + b * KB, K, rows, MR, QW, (int32_t *) (q + (p * nb + b) * KB * MR),
                           scales + (p * nb + b) * MR);
    }
}

/* c[6][16] += (the 6 x 16 int32 sums of one block) * ws[r] * xs[t]. The loop is written in assembly: GCC 12 keeps
 * only some of the 12 sums in registers when it is written with intrinsics (half the speed). */
TARGET static void kernel_6x16(const int16_t * w, const float * ws, const int32_t * x, const float * xs, float * c) {
    int32_t acc[12 * 8] __attribute__((aligned(32)));
    long n = KB / 2;
    __asm__ volatile(
        "vpxor %%ymm0, %%ymm0, %%ymm0\n vpxor %%ymm1, %%ymm1, %%ymm1\n vpxor %%ymm2, %%ymm2, %%ymm2\n"
        "vpxor %%ymm3, %%ymm3, %%ymm3\n vpxor %%ymm4, %%ymm4, %%ymm4\n vpxor %%ymm5, %%ymm5, %%ymm5\n"
        "vpxor %%ymm6, %%ymm6, %%ymm6\n vpxor %%ymm7, %%ymm7, %%ymm7\n vpxor %%ymm8, %%ymm8, %%ymm8\n"
        "vpxor %%ymm9, %%ymm9, %%ymm9\n vpxor %%ymm10, %%ymm10, %%ymm10\n vpxor %%ymm11, %%ymm11, %%ymm11\n"
        "1:\n"
        "vmovdqu (%[w]), %%ymm12\n vmovdqu 32(%[w]), %%ymm13\n"
        "vpbroadcastd 0(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm0, %%ymm0\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm1, %%ymm1\n"
        "vpbroadcastd 4(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm2, %%ymm2\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm3, %%ymm3\n"
        "vpbroadcastd 8(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm4, %%ymm4\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm5, %%ymm5\n"
        "vpbroadcastd 12(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm6, %%ymm6\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm7, %%ymm7\n"
        "vpbroadcastd 16(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm8, %%ymm8\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm9, %%ymm9\n"
        "vpbroadcastd 20(%[x]), %%ymm14\n"
        "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm10, %%ymm10\n"
        "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm11, %%ymm11\n"
        "add $64, %[w]\n add $24, %[x]\n dec %[n]\n jnz 1b\n"
        "vmovdqa %%ymm0, 0(%[a])\n vmovdqa %%ymm1, 32(%[a])\n vmovdqa %%ymm2, 64(%[a])\n"
        "vmovdqa %%ymm3, 96(%[a])\n vmovdqa %%ymm4, 128(%[a])\n vmovdqa %%ymm5, 160(%[a])\n"
        "vmovdqa %%ymm6, 192(%[a])\n vmovdqa %%ymm7, 224(%[a])\n vmovdqa %%ymm8, 256(%[a])\n"
        "vmovdqa %%ymm9, 288(%[a])\n vmovdqa %%ymm10, 320(%[a])\n vmovdqa %%ymm11, 352(%[a])\n"
        : [w] "+r"(w), [x] "+r"(x), [n] "+r"(n)
        : [a] "r"(acc)
        : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    const __m256 s0 = _mm256_loadu_ps(ws), s1 = _mm256_loadu_ps(ws + 8);
    for (int t = 0; t < NR; t++) {
        const __m256 xb = _mm256_set1_ps(xs[t]);
        for (int h = 0; h < 2; h++) {
            const __m256 sums = _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *) (acc + t * 16 + h * 8)));
            _mm256_storeu_ps(c + t * MR + h * 8,
                             _mm256_fmadd_ps(sums, _mm256_mul_ps(h ? s1 : s0, xb), _mm256_loadu_ps(c + t * MR + h * 8)));
        }
    }
}

/* dst [M, N] = W x for x [K, N] F32 (src[0], rows contiguous), W the packed weight of `userdata`
 * (struct omnivoice_i16_weight): a ggml_custom_4d node. Thread ith of nth takes groups of 6 columns. */
TARGET void omnivoice_i16_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct omnivoice_i16_weight * w = (const struct omnivoice_i16_weight *) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const int64_t M = w->M, K = w->K, N = x->ne[1], nb = K / KB;
    const int64_t panels = (M + MR - 1) / MR, groups = (N + NR - 1) / NR;
    const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    if (g0 == g1) return;
    /* per group and block: KB * NR int16, then NR scales */
    size_t block_bytes;
    const char * packed = pack_columns(x, g0, g1, NR, KB, 2, QX, 0, quantize16, &block_bytes);
    const int16_t * wq = (const int16_t *) w->data;
    const float * wscales = (const float *) (wq + panels * K * MR);
    /* panel-major: a panel's K * 16 weights (96 KiB at K = 3072) stay in L2 while the thread's columns pass */
    for (int64_t p = 0; p < panels; p++) {
        for (int64_t g = g0; g < g1; g++) {
            float c[NR * MR] __attribute__((aligned(32)));
            memset(c, 0, sizeof c);
            for (int64_t b = 0; b < nb; b++) {
                const char * block = packed + ((g - g0) * nb + b) * block_bytes;
                kernel_6x16(wq + (p * nb + b) * KB * MR, wscales + (p * nb + b) * MR, (const int32_t *) block,
                            (const float *) (block + KB * NR * 2), c);
            }
            store_tile(dst, c, g, p, NR, MR);
        }
    }
    release_columns();
}

#else  /* not x86-64 with GCC or Clang: no kernel; the loader keeps ggml's products */

int omnivoice_i16_supported(void) { return 0; }
void omnivoice_i16_pack(const float * w, int64_t M, int64_t K, void * out) { (void) w; (void) M; (void) K; (void) out; abort(); }
void omnivoice_i16_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}

#endif

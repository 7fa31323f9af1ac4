/* Matrix products in 8-bit integers for x86 CPUs with AVX2 (the LM's products on the CPU, `cpu_products="i8"`).
 *
 * Why: the int16 kernel (products.c) runs near what VPMADDWD and the VPADDD after it issue on an AVX2 CPU: two
 * vector instructions for 16 multiply-adds. VPMADDUBSW multiplies 32 pairs of an unsigned and a signed byte and
 * adds them pairwise into 16 int16; a VPMADDWD by ones widens those to int32 and a VPADDD accumulates them: three
 * instructions for 32 multiply-adds, a third more work an instruction (tools/matmul_bench.py --types i16,i8;
 * BENCHMARKS.md).
 *
 * Numbers: W is quantized once at load to 7 bits (|q| <= 63) and x in every product to 8 bits (|q| <= 127), each
 * per row (column) and block of 128 along K with one float scale, rounded to nearest. x goes in as q + 128, an
 * unsigned byte; the sum over a block is then sum(w (q + 128)) - 128 sum(w), the second sum kept per row and block
 * at load. A pair of products never saturates VPMADDUBSW's int16 (2 * 255 * 63 < 32767), and a block's sum fits
 * int32 exactly; the blocks are summed in float. The precision is in the class of ggml's Q8_0 and K-quant products
 * (8-bit activations), far below the int16 kernel's (13 bits each); it is the default on AVX2 CPUs without
 * AVX-512, the only way there past 2.5x the float32 reference (BENCHMARKS.md gives the agreement). 8-bit weights
 * with 7-bit activations, 112 and 73 levels, and blocks of 32 were tried: closer step logits for the first two,
 * fewer teacher-forced choices equal for all but blocks of 32, which cost a quarter of the speed (same section).
 *
 * Layout: W in panels of 16 rows; per panel and block, KB / 4 steps of 64 bytes: rows 0-7 then 8-15, four adjacent
 * k of a row side by side (what one VPMADDUBSW reads for 8 rows). After all panels, the scales (per panel and
 * block, 16 floats), then the corrections 128 sum(w) (per panel and block, 16 int32). x is packed per call in
 * groups of 6 columns (four k of a column as one broadcast int32). The micro-kernel keeps 6 x 16 int32 sums in 12
 * registers over a block and runs every block of one panel and group in one call.
 *
 * Threads split the columns (tokens), each packing only the columns it multiplies, as in products.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define MR 16    /* rows of W a panel */
#define NR 6     /* columns of X a group */
#define KB 128   /* K a block: one scale per row (column) and block */
#define QW 63.0f
#define QX 127.0f
#define XOFF 128 /* x's bytes are q + XOFF */

struct omnivoice_i8_weight {
    const void * data;
    int64_t M, K;
};

int64_t omnivoice_i8_packed_bytes(int64_t M, int64_t K) {
    const int64_t panels = (M + MR - 1) / MR;
    return panels * K * MR + panels * (K / KB) * MR * 8;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "integer.h"

int omnivoice_i8_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* 32 values of v * inv rounded to nearest, plus `off`, as bytes in k order: signed (off 0) or unsigned. */
TARGET static __m256i quantize32(const float * v, __m256 inv, int off) {
    const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v), inv));
    const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8), inv));
    const __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 16), inv));
    const __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 24), inv));
    const __m256i o = _mm256_set1_epi16((short) off);
    const __m256i ab = _mm256_add_epi16(_mm256_packs_epi32(a, b), o);
    const __m256i cd = _mm256_add_epi16(_mm256_packs_epi32(c, d), o);
    /* the packs work within 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 (4 values each) */
    const __m256i bytes = off ? _mm256_packus_epi16(ab, cd) : _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Block b of n_lanes rows of src as bytes, 4 k per lane's int32 (step s of lane r at s * n_lanes + r), plus `off`:
 * quantize_lanes. */
TARGET static void quantize_block(const float * src, int64_t stride, int rows, int n_lanes, float qmax, int off,
                                  int32_t * dst, float * scales) {
    quantize_lanes(src, stride, rows, n_lanes, KB, 4, qmax, off, quantize32, dst, scales);
}

/* W [M][K] row-major floats (ggml's [K, M]) -> the packed layout above; K a multiple of KB. */
TARGET void omnivoice_i8_pack(const float * w, int64_t M, int64_t K, void * out) {
    const int64_t panels = (M + MR - 1) / MR, nb = K / KB;
    int8_t * q = (int8_t *) out;
    float * scales = (float *) (q + panels * K * MR);
    int32_t * corr = (int32_t *) (scales + panels * nb * MR);
    for (int64_t p = 0; p < panels; p++) {
        const int rows = (int) (M - p * MR < MR ? M - p * MR : MR);
        for (int64_t b = 0; b < nb; b++) {
            int8_t * block = q + (p * nb + b) * KB * MR;
            int32_t lanes[KB / 4 * MR];
            quantize_block(w + p * MR * K + b * KB, K, rows, MR, QW, 0, lanes, scales + (p * nb + b) * MR);
            /* lanes: step s of row r at s * 16 + r; the kernel reads rows 0-7 of a step, then 8-15: the same */
            memcpy(block, lanes, sizeof lanes);
            for (int r = 0; r < MR; r++) {
                int32_t sum = 0;
                for (int s = 0; s < KB / 4; s++)
                    for (int j = 0; j < 4; j++) sum += block[(s * MR + r) * 4 + j];
                corr[(p * nb + b) * MR + r] = XOFF * sum;
            }
        }
    }
}

/* one column t of the tile: its 4 k (a broadcast int32) times rows 0-7 (in ymm12) and 8-15 (from memory) */
#define COLUMN(t, a, b)                                                                                   \
    "vpbroadcastd " #t "*4(%[x]), %%ymm14\n"                                                             \
    "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n vpmaddwd %%ymm15, %%ymm13, %%ymm15\n"                        \
    "vpaddd %%ymm15, %%ymm" #a ", %%ymm" #a "\n"                                                         \
    "vpmaddubsw 32(%[w]), %%ymm14, %%ymm15\n vpmaddwd %%ymm15, %%ymm13, %%ymm15\n"                       \
    "vpaddd %%ymm15, %%ymm" #b ", %%ymm" #b "\n"
/* the block's sums of column t into c: c += (sum - corr) * ws * xs[t] */
#define FLUSH(t, a, b)                                                                                    \
    "vbroadcastss " #t "*4(%[x]), %%ymm14\n"                                                             \
    "vmulps %%ymm12, %%ymm14, %%ymm15\n vpsubd (%[corr]), %%ymm" #a ", %%ymm" #a "\n"                   \
    "vcvtdq2ps %%ymm" #a ", %%ymm" #a "\n"                                                               \
    "vfmadd213ps " #t "*64(%[c]), %%ymm15, %%ymm" #a "\n vmovups %%ymm" #a ", " #t "*64(%[c])\n"        \
    "vmulps %%ymm13, %%ymm14, %%ymm15\n vpsubd 32(%[corr]), %%ymm" #b ", %%ymm" #b "\n"                 \
    "vcvtdq2ps %%ymm" #b ", %%ymm" #b "\n"                                                               \
    "vfmadd213ps " #t "*64+32(%[c]), %%ymm15, %%ymm" #b "\n vmovups %%ymm" #b ", " #t "*64+32(%[c])\n"

/* c[6][16] += one panel (16 rows) times one group (6 columns) over nb blocks: w the panel's first block, ws and
 * corr its scales and corrections, x the group's first packed block (each block: KB / 4 steps of 6 int32, then 6
 * scales). Assembly, as products.c's loop: the 12 sums, the ones and a row vector take every ymm register. */
TARGET static void panel_times_group(const int8_t * w, const float * ws, const int32_t * corr, const int32_t * x,
                                     float * c, long nb) {
    long n;
    __asm__ volatile(
        "2:\n"
        "vpxor %%ymm0, %%ymm0, %%ymm0\n vpxor %%ymm1, %%ymm1, %%ymm1\n vpxor %%ymm2, %%ymm2, %%ymm2\n"
        "vpxor %%ymm3, %%ymm3, %%ymm3\n vpxor %%ymm4, %%ymm4, %%ymm4\n vpxor %%ymm5, %%ymm5, %%ymm5\n"
        "vpxor %%ymm6, %%ymm6, %%ymm6\n vpxor %%ymm7, %%ymm7, %%ymm7\n vpxor %%ymm8, %%ymm8, %%ymm8\n"
        "vpxor %%ymm9, %%ymm9, %%ymm9\n vpxor %%ymm10, %%ymm10, %%ymm10\n vpxor %%ymm11, %%ymm11, %%ymm11\n"
        "vpcmpeqw %%ymm13, %%ymm13, %%ymm13\n vpsrlw $15, %%ymm13, %%ymm13\n"  /* 16 x int16 1 */
        "mov %[steps], %[n]\n"
        "1:\n"
        "vmovdqu (%[w]), %%ymm12\n"
        COLUMN(0, 0, 1) COLUMN(1, 2, 3) COLUMN(2, 4, 5) COLUMN(3, 6, 7) COLUMN(4, 8, 9) COLUMN(5, 10, 11)
        "add $64, %[w]\n add $24, %[x]\n dec %[n]\n jnz 1b\n"
        "vmovups (%[ws]), %%ymm12\n vmovups 32(%[ws]), %%ymm13\n"
        FLUSH(0, 0, 1) FLUSH(1, 2, 3) FLUSH(2, 4, 5) FLUSH(3, 6, 7) FLUSH(4, 8, 9) FLUSH(5, 10, 11)
        "add $24, %[x]\n add $64, %[ws]\n add $64, %[corr]\n dec %[nb]\n jnz 2b\n"
        : [w] "+r"(w), [x] "+r"(x), [ws] "+r"(ws), [corr] "+r"(corr), [nb] "+r"(nb), [n] "=&r"(n)
        : [c] "r"(c), [steps] "i"(KB / 4)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

/* dst [M, N] = W x for x [K, N] F32 (src[0], rows contiguous), W the packed weight of `userdata`
 * (struct omnivoice_i8_weight): a ggml_custom_4d node. Thread ith of nth takes groups of 6 columns. */
TARGET void omnivoice_i8_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct omnivoice_i8_weight * w = (const struct omnivoice_i8_weight *) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const int64_t M = w->M, K = w->K, N = x->ne[1], nb = K / KB;
    const int64_t panels = (M + MR - 1) / MR, groups = (N + NR - 1) / NR;
    const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    if (g0 == g1) return;
    /* per group and block: KB * NR bytes, then NR scales */
    size_t block_bytes;
    const char * packed = pack_columns(x, g0, g1, NR, KB, 4, QX, XOFF, quantize32, &block_bytes);
    const int8_t * wq = (const int8_t *) w->data;
    const float * wscales = (const float *) (wq + panels * K * MR);
    const int32_t * wcorr = (const int32_t *) (wscales + panels * nb * MR);
    /* panel-major: a panel's K * 16 bytes stay in L2 while the thread's columns pass */
    for (int64_t p = 0; p < panels; p++) {
        for (int64_t g = g0; g < g1; g++) {
            float c[NR * MR] __attribute__((aligned(32)));
            memset(c, 0, sizeof c);
            panel_times_group(wq + p * nb * KB * MR, wscales + p * nb * MR, wcorr + p * nb * MR,
                              (const int32_t *) (packed + (g - g0) * nb * block_bytes), c, (long) nb);
            store_tile(dst, c, g, p, NR, MR);
        }
    }
    release_columns();
}

#else  /* not x86-64 with GCC or Clang: no kernel; the loader keeps ggml's products */

int omnivoice_i8_supported(void) { return 0; }
void omnivoice_i8_pack(const float * w, int64_t M, int64_t K, void * out) {
    (void) w; (void) M; (void) K; (void) out; abort();
}
void omnivoice_i8_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}

#endif

/* What the integer product kernels (products.c: int16, int8.c: int8) share, x86 with AVX2 only: the largest |value|
 * of a block and its scale, each thread's buffer for the columns it packs, and where a tile's sums go. Included
 * inside their `#if defined(__x86_64__) ...` part; every static here is per file (and the buffer per thread). */
#ifndef OMNIVOICE_INTEGER_H
#define OMNIVOICE_INTEGER_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define TARGET __attribute__((target("avx2,fma")))

/* max |v| of n floats (n a multiple of 8), or +inf when any is NaN or infinite: the scale is then NaN, and so are
 * the outputs that read it, as a float product's would be. */
TARGET static inline float amax_of(const float * v, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(v + i));
        m = _mm256_max_ps(m, a);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    }
    float lanes[8], out = 0;
    _mm256_storeu_ps(lanes, m);
    for (int i = 0; i < 8; i++) out = lanes[i] > out ? lanes[i] : out;
    return _mm256_movemask_ps(bad) || isinf(out) ? INFINITY : out;
}

/* The scale of a block whose largest |value| is amax (values become round(v / s), |q| <= qmax), and its inverse:
 * both 0 for a zero block or one of subnormals (whose inverse would overflow); NaN for a block with NaN or inf. */
static inline void block_scale(float amax, float qmax, float * s, float * inv) {
    *s = isinf(amax) ? NAN : amax / qmax;
    *inv = *s > 0 ? 1.0f / *s : 0.0f;
    if (isinf(*inv)) *s = *inv = 0.0f;
}

/* 8 int32 of quantized values from v: v * inv rounded to nearest (plus `off`), adjacent k packed in each int32 (two
 * int16 in products.c, four bytes in int8.c), in k order. */
typedef __m256i (*quantize_fn)(const float * v, __m256 inv, int off);

/* One block of kb values along k of n_lanes rows (rows beyond `rows` are zeros) of src (row stride `stride`
 * floats), each row scaled to |q| <= qmax: the int32 holding k .. k + per_int32 - 1 of lane r at
 * (k / per_int32) * n_lanes + r of dst, the scales into scales[r]. Inlined into each kernel with its constants. */
TARGET static inline __attribute__((always_inline)) void quantize_lanes(
        const float * src, int64_t stride, int rows, int n_lanes, int kb, int per_int32, float qmax, int off,
        quantize_fn quantize, int32_t * dst, float * scales) {
    for (int r = 0; r < n_lanes; r++) {
        if (r >= rows) {
            scales[r] = 0;
            for (int s = 0; s < kb / per_int32; s++) dst[s * n_lanes + r] = 0;
            continue;
        }
        const float * v = src + r * stride;
        float inv_s;
        block_scale(amax_of(v, kb), qmax, &scales[r], &inv_s);
        const __m256 inv = _mm256_set1_ps(inv_s);
        for (int k = 0; k < kb; k += 8 * per_int32) {
            int32_t words[8];
            _mm256_storeu_si256((__m256i *) words, quantize(v + k, inv, off));
            int32_t * d = dst + (k / per_int32) * n_lanes + r;
            for (int i = 0; i < 8; i++) d[i * n_lanes] = words[i];
        }
    }
}

/* The thread's buffer for its packed columns, grown as needed and kept for the next product (ggml's CPU threads
 * are long-lived; a 5 s request's product of 272 columns and K = 3072 packs 0.8 MiB in int16, 0.4 MiB a thread of
 * two), unless larger than KEEP_BYTES: a batch of 64 requests would otherwise pin tens of MiB a thread for good. */
static _Thread_local void * columns_buf;
static _Thread_local size_t columns_cap;
#define KEEP_BYTES ((size_t) 16 << 20)

static inline char * columns_buffer(size_t need) {
    if (need > columns_cap) {
        free(columns_buf);
        columns_buf = aligned_alloc(64, (need + 63) / 64 * 64);
        columns_cap = columns_buf ? need : 0;
        if (!columns_buf) abort();  /* out of memory: no result to give */
    }
    return (char *) columns_buf;
}

/* Groups [g0, g1) of n_r columns of x (F32 [K, N], contiguous rows) quantized into the thread's column buffer, as
 * quantize_lanes lays a block out: per group and block of kb along K, the kb / per_int32 * n_r int32, then the n_r
 * scales; *block_bytes says how far apart the blocks are. Inlined into each kernel with its constants. */
TARGET static inline __attribute__((always_inline)) char * pack_columns(
        const struct ggml_tensor * x, int64_t g0, int64_t g1, int n_r, int kb, int per_int32, float qmax, int off,
        quantize_fn quantize, size_t * block_bytes) {
    const int64_t N = x->ne[1], nb = x->ne[0] / kb;
    const size_t data_bytes = (size_t) kb / per_int32 * n_r * 4;
    *block_bytes = data_bytes + n_r * 4;
    char * packed = columns_buffer((size_t) (g1 - g0) * nb * *block_bytes);
    for (int64_t g = g0; g < g1; g++) {
        const int cols = (int) (N - g * n_r < n_r ? N - g * n_r : n_r);
        for (int64_t b = 0; b < nb; b++) {
            char * block = packed + ((g - g0) * nb + b) * *block_bytes;
            quantize_lanes((const float *) ((const char *) x->data + g * n_r * x->nb[1]) + b * kb,
                           x->nb[1] / sizeof(float), cols, n_r, kb, per_int32, qmax, off, quantize,
                           (int32_t *) block, (float *) (block + data_bytes));
        }
    }
    return packed;
}

/* After a product: a buffer over KEEP_BYTES is not kept. */
static inline void release_columns(void) {
    if (columns_cap > KEEP_BYTES) {
        free(columns_buf);
        columns_buf = NULL;
        columns_cap = 0;
    }
}

/* The valid part of a tile's sums c (n_r columns of m_r rows) into dst [M, N] (F32, contiguous rows) at group g of
 * n_r columns and panel p of m_r rows. */
static inline void store_tile(struct ggml_tensor * dst, const float * c, int64_t g, int64_t p, int n_r, int m_r) {
    const int64_t M = dst->ne[0], N = dst->ne[1];
    const int rows = (int) (M - p * m_r < m_r ? M - p * m_r : m_r);
    const int cols = (int) (N - g * n_r < n_r ? N - g * n_r : n_r);
    for (int t = 0; t < cols; t++)
        memcpy((char *) dst->data + (g * n_r + t) * dst->nb[1] + p * m_r * sizeof(float), c + t * m_r,
               rows * sizeof(float));
}

#endif

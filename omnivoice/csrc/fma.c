/* Float32 products and channels-last convolutions with FMA on x86 CPUs (AVX2 or AVX-512): the codec's
 * convolutions on the CPU and, with `cpu_products="fma"`, the LM's F32 products; and, on the same tiles, the LM's
 * attention on the CPU (omnivoice_fma_attention, at the end).
 *
 * Why: ggml's F32 GEMM (llamafile's tinyBLAS) reads its right operand straight from the tensor, tile by tile,
 * with no blocking for the caches. On the codec's products (few outputs: 32-1024 channels; many columns: up to
 * 122 880 samples; K = 7 taps x the channels) every thread streams the whole column buffer once per group of
 * rows it owns (at a fraction of its rate on the LM's shapes), and a conv first had a node write that column
 * buffer (K copies of the activation) for it to read.
 *
 * What this does: W packed once at load into panels of MR outputs (MR = 16 with AVX2, 32 with AVX-512), k-major
 * (the MR weights of one k side by side). A micro-kernel keeps NR x MR sums in registers (6 x 16 = 12 ymm, or
 * 12 x 32 = 24 zmm) and adds one k at a time: two vector loads of W, NR broadcasts of x, 2 NR FMAs. A conv
 * reads its columns straight from the activation: the column of output t for tap j is the input column
 * t * stride + j * dilation - padding (IC contiguous floats), or zeros outside it, so there is no column buffer.
 * K is taken in blocks of at most KC within one tap, a thread's columns in chunks whose block of x stays in L2
 * while every panel passes over it; the sums of a tile live in dst between blocks.
 *
 * Numbers: every output is one chain of FMAs in k order (taps, then channels), each rounded once; the bias is
 * added after, as the graph's ADD did (a conv of one output channel: see dot_share). The result does not depend
 * on the thread count.
 *
 * Threads split the outputs into a grid of tm x tn rectangles (panels x groups of columns), chosen to read the
 * least: W is read once per column share, x once per panel share (LM shapes on 16 threads split the panels,
 * the codec's split the columns).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#ifndef KC
#define KC 256                    /* k a block at most (within one tap) */
#endif
#ifndef XBLOCK
#define XBLOCK ((size_t) 192 << 10)  /* bytes of x a chunk of columns holds a block (stays in L2) */
#endif
#define MAX_CHUNK 512             /* groups a chunk at most */

/* The packed weight (userdata of a product node): `data` holds panels * K * MR floats, panel p's k-th row of MR
 * outputs at (p * K + k) * MR (outputs past M are zeros). */
struct omnivoice_fma_weight {
    const void * data;
    int64_t M, K;
};

/* A conv node's userdata: the packed weight [OC, taps * IC] (tap-major rows, nn.conv_weight_cl) and the conv's
 * geometry; the node's src[0] is x [IC, T], src[1] the bias [OC] or absent. */
struct omnivoice_fma_conv {
    const struct omnivoice_fma_weight * w;
    int64_t taps, stride, dilation, padding;
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* 2: AVX-512 (MR 32, NR 12), 1: AVX2 and FMA (MR 16, NR 6), 0: neither. OMNIVOICE_FMA_ISA=avx2 keeps an AVX-512
 * CPU on the AVX2 kernel (tests, comparisons). The packed layout follows it: pack and multiply in one process. */
static int isa(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    __builtin_cpu_init();
    int level = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0;
    const char * force = getenv("OMNIVOICE_FMA_ISA");
    if (level && __builtin_cpu_supports("avx512f") && !(force && strcmp(force, "avx2") == 0)) level = 2;
    return cached = level;
}

int omnivoice_fma_supported(void) { return isa() > 0; }

/* Outputs a panel (MR) and columns a tile (NR) of this CPU's kernel. */
static int mr(void) { return isa() == 2 ? 32 : 16; }
static int nr(void) { return isa() == 2 ? 12 : 6; }

int64_t omnivoice_fma_packed_bytes(int64_t M, int64_t K) {
    const int64_t m = mr();
    return (M + m - 1) / m * m * K * (int64_t) sizeof(float);
}

/* W [M][K] row-major floats (ggml's [K, M]) -> the packed layout above. */
void omnivoice_fma_pack(const float * w, int64_t M, int64_t K, void * out) {
    const int64_t m = mr(), panels = (M + m - 1) / m;
    float * q = (float *) out;
    for (int64_t p = 0; p < panels; p++)
        for (int64_t r = 0; r < m; r++) {
            const int64_t row = p * m + r;
            float * d = q + p * K * m + r;
            if (row < M) {
                for (int64_t k = 0; k < K; k++) d[k * m] = w[row * K + k];
            } else {
                for (int64_t k = 0; k < K; k++) d[k * m] = 0.0f;
            }
        }
}

/* One tile: c[j * ldc + r] (NR columns j of MR outputs r) = (load ? c : 0) + sum over k < kc of w[k * MR + r] *
 * x[j * cs + k * ks], then + bias[r] when `bias`. Two forms each: x's columns as they lie (cs = their step,
 * ks = 1) or packed k-major (cs = 1, ks = NR). */
typedef void (*tile_fn)(const float * w, const float * x, int64_t xs, int64_t kc, float * c, int64_t ldc, int load,
                        const float * bias);

/* Per column j of a tile, B the vector width in bits (L = B / 32 lanes): its two vectors of sums c<j>0, c<j>1. */
#define T_DECL(B, j) __m##B c##j##0, c##j##1;
#define T_INIT(B, j)                                                                            \
    if (load) { c##j##0 = _mm##B##_loadu_ps(c + j * ldc); c##j##1 = _mm##B##_loadu_ps(c + j * ldc + B / 32); } \
    else { c##j##0 = _mm##B##_setzero_ps(); c##j##1 = _mm##B##_setzero_ps(); }
#define T_STEP(B, j)                                                                            \
    { const __m##B b = _mm##B##_set1_ps(x[j * cs + k * ks]);                                    \
      c##j##0 = _mm##B##_fmadd_ps(w0, b, c##j##0); c##j##1 = _mm##B##_fmadd_ps(w1, b, c##j##1); }
#define T_BIAS(B, j) { c##j##0 = _mm##B##_add_ps(c##j##0, b0); c##j##1 = _mm##B##_add_ps(c##j##1, b1); }
#define T_STORE(B, j) { _mm##B##_storeu_ps(c + j * ldc, c##j##0); _mm##B##_storeu_ps(c + j * ldc + B / 32, c##j##1); }
#define EACH6(M, B) M(B, 0) M(B, 1) M(B, 2) M(B, 3) M(B, 4) M(B, 5)
#define EACH12(M, B) EACH6(M, B) M(B, 6) M(B, 7) M(B, 8) M(B, 9) M(B, 10) M(B, 11)

/* tile<B> (the body, for constant cs and ks), tile<B>_cols and tile<B>_packed (tile_fn's two forms): MR = 2 L
 * outputs, NR columns (EACH). */
#define DEFINE_TILES(B, ATTR, EACH, NR_)                                                        \
    ATTR static inline __attribute__((always_inline)) void tile##B(                             \
            const float * w, const float * x, int64_t cs, int64_t ks, int64_t kc, float * c, int64_t ldc, \
            int load, const float * bias) {                                                     \
        EACH(T_DECL, B)                                                                         \
        EACH(T_INIT, B)                                                                         \
        for (int64_t k = 0; k < kc; k++) {                                                      \
            const __m##B w0 = _mm##B##_loadu_ps(w + k * (B / 16)), w1 = _mm##B##_loadu_ps(w + k * (B / 16) + B / 32); \
            EACH(T_STEP, B)                                                                     \
        }                                                                                       \
        if (bias) {                                                                             \
            const __m##B b0 = _mm##B##_loadu_ps(bias), b1 = _mm##B##_loadu_ps(bias + B / 32);   \
            EACH(T_BIAS, B)                                                                     \
        }                                                                                       \
        EACH(T_STORE, B)                                                                        \
    }                                                                                           \
    ATTR static void tile##B##_cols(const float * w, const float * x, int64_t xs, int64_t kc, float * c, \
                                    int64_t ldc, int load, const float * bias) {                \
        tile##B(w, x, xs, 1, kc, c, ldc, load, bias);                                           \
    }                                                                                           \
    ATTR static void tile##B##_packed(const float * w, const float * x, int64_t xs, int64_t kc, float * c, \
                                      int64_t ldc, int load, const float * bias) {              \
        (void) xs;                                                                              \
        tile##B(w, x, 1, NR_, kc, c, ldc, load, bias);                                          \
    }

DEFINE_TILES(256, AVX2, EACH6, 6)
DEFINE_TILES(512, AVX512, EACH12, 12)

/* The product's geometry: out[o, t] = bias[o] + sum over tap j and channel c of W[o, j * IC + c] *
 * x[c, t * stride + j * dilation - padding] (zero outside [0, T)); a plain product is one tap, stride 1. */
struct job {
    const float * w;        /* packed */
    int64_t M, K, IC, taps, stride, dilation, padding;
    const char * x;         /* [IC, T], columns xb bytes apart */
    size_t xb;
    int64_t T;
    char * d;               /* [M, N], columns db bytes apart */
    size_t db;
    int64_t N;
    const float * bias;     /* [M] or NULL */
    int packed_x;           /* x is omnivoice_fma_pack_cols's layout instead (a plain product) */
};

/* The thread's buffers: copies of columns that cross the padding or the last partial tile, and a tile's sums. */
static _Thread_local float * copy_buf;
static _Thread_local size_t copy_cap;

/* *buf, grown to hold at least n floats (64-byte aligned). */
static float * grown(float ** buf, size_t * cap, size_t n) {
    if (n > *cap) {
        free(*buf);
        *buf = (float *) aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        *cap = *buf ? n : 0;
        if (!*buf) abort();  /* out of memory: no result to give */
    }
    return *buf;
}

static float * thread_copies(size_t n) { return grown(&copy_buf, &copy_cap, n); }

/* Where group g's NR columns of block (tap j, channels c0..c0+kc) are. Straight in x when all lie inside it and
 * inside N and `direct` (returns x's pointer, *xs its column step in floats); else copied k-major into `spare`
 * (kc * NR floats, zeros outside x and past N; *xs = 0). The copy costs a pass over the columns but reads them
 * from one stream: read where they lie, the NR columns of the LM's products are multiples of 4 KiB apart, all
 * in one set of L1 (ggml's F32 products and ours both ran well below the FMA rate that way). */
static const float * columns(const struct job * J, int64_t g, int n_r, int64_t j, int64_t c0, int64_t kc,
                             int direct, float * spare, int64_t * xs) {
    if (J->packed_x) {  /* group g's K x NR floats, k-major, zeros past N */
        *xs = 0;
        return (const float *) J->x + (g * J->K + c0) * n_r;
    }
    const int64_t t0 = g * n_r, off = j * J->dilation - J->padding;
    const int64_t s0 = t0 * J->stride + off, s1 = (t0 + n_r - 1) * J->stride + off;
    if (direct && t0 + n_r <= J->N && s0 >= 0 && s1 < J->T) {
        *xs = (int64_t) (J->xb / sizeof(float)) * J->stride;
        return (const float *) (J->x + s0 * J->xb) + c0;
    }
    for (int q = 0; q < n_r; q++) {
        const int64_t t = t0 + q, s = t * J->stride + off;
        if (t < J->N && s >= 0 && s < J->T) {
            const float * src = (const float *) (J->x + s * J->xb) + c0;
            for (int64_t k = 0; k < kc; k++) spare[k * n_r + q] = src[k];
        } else {
            for (int64_t k = 0; k < kc; k++) spare[k * n_r + q] = 0.0f;
        }
    }
    *xs = 0;
    return spare;
}

/* The tile function for columns as `columns` left them (xs 0: packed). */
static tile_fn tile_for(int64_t xs) {
    if (isa() == 2) return xs ? tile512_cols : tile512_packed;
    return xs ? tile256_cols : tile256_packed;
}

/* Tile (panel p, group g) where it is partial (M % MR outputs or N % NR columns): the sums over all of K in a tile
 * on the stack, then its valid part copied into dst. */
static void edge_tile(const struct job * J, float * spare, int64_t p, int64_t g) {
    const int m_r = mr(), n_r = nr();
    const int64_t ds = J->db / sizeof(float);
    float sums[12 * 32], bias[32];
    const int rows = (int) (J->M - p * m_r < m_r ? J->M - p * m_r : m_r);
    const int cols = (int) (J->N - g * n_r < n_r ? J->N - g * n_r : n_r);
    if (J->bias) {
        memset(bias, 0, sizeof bias);
        memcpy(bias, J->bias + p * m_r, rows * sizeof(float));
    }
    for (int64_t j = 0; j < J->taps; j++)
        for (int64_t c0 = 0; c0 < J->IC; c0 += KC) {
            const int64_t kc = J->IC - c0 < KC ? J->IC - c0 : KC, k0 = j * J->IC + c0;
            int64_t xs;
            const float * x = columns(J, g, n_r, j, c0, kc, 0, spare, &xs);
            tile_for(xs)(J->w + (p * J->K + k0) * m_r, x, xs, kc, sums, m_r, k0 > 0,
                         J->bias && k0 + kc == J->K ? bias : NULL);
        }
    for (int q = 0; q < cols; q++)
        memcpy((float *) J->d + (g * n_r + q) * ds + p * m_r, sums + q * m_r, rows * sizeof(float));
}

/* Panels [p0, p1) x groups [g0, g1) of the product: the full tiles blocked for the caches, then the tiles of a
 * partial panel (M % MR) or group (N % NR) through a tile of sums on the stack, over all of K each. */
static void run(const struct job * J, int64_t p0, int64_t p1, int64_t g0, int64_t g1) {
    const int m_r = mr(), n_r = nr();
    const int64_t full_p = J->M / m_r, full_g = J->N / n_r;
    const int64_t ds = J->db / sizeof(float);
    const int64_t kc_max = J->IC < KC ? J->IC : KC;
    int64_t chunk = (int64_t) (XBLOCK / ((size_t) n_r * kc_max * sizeof(float)));  /* groups a chunk */
    chunk = chunk < 1 ? 1 : chunk > MAX_CHUNK ? MAX_CHUNK : chunk;
    float * spare = thread_copies((size_t) chunk * n_r * kc_max);
    const float * xp[MAX_CHUNK];
    int64_t xs[MAX_CHUNK];
    const int64_t pf1 = p1 < full_p ? p1 : full_p, gf1 = g1 < full_g ? g1 : full_g;
    /* Columns a multiple of 4 KiB apart (the LM's K of 1024, 2048, 3072; a conv of 1024 channels) share one set
     * of L1, so they are packed; others are read where they lie, unless packing pays off over many panels. */
    const int direct = (J->xb * J->stride) % 4096 != 0 || pf1 - p0 < 4;
    for (int64_t ga = g0; ga < gf1; ga += chunk) {
        const int64_t gb = ga + chunk < gf1 ? ga + chunk : gf1;
        for (int64_t j = 0; j < J->taps; j++)
            for (int64_t c0 = 0; c0 < J->IC; c0 += KC) {
                const int64_t kc = J->IC - c0 < KC ? J->IC - c0 : KC, k0 = j * J->IC + c0;
                const int load = k0 > 0, last = k0 + kc == J->K;
                for (int64_t g = ga; g < gb; g++)
                    xp[g - ga] = columns(J, g, n_r, j, c0, kc, direct, spare + (g - ga) * n_r * kc, &xs[g - ga]);
                /* a panel's block of W (MR x kc floats) stays in L1 while the chunk's columns pass */
                for (int64_t p = p0; p < pf1; p++) {
                    const float * w = J->w + (p * J->K + k0) * m_r;
                    const float * bias = last && J->bias ? J->bias + p * m_r : NULL;
                    for (int64_t g = ga; g < gb; g++)
                        tile_for(xs[g - ga])(w, xp[g - ga], xs[g - ga], kc, (float *) J->d + g * n_r * ds + p * m_r,
                                             ds, load, bias);
                }
            }
    }
    /* the rest: the partial group (N % NR) of the full panels, then the partial panel (M % MR), if the share has
     * them */
    for (int64_t p = p0; p < p1; p++)
        for (int64_t g = p < full_p ? (g0 > full_g ? g0 : full_g) : g0; g < g1; g++)
            edge_tile(J, spare, p, g);
}

/* Split nth threads into tm x tn (panels x groups), reading the least: W (M K floats) once per column share,
 * x (K N) once per panel share. Where no split fits (fewer panels and groups than threads), the groups are split
 * nth ways and some threads get none. */
static void split(const struct job * J, int nth, int64_t panels, int64_t groups, int * tm, int * tn) {
    double best = -1;
    *tm = 1;
    *tn = nth;
    for (int a = 1; a <= nth; a++) {
        if (nth % a) continue;
        const int b = nth / a;
        if (a > panels || b > groups) continue;
        const double cost = (double) b * J->M * J->K + (double) a * J->K * J->N;
        if (best < 0 || cost < best) {
            best = cost;
            *tm = a;
            *tn = b;
        }
    }
}

/* A conv of one output channel (the DAC's last): a panel would be MR - 1 rows of zeros, so each output is a dot
 * product instead, its taps' IC contiguous channels in 8 lanes (summed across the lanes at the end, then the
 * bias). Thread ith of nth takes its share of the outputs: the panel path would multiply the zeros too. */
AVX2 static void dot_share(const struct job * J, int ith, int nth) {
    const int64_t m_r = mr(), t0 = J->N * ith / nth, t1 = J->N * (ith + 1) / nth;
    const int64_t IC = J->IC, v = IC / 8 * 8;
    float * w = thread_copies((size_t) J->K);  /* row 0 of the packed panel, contiguous */
    for (int64_t k = 0; k < J->K; k++) w[k] = J->w[k * m_r];
    for (int64_t t = t0; t < t1; t++) {
        __m256 acc = _mm256_setzero_ps();
        float tail = 0.0f;
        for (int64_t j = 0; j < J->taps; j++) {
            const int64_t s = t * J->stride + j * J->dilation - J->padding;
            if (s < 0 || s >= J->T) continue;
            const float * x = (const float *) (J->x + s * J->xb), * wj = w + j * IC;
            for (int64_t c = 0; c < v; c += 8)
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(wj + c), _mm256_loadu_ps(x + c), acc);
            for (int64_t c = v; c < IC; c++) tail = fmaf(wj[c], x[c], tail);
        }
        float lanes[8], sum = tail;
        _mm256_storeu_ps(lanes, acc);
        for (int i = 0; i < 8; i++) sum += lanes[i];
        if (J->bias) sum += J->bias[0];
        *(float *) (J->d + t * J->db) = sum;
    }
}

static void run_share(const struct job * J, int ith, int nth) {
    if (J->M == 1 && !J->packed_x) {
        dot_share(J, ith, nth);
        return;
    }
    const int m_r = mr(), n_r = nr();
    const int64_t panels = (J->M + m_r - 1) / m_r, groups = (J->N + n_r - 1) / n_r;
    int tm, tn;
    split(J, nth, panels, groups, &tm, &tn);
    const int a = ith % tm, b = ith / tm;
    const int64_t p0 = panels * a / tm, p1 = panels * (a + 1) / tm;
    const int64_t g0 = groups * b / tn, g1 = groups * (b + 1) / tn;
    if (p0 < p1 && g0 < g1) run(J, p0, p1, g0, g1);
}

int omnivoice_fma_cols_per_group(void) { return nr(); }

/* dst [K * NR, groups] = x [K, N] F32 (src[0], rows contiguous) in groups of NR columns, each group k-major (the NR
 * values of one k side by side), zeros past N: the product's input, packed once for all the threads (and for q,
 * k and v alike). Packed by each thread for itself, x was packed as many times as threads split the panels: with
 * 16 threads a thread's ~6 panels then gave each packed value only 12 FMAs. */
void omnivoice_fma_pack_cols(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const int n_r = nr();
    const int64_t K = x->ne[0], N = x->ne[1], groups = dst->ne[1];
    const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    for (int64_t g = g0; g < g1; g++) {
        float * out = (float *) dst->data + g * K * n_r;
        for (int q = 0; q < n_r; q++) {
            const int64_t t = g * n_r + q;
            if (t < N) {
                const float * src = (const float *) ((const char *) x->data + t * x->nb[1]);
                for (int64_t k = 0; k < K; k++) out[k * n_r + q] = src[k];
            } else {
                for (int64_t k = 0; k < K; k++) out[k * n_r + q] = 0.0f;
            }
        }
    }
}

/* dst [M, N] = W x for x packed by omnivoice_fma_pack_cols (src[0]), W the packed weight of `userdata`
 * (struct omnivoice_fma_weight): a ggml_custom_4d node. */
void omnivoice_fma_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct omnivoice_fma_weight * w = (const struct omnivoice_fma_weight *) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const struct job J = {(const float *) w->data, w->M, w->K, w->K, 1, 1, 1, 0, (const char *) x->data, 0,
                          dst->ne[1], (char *) dst->data, dst->nb[1], dst->ne[1], NULL, 1};
    run_share(&J, ith, nth);
}

/* dst [OC, T_out] = the channels-last Conv1d of x [IC, T] (src[0], contiguous rows) with the packed weight and
 * geometry of `userdata` (struct omnivoice_fma_conv), plus the bias src[1] [OC] when present. */
void omnivoice_fma_conv(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct omnivoice_fma_conv * cv = (const struct omnivoice_fma_conv *) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const struct ggml_tensor * b = dst->src[1];
    const struct job J = {(const float *) cv->w->data, cv->w->M, cv->w->K, x->ne[0], cv->taps, cv->stride,
                          cv->dilation, cv->padding, (const char *) x->data, x->nb[1], x->ne[1],
                          (char *) dst->data, dst->nb[1], dst->ne[1], b ? (const float *) b->data : NULL, 0};
    run_share(&J, ith, nth);
}

#if defined(OMNIVOICE_LIBMVEC)
/* glibc's libmvec has vector expf variants (as ops.c's sinf): the softmax loop below calls them 8 or 16 at a time */
__attribute__((simd("notinbranch"))) float expf(float);
#endif

/* One row of scores to softmax numerators: s[j] = exp(s[j] * scale - max), j < n; returns their sum. Each
 * operation rounded on its own, as ggml's flash attention does them (scale, then exp of the difference). */
AVX2 static float softmax_row(float * s, int64_t n, float scale) {
    float m = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) {
        s[j] = s[j] * scale;
        m = s[j] > m ? s[j] : m;
    }
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        const float e = expf(s[j] - m);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* The thread's buffers for attention: K and V of one kv head packed, a block's scores, queries and outputs. */
static _Thread_local float * attn_buf;
static _Thread_local size_t attn_cap;

/* Row i of head h of a [D, heads, n] tensor. */
static const float * head_row(const struct ggml_tensor * t, int64_t h, int64_t i) {
    return (const float *) ((const char *) t->data + h * t->nb[1] + i * t->nb[2]);
}

int omnivoice_fma_attention_supported(int64_t head_dim) { return isa() > 0 && head_dim % mr() == 0; }

/* dst [D * H, n] = softmax(q k^T / sqrt(D)) v over one segment, every query attending every key: q [D, H, n], k and
 * v [D, Hkv, n] (src[0..2], F32, each head's rows of D contiguous; query head h reads kv head h / (H / Hkv)).
 *
 * Why: ggml's CPU flash attention takes one query at a time (a dot product per key, a scalar expf per score, the
 * online softmax's rescaling of V's running sum), a tenth of an LM step on a 2-core CPU (BENCHMARKS.md). Here a
 * block of NR queries of one head is two products on this file's tiles: the scores against K packed in panels of
 * MR keys (k-major over D), then, after the softmax of each query's row of scores (all keys at once, no
 * rescaling), the numerators times V packed in panels of MR of its D values; each output is then multiplied by
 * the inverse of its sum, as ggml's are.
 * Float32 throughout: every score and output is one FMA chain; only the order of the sums differs from ggml's.
 *
 * Threads take (head, block of NR queries) items in head-major order and pack a kv head's K and V when they reach
 * it. D must be a multiple of MR (omnivoice_fma_attention_supported). */
void omnivoice_fma_attention(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * q = dst->src[0], * k = dst->src[1], * v = dst->src[2];
    const int m_r = mr(), n_r = nr();
    const int64_t D = q->ne[0], H = q->ne[1], n = q->ne[2], group = H / k->ne[1];
    const int64_t blocks = (n + n_r - 1) / n_r, items = H * blocks;
    const int64_t i0 = items * ith / nth, i1 = items * (ith + 1) / nth;
    if (i0 == i1) return;
    const int64_t n_pad = (n + m_r - 1) / m_r * m_r;
    float * kp = grown(&attn_buf, &attn_cap, (size_t) (2 * n_pad * D + n_r * n_pad + 2 * n_r * D));
    float * vp = kp + n_pad * D, * s = vp + n_pad * D, * qb = s + n_r * n_pad, * ob = qb + n_r * D;
    const float scale = 1.0f / sqrtf((float) D);
    const tile_fn tile = tile_for(1);
    int64_t packed = -1;
    for (int64_t it = i0; it < i1; it++) {
        const int64_t h = it / blocks, t0 = it % blocks * n_r, kv = h / group;
        const int nq = (int) (n - t0 < n_r ? n - t0 : n_r);
        if (kv != packed) {
            /* K: panel p holds keys p * MR .. + MR, D rows of MR (zeros past n); V: panel p holds values p * MR ..
             * + MR of every key, n rows of MR */
            for (int64_t j = 0; j < n_pad; j++) {
                float * d = kp + j / m_r * D * m_r + j % m_r;
                if (j < n) {
                    const float * kr = head_row(k, kv, j);
                    for (int64_t c = 0; c < D; c++) d[c * m_r] = kr[c];
                } else {
                    for (int64_t c = 0; c < D; c++) d[c * m_r] = 0.0f;
                }
            }
            for (int64_t j = 0; j < n; j++) {
                const float * vr = head_row(v, kv, j);
                for (int64_t p = 0; p < D / m_r; p++)
                    memcpy(vp + (p * n + j) * m_r, vr + p * m_r, m_r * sizeof(float));
            }
            packed = kv;
        }
        for (int t = 0; t < n_r; t++) {
            if (t < nq) memcpy(qb + t * D, head_row(q, h, t0 + t), D * sizeof(float));
            else memset(qb + t * D, 0, D * sizeof(float));
        }
        for (int64_t p = 0; p < n_pad / m_r; p++) tile(kp + p * D * m_r, qb, D, D, s + p * m_r, n_pad, 0, NULL);
        float inv[12];
        for (int t = 0; t < nq; t++) inv[t] = 1.0f / softmax_row(s + t * n_pad, n, scale);
        for (int64_t p = 0; p < D / m_r; p++) tile(vp + p * n * m_r, s, n_pad, n, ob + p * m_r, D, 0, NULL);
        for (int t = 0; t < nq; t++) {
            float * o = (float *) ((char *) dst->data + (t0 + t) * dst->nb[1]) + h * D;
            for (int64_t c = 0; c < D; c++) o[c] = ob[t * D + c] * inv[t];
        }
    }
    if (attn_cap > ((size_t) 4 << 20)) {  /* a long segment's buffers are not kept for good */
        free(attn_buf);
        attn_buf = NULL;
        attn_cap = 0;
    }
}

#else  /* not x86-64 with GCC or Clang: no kernel; the graphs keep ggml's products */

int omnivoice_fma_supported(void) { return 0; }
int64_t omnivoice_fma_packed_bytes(int64_t M, int64_t K) { return M * K * 4; }
void omnivoice_fma_pack(const float * w, int64_t M, int64_t K, void * out) { (void) w; (void) M; (void) K; (void) out; abort(); }
int omnivoice_fma_cols_per_group(void) { return 1; }
void omnivoice_fma_pack_cols(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}
void omnivoice_fma_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}
void omnivoice_fma_conv(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}
int omnivoice_fma_attention_supported(int64_t head_dim) { (void) head_dim; return 0; }
void omnivoice_fma_attention(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}

#endif

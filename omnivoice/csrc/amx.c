/* Matrix products on Intel AMX tiles in BF16 (the LM's products on the CPU, `cpu_products="amx"`).
 *
 * Why: on AMX CPUs ggml's BF16 products do not use the tiles (they run slower than its F32 ones); its AMX kernels
 * take only quantized types (Q8_0, K-quants), whose 8-bit activations keep 85 % of the float32 choices. One
 * TDPBF16PS multiplies a 16 x 32 tile by a 32 x 16 one: 8192 multiply-adds where an AVX-512 FMA does 16. On the
 * LM's shapes this kernel runs well ahead of ggml's AMX Q8_0 (tools/matmul_bench.py --types amx,q8_0;
 * BENCHMARKS.md has the figures).
 *
 * Numbers: W rounded to BF16 once at load, x to BF16 by ggml's cast node before the product (round to nearest
 * even, both), sums in F32 inside the tile unit: the rounding of ggml's BF16 products.
 *
 * Layout: W is packed into panels of 16 rows (outputs), a panel holding, for each pair of k, the 16 rows' two
 * BF16 values side by side: a B tile of TDPBF16PS is 16 consecutive pairs of k of a panel (1 KiB). Panels come
 * in pairs (zeros past M), a unit of 32 outputs. x [K, N] in BF16 is read as A tiles as it is (16 tokens by 32
 * k, a row stride of the tensor's); the last block of tokens goes through a zero-padded copy.
 *
 * Threads split the units of outputs: W is read once in all, and each C tile is written by one thread.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define UNIT 32  /* outputs a unit: two B tiles of 16 */
#define TB 32    /* tokens a block: two A tiles of 16 */
#define KS 32    /* k a step: a tile row of 32 BF16 */
#define CHUNK 4  /* units whose weights (CHUNK * 32 * K * 2 bytes: 768 KiB at K = 3072) stay in L2 for a block */

/* The packed weight a product reads (userdata of its node). */
struct omnivoice_amx_weight {
    const void * data;
    int64_t M, K;
};

int64_t omnivoice_amx_packed_bytes(int64_t M, int64_t K) {
    return (M + UNIT - 1) / UNIT * UNIT * K * 2;
}

/* ggml's FP32 -> BF16: round to nearest even; NaN stays a (quiet) NaN. */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t) ((u >> 16) | 64);
    return (uint16_t) ((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* W [M][K] row-major floats (ggml's [K, M]) -> the packed layout above; K a multiple of 32. */
void omnivoice_amx_pack(const float * w, int64_t M, int64_t K, void * out) {
    const int64_t panels = (M + UNIT - 1) / UNIT * 2;
    uint16_t * q = (uint16_t *) out;
    for (int64_t p = 0; p < panels; p++)
        for (int r = 0; r < 16; r++) {
            const int64_t row = p * 16 + r;
            uint16_t * d = q + p * K * 16 + r * 2;  /* pair kp of row r at (kp * 16 + r) * 2 */
            for (int64_t k = 0; k < K; k += 2) {
                d[k * 16] = row < M ? to_bf16(w[row * K + k]) : 0;
                d[k * 16 + 1] = row < M ? to_bf16(w[row * K + k + 1]) : 0;
            }
        }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Whether this CPU has AMX tiles with BF16, the OS keeps their state (XCR0 bits 17-18), and this process may use
 * them (Linux asks each process to request the tile data state first; granted once, it holds for every thread). */
int omnivoice_amx_supported(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    unsigned a, b, c, d;
    int ok = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 22 & 1) &&
        __get_cpuid(1, &a, &b, &c, &d) && (c >> 27 & 1)) {  /* AMX-TILE, AMX-BF16; OSXSAVE */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        ok = (lo >> 17 & 3) == 3 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return cached = ok;
}

#define AMX __attribute__((target("amx-tile,amx-bf16")))

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* ldtilecfg / sttilecfg with the whole 64-byte configuration as the memory operand. GCC 12's _tile_loadconfig names
 * only its first 8 bytes (`*(const void **) config`), so the compiler may drop the stores of rows and colsb as
 * dead: ggml's own AMX kernels, built by Debian 12's GCC 12.2, loaded a configuration of zeros and garbage that
 * way and died of a general-protection fault on their first product (vendor/ggml/patches/0016). */
#ifndef load_tile_config  /* (tests/nn/csrc/amx_emulated.c defines both as C) */
AMX static inline void load_tile_config(const struct tile_config * cfg) {
    __asm__ volatile("ldtilecfg %0" :: "m"(*cfg));
}
AMX static inline void store_tile_config(struct tile_config * cfg) {
    __asm__ volatile("sttilecfg %0" : "=m"(*cfg));
}
#endif

/* The thread's zero-padded copy of the last block of tokens (TB rows of K BF16). */
static _Thread_local uint16_t * tail_buf;
static _Thread_local size_t tail_cap;

/* C tile i (16 tokens x 16 outputs, F32) -> dst rows t0.., columns n0.., only those within [N, M]. */
#define STORE_TILE(i, t0, n0)                                                                                     \
    do {                                                                                                          \
        if ((t0) + 16 <= N && (n0) + 16 <= M) {                                                                   \
            _tile_stored(i, (char *) dst->data + (t0) * ds + (n0) * 4, ds);                                       \
        } else if ((t0) < N && (n0) < M) {                                                                        \
            float tmp[16 * 16];                                                                                   \
            _tile_stored(i, tmp, 64);                                                                             \
            const int64_t rows = N - (t0) < 16 ? N - (t0) : 16, cols = M - (n0) < 16 ? M - (n0) : 16;            \
            for (int64_t r = 0; r < rows; r++)                                                                    \
                memcpy((char *) dst->data + ((t0) + r) * ds + (n0) * 4, tmp + r * 16, cols * 4);                  \
        }                                                                                                         \
    } while (0)

/* dst [M, N] F32 = W x for x [K, N] BF16 (src[0], rows contiguous), W the packed weight of `userdata`
 * (struct omnivoice_amx_weight): a ggml_custom_4d node. Thread ith of nth takes units of 32 outputs. */
AMX void omnivoice_amx_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct omnivoice_amx_weight * w = (const struct omnivoice_amx_weight *) userdata;
    const struct ggml_tensor * x = dst->src[0];
    const int64_t M = w->M, K = w->K, N = x->ne[1], units = (M + UNIT - 1) / UNIT;
    const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    if (u0 == u1) return;
    const size_t xs = x->nb[1], ds = dst->nb[1];
    const int64_t tail = N / TB * TB;
    if (tail < N && (size_t) TB * K > tail_cap) {
        free(tail_buf);
        tail_buf = (uint16_t *) aligned_alloc(64, (size_t) TB * K * 2);
        tail_cap = tail_buf ? (size_t) TB * K : 0;
        if (!tail_buf) abort();  /* out of memory: no result to give */
    }
    if (tail < N) {
        for (int64_t r = 0; r < TB; r++) {
            if (tail + r < N) memcpy(tail_buf + r * K, (const char *) x->data + (tail + r) * xs, K * 2);
            else memset(tail_buf + r * K, 0, K * 2);
        }
        /* GCC's _tile_loadd declares no memory read: without this barrier the copy above could legally be moved
         * past the tile loads that read it (the class of the _tile_loadconfig bug above) */
        __asm__ volatile("" ::: "memory");
    }
    /* The thread's tile configuration before this node, put back after it: ggml's own AMX kernels (Q8_0,
     * K-quants) configure a thread's tiles once, on their first product there, and count on it after. */
    struct tile_config saved, cfg;
    store_tile_config(&saved);
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    load_tile_config(&cfg);
    const char * wq = (const char *) w->data;
    const size_t panel_bytes = (size_t) K * 32;  /* K / 2 pairs x 16 rows x 4 bytes */
    for (int64_t c0 = u0; c0 < u1; c0 += CHUNK) {
        const int64_t c1 = c0 + CHUNK < u1 ? c0 + CHUNK : u1;
        for (int64_t t0 = 0; t0 < N; t0 += TB) {
            const char * a = t0 < tail ? (const char *) x->data + t0 * xs : (const char *) tail_buf;
            const size_t as = t0 < tail ? xs : (size_t) K * 2;
            for (int64_t u = c0; u < c1; u++) {
                const char * b = wq + u * 2 * panel_bytes;
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                for (int64_t k = 0; k < K; k += KS) {
                    _tile_loadd(4, a + k * 2, as);
                    _tile_loadd(5, a + 16 * as + k * 2, as);
                    _tile_loadd(6, b + k * 32, 64);
                    _tile_loadd(7, b + panel_bytes + k * 32, 64);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
                const int64_t n0 = u * UNIT;
                STORE_TILE(0, t0, n0);
                STORE_TILE(1, t0, n0 + 16);
                STORE_TILE(2, t0 + 16, n0);
                STORE_TILE(3, t0 + 16, n0 + 16);
            }
        }
    }
    if (saved.palette) load_tile_config(&saved);
    else _tile_release();
}

#else  /* not x86-64 with GCC or Clang: no kernel; the loader keeps ggml's products */

int omnivoice_amx_supported(void) { return 0; }
void omnivoice_amx_mul_mat(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) dst; (void) ith; (void) nth; (void) userdata; abort();
}

#endif

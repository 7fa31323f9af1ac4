/* omnivoice/csrc/amx.c compiled with its tile instructions replaced by C that does what Intel's manual says they
 * do (TILELOADD, TILESTORED, TILEZERO, TDPBF16PS: C[m][n] += sum over k-pairs p of A[m][2p] B[p][2n] +
 * A[m][2p+1] B[p][2n+1], products of BF16 values summed in F32), so that the kernel's packing, tile indexing and
 * edges are tested on any x86 CPU (tests/nn/test_amx_emulated.py), not only where AMX exists. Built by the test
 * with the system's C compiler and the ggml headers. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static unsigned char tiles[8][16][64];

static void emu_load(int i, const void * base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy(tiles[i][r], (const char *) base + r * stride, 64);
}
static void emu_store(int i, void * base, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy((char *) base + r * stride, tiles[i][r], 64);
}
static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t) h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void emu_dpbf16ps(int c, int a, int b) {
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float * acc = (float *) tiles[c][m] + n;
            for (int p = 0; p < 16; p++) {
                const uint16_t * A = (const uint16_t *) tiles[a][m];
                const uint16_t * B = (const uint16_t *) tiles[b][p];
                *acc += bf16_value(A[2 * p]) * bf16_value(B[2 * n]) +
                        bf16_value(A[2 * p + 1]) * bf16_value(B[2 * n + 1]);
            }
        }
}

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_release
#define _tile_loadd(i, base, stride) emu_load(i, base, stride)
#define _tile_stored(i, base, stride) emu_store(i, base, stride)
#define _tile_zero(i) memset(tiles[i], 0, sizeof tiles[i])
#define _tile_dpbf16ps(c, a, b) emu_dpbf16ps(c, a, b)
#define load_tile_config(cfg) (void) (cfg)
#define store_tile_config(cfg) memset(cfg, 0, 64)
#define _tile_release() (void) 0

#include "amx.c"

/* y [N][M] = x [N][K] (BF16) times the packed w [M][K]: the kernel run by `nth` threads in turn. */
void emulated_product(const float * w, int64_t M, int64_t K, uint16_t * x, int64_t N, float * y, int nth,
                      void * packed) {
    omnivoice_amx_pack(w, M, K, packed);
    struct omnivoice_amx_weight weight = {packed, M, K};
    struct ggml_tensor xt, yt;
    memset(&xt, 0, sizeof xt);
    memset(&yt, 0, sizeof yt);
    xt.data = x;
    xt.ne[0] = K;
    xt.ne[1] = N;
    xt.nb[0] = 2;
    xt.nb[1] = K * 2;
    yt.data = y;
    yt.ne[0] = M;
    yt.ne[1] = N;
    yt.nb[0] = 4;
    yt.nb[1] = M * 4;
    yt.src[0] = &xt;
    for (int ith = 0; ith < nth; ith++) omnivoice_amx_mul_mat(&yt, ith, nth, &weight);
}

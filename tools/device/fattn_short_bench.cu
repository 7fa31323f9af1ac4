// Patch 0007's short-sequence flash-attention kernel (vendor/ggml/patches) outside ggml, as patches 0011-0013 left
// it ("base") and with variants of its inner loop (template flags of the body), timed by CUDA events on the shapes
// a TTS request gives it: a lone request's two segments as one grid (auto5, clone5, auto20, and auto20t: the
// segments of tools/bench.py's 20 s text), and the batched engine's padded buckets (a mask, many sequences).
//   kld    K's B operands by ldmatrix.x4: four shared loads where there were sixteen     (kept: patch 0014)
//   ex2    the softmax in base 2: one FMA, then MUFU.EX2 alone (ex2.approx.ftz)          (kept: patch 0014)
//   skip   no key bounds checks in chunks wholly inside Lk, no rescale of O where no row's max moved (exact;
//          slower: the warp vote costs more than the multiplies it saves)
//   nq/kc  query tiles a block and keys a staged chunk; N/SM: registers capped so that N blocks fit an SM
//          (two tiles over 32-key chunks, four an SM, took the 64-request buckets 278 -> 201 us, but 32-key
//          chunks sum a row in another order than the lone request's 64: batched tokens would differ from one
//          by one's, so not kept)
//   rowmask the buckets' mask as one row a sequence, broadcast over its queries (the row staged a chunk ahead, a
//          chunk whose row is all zero adds nothing): what the full [Lk, Lq] mask costs the kernel (patch 0019)
//   lengths no mask at all, each sequence's Lk its real length, as a lone request's segment runs: the bound
//   sb/qs/il a lone request's pair without mask in more, smaller blocks: K and V single-buffered, each warp's Q
//          tile in shared memory (fewer registers), the two calls' blocks interleaved; each checked byte for byte
//          against `kld ex2 nomask` (draft patch 0025, docs/results/h200-2026-12-03-wide/)
// Each variant's output is checked against base (max abs difference) and base against a double-precision CPU
// reference on two heads. `--ncu` runs each configuration once (for Nsight Compute). Results: BENCHMARKS.md,
// "The short-sequence attention kernel measured alone".
//
//     nvcc -O3 -arch=sm_90 -std=c++17 -Xptxas -v -o /tmp/fsb tools/device/fattn_short_bench.cu && /tmp/fsb
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define WARP_SIZE 32

#define FATTN_SHORT_D      128
#define FATTN_SHORT_ROW    (FATTN_SHORT_D + 8)
// dynamic shared memory: two stages of K and V chunks (and of the mask's tile where there is a mask)
// mk: the mask's form (0: a row a query, 1: one row a sequence for all its queries)
// (sb: one buffer of K and one of V, no mask)
// (qs: and each warp's Q tile, 16 rows)
static size_t fattn_short_smem_bytes(const int nq, const int kc, const bool masked, const int mk = 0, const bool sb = false,
                                     const bool qs = false) {
    const size_t q = qs ? (size_t) 2*nq*16*FATTN_SHORT_ROW*sizeof(half) : 0;  // 2*nq warps (gqa 2)
    if (sb) {
        return 2*kc*FATTN_SHORT_ROW*sizeof(half) + q;
    }
    if (qs) {
        return 2*2*kc*FATTN_SHORT_ROW*sizeof(half) + q;
    }
    return 2*(2*kc*FATTN_SHORT_ROW + (masked ? (mk == 1 ? kc : 16*nq*(kc + 8)) : 0))*sizeof(half);
}

static __device__ __forceinline__ void fattn_short_mma(float c[4], const uint32_t a[4], const uint32_t b0, const uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// four 8x8 matrices of halves from shared memory, transposed or not: thread l gives the address of row l % 8 of
// matrix l / 8
template <bool TRANS>
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const half * row) {
    const unsigned int addr = (unsigned int) __cvta_generic_to_shared(row);
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
            : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    }
}

static __device__ __forceinline__ uint32_t fattn_short_pack(const float x, const float y) {
    const half2 h = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t *>(&h);
}

static __device__ __forceinline__ void fattn_short_cp16(half * dst, const void * src, const bool valid) {
    const unsigned int d = (unsigned int) __cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(valid ? 16 : 0));
}

enum { FATTN_SHORT_OUT_F32 = 0, FATTN_SHORT_OUT_F16 = 1, FATTN_SHORT_OUT_BF16 = 2 };

static __device__ __forceinline__ void fattn_short_store(char * dst, const int64_t i, const int type, const float x, const float y) {
    if (type == FATTN_SHORT_OUT_F32) {
        *(float2 *) (dst + i*sizeof(float)) = make_float2(x, y);
    } else if (type == FATTN_SHORT_OUT_F16) {
        *(half2 *) (dst + i*sizeof(half)) = __floats2half2_rn(x, y);
    } else {
        *(nv_bfloat162 *) (dst + i*sizeof(nv_bfloat16)) = __floats2bfloat162_rn(x, y);
    }
}

static __device__ __forceinline__ float fattn_ex2(const float x) {  // 2^x, MUFU.EX2 alone (flushes subnormals)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int NQ, int KC, bool KLD, bool EX2, bool SKIP, int MK, bool SB = false, bool QS = false>
static __device__ __forceinline__ void flash_attn_short_body(
        const char * __restrict__ Q, const char * __restrict__ K, const char * __restrict__ V,
        const char * __restrict__ mask, char * __restrict__ dst,
        const int Lq, const int Lk, const int H, const int gqa, const float scale,
        const int64_t nbq1, const int64_t nbq2, const int64_t nbq3, const int64_t nbk1, const int64_t nbk2,
        const int64_t nbk3, const int64_t nbv1, const int64_t nbv2, const int64_t nbv3, const int64_t nbm1,
        const int64_t nbm3, const int nem3, const int out_type, const int bx) {
    constexpr int D = FATTN_SHORT_D, ROW = FATTN_SHORT_ROW, MROW = KC + 8, MPAIRS = KC/8;
    constexpr float L2E = 1.4426950408889634f;
    extern __shared__ __align__(16) half fattn_short_smem[];
    half * Ks = fattn_short_smem;
    half * Vs = Ks + (SB ? 1 : 2)*KC*ROW;
    half * Ms = Vs + 2*KC*ROW;
    static_assert(!SB || MK == 3, "SB: single buffers, no mask");
    static_assert(!QS || (MK == 3 && KLD), "QS: no mask, K by ldmatrix");
    half * Qw = Vs + (SB ? 1 : 2)*KC*ROW + (threadIdx.x / WARP_SIZE)*16*ROW;  // QS: this warp's Q tile [16][ROW]

    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int g = lane / 4, t = lane % 4;
    const int hk = blockIdx.y, h = hk*gqa + warp % gqa, seq = blockIdx.z, qt = warp / gqa;
    const int qb = bx*16*NQ, q0 = qb + qt*16;
    const int r0 = q0 + g, r1 = r0 + 8;
    const char * Kb = K + hk*nbk2 + seq*nbk3;
    const char * Vb = V + hk*nbv2 + seq*nbv3;
    if constexpr (MK == 3) {
        mask = nullptr;  // no mask code compiled at all (fewer registers)
    }
    if (mask) {
        mask += (seq % nem3)*nbm3;
    }
    dst += (int64_t) seq*Lq*H*D*(out_type == FATTN_SHORT_OUT_F32 ? sizeof(float) : sizeof(half));
    const int n = (Lk + KC - 1)/KC;

    auto stage = [&](const int i) {
        const int k0 = i*KC, b = i % 2;
        for (int j = threadIdx.x; j < KC*(D/8); j += blockDim.x) {
            const int r = j / (D/8), c = (j % (D/8))*8;
            const bool ok = k0 + r < Lk;
            const int64_t row = ok ? k0 + r : 0;
            fattn_short_cp16(Ks + (b*KC + r)*ROW + c, Kb + row*nbk1 + c*sizeof(half), ok);
            fattn_short_cp16(Vs + (b*KC + r)*ROW + c, Vb + row*nbv1 + c*sizeof(half), ok);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    // SB: K or V of chunk i into its one buffer (K's is free once the chunk before's scores are computed, V's
    // once its P V is): a block holds half the shared memory, so more blocks fit an SM
    auto stage1 = [&](half * S, const char * B, const int64_t nb1, const int i) {
        const int k0 = i*KC;
        for (int j = threadIdx.x; j < KC*(D/8); j += blockDim.x) {
            const int r = j / (D/8), c = (j % (D/8))*8;
            const bool ok = k0 + r < Lk;
            const int64_t row = ok ? k0 + r : 0;
            fattn_short_cp16(S + r*ROW + c, B + row*nb1 + c*sizeof(half), ok);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    uint32_t mnext[MK == 1 ? 1 : MPAIRS];
    auto mask_load = [&](const int i) {
        const int k0 = i*KC;
        if constexpr (MK == 1) {  // one row a sequence: KC/2 pairs, a pair a thread
            if (threadIdx.x < KC/2) {
                const int c = k0 + threadIdx.x*2;
                const half * row = (const half *) mask;
                const half2 v = __halves2half2(c < Lk ? row[c] : __float2half(0.0f), c + 1 < Lk ? row[c + 1] : __float2half(0.0f));
                mnext[0] = *reinterpret_cast<const uint32_t *>(&v);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < MPAIRS; ++j) {
            const int e = j*blockDim.x + threadIdx.x, r = e / (KC/2), c = k0 + (e % (KC/2))*2;
            half2 v = __float2half2_rn(0.0f);
            if (e < 16*NQ*KC/2 && qb + r < Lq) {
                const half * row = (const half *) (mask + (qb + r)*nbm1);
                v = __halves2half2(c < Lk ? row[c] : __float2half(0.0f), c + 1 < Lk ? row[c + 1] : __float2half(0.0f));
            }
            mnext[j] = *reinterpret_cast<const uint32_t *>(&v);
        }
    };
    auto mask_store = [&](const int i) {
        const int b = i % 2;
        if constexpr (MK == 1) {
            if (threadIdx.x < KC/2) {
                *(uint32_t *) (Ms + b*KC + threadIdx.x*2) = mnext[0];
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < MPAIRS; ++j) {
            const int e = j*blockDim.x + threadIdx.x;
            if (e < 16*NQ*KC/2) {
                *(uint32_t *) (Ms + (b*16*NQ + e/(KC/2))*MROW + (e % (KC/2))*2) = mnext[j];
            }
        }
    };
    if (SB && n > 0) {
        stage1(Ks, Kb, nbk1, 0);
        stage1(Vs, Vb, nbv1, 0);
    } else if (n > 0) {
        stage(0);
        if (mask) {
            mask_load(0);
            mask_store(0);
        }
    }

    uint32_t qa[D/16][4];
    {
        const char * Qb = Q + h*nbq2 + seq*nbq3;
        const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int ks = 0; ks < D/16; ++ks) {
            const int d0 = ks*16 + t*2;
            const float2 x00 = r0 < Lq ? *(const float2 *) (Qb + r0*nbq1 + d0*sizeof(float))       : zero;
            const float2 x10 = r1 < Lq ? *(const float2 *) (Qb + r1*nbq1 + d0*sizeof(float))       : zero;
            const float2 x01 = r0 < Lq ? *(const float2 *) (Qb + r0*nbq1 + (d0 + 8)*sizeof(float)) : zero;
            const float2 x11 = r1 < Lq ? *(const float2 *) (Qb + r1*nbq1 + (d0 + 8)*sizeof(float)) : zero;
            qa[ks][0] = fattn_short_pack(scale*x00.x, scale*x00.y);
            qa[ks][1] = fattn_short_pack(scale*x10.x, scale*x10.y);
            qa[ks][2] = fattn_short_pack(scale*x01.x, scale*x01.y);
            qa[ks][3] = fattn_short_pack(scale*x11.x, scale*x11.y);
            if (QS) {  // the A operand's layout: rows g and g + 8, dims ks*16 + t*2 and + 8
                *(uint32_t *) (Qw + g*ROW + d0)           = qa[ks][0];
                *(uint32_t *) (Qw + (g + 8)*ROW + d0)     = qa[ks][1];
                *(uint32_t *) (Qw + g*ROW + d0 + 8)       = qa[ks][2];
                *(uint32_t *) (Qw + (g + 8)*ROW + d0 + 8) = qa[ks][3];
            }
        }
        if (QS) {
            __syncwarp();
        }
    }

    float o[D/8][4];
#pragma unroll
    for (int i = 0; i < D/8; ++i) {
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    }
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

    for (int i = 0; i < n; ++i) {
        if (SB) {
            asm volatile("cp.async.wait_group 1;\n" ::);  // K of chunk i (its V may still be in flight)
        } else if (i + 1 < n) {
            stage(i + 1);
            if (mask) {
                mask_load(i + 1);
            }
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const int k0 = i*KC, b = SB ? 0 : i % 2;
        const half * Kc = Ks + b*KC*ROW;
        const half * Vc = Vs + b*KC*ROW;
        const half * Mc = MK == 1 ? Ms + b*KC : Ms + (b*16*NQ + qt*16)*MROW;
        bool zero = false;  // MK 1: the chunk's mask row all +-0, so adding it changes no score's value
        if (MK == 1 && mask) {  // a pair of the row a lane (KC == 64)
            const int c = lane*2;
            const half2 m = *(const half2 *) (Mc + c);
            const bool seen = q0 < Lq && ((k0 + c < Lk && !__hisinf(__low2half(m))) ||
                                          (k0 + c + 1 < Lk && !__hisinf(__high2half(m))));
            zero = __all_sync(0xFFFFFFFF, (*reinterpret_cast<const uint32_t *>(&m) & 0x7FFF7FFFu) == 0u);
            if (!__any_sync(0xFFFFFFFF, seen)) {
                if (i + 1 < n) {
                    mask_store(i + 1);
                }
                __syncthreads();
                continue;
            }
        } else if (mask) {
            bool seen = false;
#pragma unroll
            for (int j = 0; j < 16*KC/2/WARP_SIZE; ++j) {
                const int e = j*WARP_SIZE + lane, r = e / (KC/2), c = (e % (KC/2))*2;
                const half2 m = *(const half2 *) (Mc + r*MROW + c);
                seen |= (q0 + r < Lq) && ((k0 + c < Lk && !__hisinf(__low2half(m))) ||
                                          (k0 + c + 1 < Lk && !__hisinf(__high2half(m))));
            }
            if (!__any_sync(0xFFFFFFFF, seen)) {
                if (i + 1 < n) {
                    mask_store(i + 1);
                }
                __syncthreads();
                continue;
            }
        }

        const bool full = SKIP && k0 + KC <= Lk;  // no key of the chunk past Lk: no bounds checks
        float sc[KC/8][4];
        if constexpr (QS) {
            // Q's A operands from shared memory two k-steps at a time (8 registers live, not 32), each score
            // tile accumulated in the same order as below: the same values
#pragma unroll
            for (int nt = 0; nt < KC/8; ++nt) {
                sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
            }
            // thread l addresses row l % 8 + (l/8 % 2)*8 of the tile, dims (l/16)*8: a0..a3 of a k-step
            const half * qrow = Qw + (lane % 8 + ((lane/8) % 2)*8)*ROW + (lane/16)*8;
#pragma unroll
            for (int p = 0; p < D/32; ++p) {
                uint32_t q0a[4], q1a[4];
                ldsm_x4<false>(q0a, qrow + (2*p)*16);
                ldsm_x4<false>(q1a, qrow + (2*p + 1)*16);
#pragma unroll
                for (int nt = 0; nt < KC/8; ++nt) {
                    uint32_t k[4];
                    ldsm_x4<false>(k, Kc + (nt*8 + lane % 8)*ROW + (lane/8)*8 + p*32);
                    fattn_short_mma(sc[nt], q0a, k[0], k[1]);
                    fattn_short_mma(sc[nt], q1a, k[2], k[3]);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < (QS ? 0 : KC/8); ++nt) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
            if constexpr (KLD) {
                // thread l addresses row l % 8 (key nt*8 + l % 8) of matrix l / 8 (dims (l/8)*8 of a 32-dim slab):
                // registers j = b0, b1 of k-step 2p and b0, b1 of k-step 2p + 1
                const half * krow = Kc + (nt*8 + lane % 8)*ROW + (lane/8)*8;
#pragma unroll
                for (int p = 0; p < D/32; ++p) {
                    uint32_t k[4];
                    ldsm_x4<false>(k, krow + p*32);
                    fattn_short_mma(sc[nt], qa[2*p], k[0], k[1]);
                    fattn_short_mma(sc[nt], qa[2*p + 1], k[2], k[3]);
                }
            } else {
                const half * kr = Kc + (nt*8 + g)*ROW + t*2;
#pragma unroll
                for (int ks = 0; ks < D/16; ++ks) {
                    fattn_short_mma(sc[nt], qa[ks], *(const uint32_t *) (kr + ks*16), *(const uint32_t *) (kr + ks*16 + 8));
                }
            }
        }
        if (SB) {
            __syncthreads();  // every warp's scores read: K's buffer takes the next chunk
            if (i + 1 < n) {
                stage1(Ks, Kb, nbk1, i + 1);
                asm volatile("cp.async.wait_group 1;\n" ::);
            } else {
                asm volatile("cp.async.wait_group 0;\n" ::);
            }
            __syncthreads();  // V of chunk i in shared memory
        }
        float cm0 = -INFINITY, cm1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < KC/8; ++nt) {
            const int key = k0 + nt*8 + t*2;
            if (MK == 1 && mask) {
                if (!zero) {
                    const float2 ma = __half22float2(*(const half2 *) (Mc + nt*8 + t*2));
                    sc[nt][0] += ma.x; sc[nt][1] += ma.y; sc[nt][2] += ma.x; sc[nt][3] += ma.y;
                }
            } else if (mask) {
                const float2 ma = __half22float2(*(const half2 *) (Mc + g*MROW + nt*8 + t*2));
                const float2 mb = __half22float2(*(const half2 *) (Mc + (g + 8)*MROW + nt*8 + t*2));
                sc[nt][0] += ma.x; sc[nt][1] += ma.y; sc[nt][2] += mb.x; sc[nt][3] += mb.y;
            }
            if (!full) {
                if (key     >= Lk) { sc[nt][0] = sc[nt][2] = -INFINITY; }
                if (key + 1 >= Lk) { sc[nt][1] = sc[nt][3] = -INFINITY; }
            }
            cm0 = fmaxf(cm0, fmaxf(sc[nt][0], sc[nt][1]));
            cm1 = fmaxf(cm1, fmaxf(sc[nt][2], sc[nt][3]));
        }
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
            cm0 = fmaxf(cm0, __shfl_xor_sync(0xFFFFFFFF, cm0, off));
            cm1 = fmaxf(cm1, __shfl_xor_sync(0xFFFFFFFF, cm1, off));
        }
        const float mn0 = fmaxf(m0, cm0), mn1 = fmaxf(m1, cm1);
        const float b0 = mn0 == -INFINITY ? 0.0f : mn0, b1 = mn1 == -INFINITY ? 0.0f : mn1;
        float a0, a1;
        float rs0 = 0.0f, rs1 = 0.0f;
        if constexpr (EX2) {
            const float nb0 = -b0*L2E, nb1 = -b1*L2E;
            a0 = fattn_ex2(fmaf(m0, L2E, nb0)); a1 = fattn_ex2(fmaf(m1, L2E, nb1));
#pragma unroll
            for (int nt = 0; nt < KC/8; ++nt) {
                sc[nt][0] = fattn_ex2(fmaf(sc[nt][0], L2E, nb0)); sc[nt][1] = fattn_ex2(fmaf(sc[nt][1], L2E, nb0));
                sc[nt][2] = fattn_ex2(fmaf(sc[nt][2], L2E, nb1)); sc[nt][3] = fattn_ex2(fmaf(sc[nt][3], L2E, nb1));
                rs0 += sc[nt][0] + sc[nt][1];
                rs1 += sc[nt][2] + sc[nt][3];
            }
        } else {
            a0 = expf(m0 - b0); a1 = expf(m1 - b1);
#pragma unroll
            for (int nt = 0; nt < KC/8; ++nt) {
                sc[nt][0] = expf(sc[nt][0] - b0); sc[nt][1] = expf(sc[nt][1] - b0);
                sc[nt][2] = expf(sc[nt][2] - b1); sc[nt][3] = expf(sc[nt][3] - b1);
                rs0 += sc[nt][0] + sc[nt][1];
                rs1 += sc[nt][2] + sc[nt][3];
            }
        }
        m0 = mn0; m1 = mn1;
#pragma unroll
        for (int off = 1; off < 4; off *= 2) {
            rs0 += __shfl_xor_sync(0xFFFFFFFF, rs0, off);
            rs1 += __shfl_xor_sync(0xFFFFFFFF, rs1, off);
        }
        l0 = l0*a0 + rs0;
        l1 = l1*a1 + rs1;
        if (!SKIP || __any_sync(0xFFFFFFFF, a0 != 1.0f || a1 != 1.0f)) {  // x*1 == x: skipping is exact
#pragma unroll
            for (int dt = 0; dt < D/8; ++dt) {
                o[dt][0] *= a0; o[dt][1] *= a0; o[dt][2] *= a1; o[dt][3] *= a1;
            }
        }
#pragma unroll
        for (int kk = 0; kk < KC/16; ++kk) {
            const uint32_t pa[4] = {
                fattn_short_pack(sc[2*kk][0], sc[2*kk][1]),         fattn_short_pack(sc[2*kk][2], sc[2*kk][3]),
                fattn_short_pack(sc[2*kk + 1][0], sc[2*kk + 1][1]), fattn_short_pack(sc[2*kk + 1][2], sc[2*kk + 1][3]) };
            const half * vrow = Vc + (kk*16 + ((lane/8) % 2)*8 + lane % 8)*ROW + (lane/16)*8;
#pragma unroll
            for (int dp = 0; dp < D/16; ++dp) {
                uint32_t v[4];
                ldsm_x4<true>(v, vrow + dp*16);
                fattn_short_mma(o[2*dp],     pa, v[0], v[1]);
                fattn_short_mma(o[2*dp + 1], pa, v[2], v[3]);
            }
        }
        if (mask && i + 1 < n) {
            mask_store(i + 1);
        }
        __syncthreads();
        if (SB && i + 1 < n) {
            stage1(Vs, Vb, nbv1, i + 1);
        }
    }

    const float i0 = l0 > 0.0f ? 1.0f/l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f/l1 : 0.0f;
    const int64_t e0 = ((int64_t) r0*H + h)*D + t*2, e1 = ((int64_t) r1*H + h)*D + t*2;
#pragma unroll
    for (int dt = 0; dt < D/8; ++dt) {
        if (r0 < Lq) fattn_short_store(dst, e0 + dt*8, out_type, o[dt][0]*i0, o[dt][1]*i0);
        if (r1 < Lq) fattn_short_store(dst, e1 + dt*8, out_type, o[dt][2]*i1, o[dt][3]*i1);
    }
}

struct fattn_short_args {
    const char * Q, * K, * V, * mask;
    char * dst;
    int Lq, Lk, H, gqa;
    float scale;
    int64_t nbq1, nbq2, nbq3, nbk1, nbk2, nbk3, nbv1, nbv2, nbv3, nbm1, nbm3;
    int nem3;
    int out_type;
};
#define FATTN_SHORT_ARGS(a) a.Q, a.K, a.V, a.mask, a.dst, a.Lq, a.Lk, a.H, a.gqa, a.scale, a.nbq1, a.nbq2, a.nbq3, \
    a.nbk1, a.nbk2, a.nbk3, a.nbv1, a.nbv2, a.nbv3, a.nbm1, a.nbm3, a.nem3, a.out_type

// MINB: blocks an SM must hold at once (registers capped to fit them; 0: the compiler's choice)
// MK: the mask as the graph gives it (0: [Lk, Lq] a sequence), one row a sequence (1: [Lk] broadcast over the
// queries), or none with each sequence's Lk its real length (2: as a lone request's segment runs; 3: the same
// with no mask code compiled)
// SB: K and V single-buffered, each staged as soon as its buffer is free (no mask: MK 3); IL (pairs): the two
// calls' query blocks interleaved along x (a, b, a, b, ...) rather than all of a's first
// QS: each warp's Q tile in shared memory, read two k-steps at a time (no mask)
#define VARIANT_PARAMS int NQ, int KC, bool KLD, bool EX2, bool SKIP, int MINB, int MK = 0, bool SB = false, bool IL = false, bool QS = false
#define VARIANT_ARGS NQ, KC, KLD, EX2, SKIP, MK, SB, QS
#define VARIANT_ALL NQ, KC, KLD, EX2, SKIP, MINB, MK, SB, IL, QS
template <VARIANT_PARAMS>
static __global__ void __launch_bounds__(64*NQ, MINB) kernel_one(const fattn_short_args a) {
    flash_attn_short_body<VARIANT_ARGS>(FATTN_SHORT_ARGS(a), blockIdx.x);
}

template <VARIANT_PARAMS>
static __global__ void __launch_bounds__(64*NQ, MINB) kernel_pair(const fattn_short_args a, const fattn_short_args b, const int nbx) {
    int x = blockIdx.x;
    bool first = x < nbx;
    if (IL) {
        const int both = min(nbx, (int) gridDim.x - nbx);
        first = x < 2*both ? x % 2 == 0 : nbx > both;
        x = x < 2*both ? x / 2 + (first ? 0 : nbx) : x - both + (first ? 0 : nbx);
    }
    if (first) {
        flash_attn_short_body<VARIANT_ARGS>(FATTN_SHORT_ARGS(a), x);
    } else {
        flash_attn_short_body<VARIANT_ARGS>(FATTN_SHORT_ARGS(b), x - nbx);
    }
}

// ------------------------------------------------------------------------------------------------------ host
constexpr int D = 128, H = 16, HKV = 8, GQA = 2;

struct Call {  // one attention call: Q [D, Lq, H, S] F32 (rows of H*D, as the LM graph views them), K/V F16
    int Lq, Lk, S;
    int valid;          // real keys a sequence (the rest hidden by the mask), == Lk without a mask
    bool masked;
    int out_type;
    float * q; half * k, * v, * m, * mr; char * out;  // mr: the mask's one row a sequence [S, Lk]
    std::vector<float> hq; std::vector<half> hk, hv;
    fattn_short_args args(const int mk = 0) const {
        fattn_short_args a;
        a.Q = (const char *) q; a.K = (const char *) k; a.V = (const char *) v;
        a.mask = masked ? (const char *) m : nullptr; a.dst = out;
        a.Lq = Lq; a.Lk = Lk; a.H = H; a.gqa = GQA; a.scale = 1.0f/sqrtf((float) D);
        a.nbq1 = (int64_t) H*D*4; a.nbq2 = D*4; a.nbq3 = (int64_t) Lq*H*D*4;
        a.nbk1 = (int64_t) HKV*D*2; a.nbk2 = D*2; a.nbk3 = (int64_t) Lk*HKV*D*2;
        a.nbv1 = a.nbk1; a.nbv2 = a.nbk2; a.nbv3 = a.nbk3;
        a.nbm1 = (int64_t) Lk*2; a.nbm3 = (int64_t) Lk*Lq*2; a.nem3 = S;
        a.out_type = out_type;
        if (masked && mk == 1) {
            a.mask = (const char *) mr; a.nbm1 = 0; a.nbm3 = (int64_t) Lk*2;
        } else if (masked && mk >= 2) {
            a.mask = nullptr; a.Lk = valid;
        }
        return a;
    }
    size_t out_bytes() const { return (size_t) S*Lq*H*D*(out_type == FATTN_SHORT_OUT_F32 ? 4 : 2); }
};

static Call make_call(int Lq, int Lk, int S, int valid, int out_type, std::mt19937 & rng) {
    Call c{Lq, Lk, S, valid, valid < Lk, out_type};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    c.hq.resize((size_t) S*Lq*H*D); c.hk.resize((size_t) S*Lk*HKV*D); c.hv.resize(c.hk.size());
    for (auto & x : c.hq) x = 2.0f*nd(rng);  // q/k normed then scaled: scores of a few units
    for (auto & x : c.hk) x = __float2half(2.0f*nd(rng));
    for (auto & x : c.hv) x = __float2half(nd(rng));
    CHECK(cudaMalloc(&c.q, c.hq.size()*4)); CHECK(cudaMemcpy(c.q, c.hq.data(), c.hq.size()*4, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&c.k, c.hk.size()*2)); CHECK(cudaMemcpy(c.k, c.hk.data(), c.hk.size()*2, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&c.v, c.hv.size()*2)); CHECK(cudaMemcpy(c.v, c.hv.data(), c.hv.size()*2, cudaMemcpyHostToDevice));
    c.m = c.mr = nullptr;
    if (c.masked) {
        std::vector<half> hm((size_t) S*Lq*Lk);
        for (size_t i = 0; i < hm.size(); ++i) hm[i] = __float2half((int) (i % Lk) < valid ? 0.0f : -INFINITY);
        CHECK(cudaMalloc(&c.m, hm.size()*2)); CHECK(cudaMemcpy(c.m, hm.data(), hm.size()*2, cudaMemcpyHostToDevice));
        hm.resize((size_t) S*Lk);
        CHECK(cudaMalloc(&c.mr, hm.size()*2)); CHECK(cudaMemcpy(c.mr, hm.data(), hm.size()*2, cudaMemcpyHostToDevice));
    }
    CHECK(cudaMalloc(&c.out, c.out_bytes()));
    return c;
}

static float out_at(const std::vector<char> & o, int type, size_t i) {
    if (type == FATTN_SHORT_OUT_F32) return ((const float *) o.data())[i];
    if (type == FATTN_SHORT_OUT_F16) return __half2float(((const half *) o.data())[i]);
    return __bfloat162float(((const nv_bfloat16 *) o.data())[i]);
}

// double-precision attention of sequence 0, heads hs, against the kernel's output
static double ref_err(const Call & c, const std::vector<char> & o, std::initializer_list<int> hs) {
    double err = 0.0;
    const double scale = 1.0/sqrt((double) D);
    for (int h : hs) {
        const int hk = h / GQA;
        for (int r = 0; r < c.Lq; ++r) {
            std::vector<double> p(c.valid);
            double mx = -1e300;
            for (int j = 0; j < c.valid; ++j) {
                double s = 0.0;
                for (int d = 0; d < D; ++d) {
                    s += (double) c.hq[((size_t) r*H + h)*D + d] * __half2float(c.hk[((size_t) j*HKV + hk)*D + d]);
                }
                p[j] = s*scale; mx = std::max(mx, p[j]);
            }
            double sum = 0.0;
            for (auto & x : p) { x = exp(x - mx); sum += x; }
            for (int d = 0; d < D; ++d) {
                double acc = 0.0;
                for (int j = 0; j < c.valid; ++j) acc += p[j] * __half2float(c.hv[((size_t) j*HKV + hk)*D + d]);
                err = std::max(err, fabs(acc/sum - out_at(o, c.out_type, ((size_t) r*H + h)*D + d)));
            }
        }
    }
    return err;
}

template <VARIANT_PARAMS>
static void launch(const std::vector<Call *> & cs) {
    const size_t smem = fattn_short_smem_bytes(NQ, KC, cs[0]->masked && MK < 2, MK, SB, QS);
    CHECK(cudaFuncSetAttribute(kernel_one<VARIANT_ALL>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CHECK(cudaFuncSetAttribute(kernel_pair<VARIANT_ALL>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (cs.size() == 2) {
        const int nbx = (cs[0]->Lq + 16*NQ - 1)/(16*NQ);
        const dim3 grid(nbx + (cs[1]->Lq + 16*NQ - 1)/(16*NQ), HKV, cs[0]->S);
        kernel_pair<VARIANT_ALL><<<grid, WARP_SIZE*GQA*NQ, smem>>>(cs[0]->args(MK), cs[1]->args(MK), nbx);
    } else {
        const dim3 grid((cs[0]->Lq + 16*NQ - 1)/(16*NQ), HKV, cs[0]->S);
        kernel_one<VARIANT_ALL><<<grid, WARP_SIZE*GQA*NQ, smem>>>(cs[0]->args(MK));
    }
}

using Launcher = void (*)(const std::vector<Call *> &);
struct Variant { const char * name; Launcher f; };
// the first is the kernel as patched (NQ 2 for a lone request's pair, 4 for the engine's buckets)
static const Variant LONE[] = {
    {"base", launch<2, 64, false, false, false, 1>}, {"kld", launch<2, 64, true, false, false, 1>},
    {"ex2", launch<2, 64, false, true, false, 1>}, {"kld ex2", launch<2, 64, true, true, false, 1>},
    {"kld ex2 3/SM", launch<2, 64, true, true, false, 3>}, {"ex2 3/SM", launch<2, 64, false, true, false, 3>},
    {"kld ex2 kc32 3/SM", launch<2, 32, true, true, false, 3>},
    {"kld ex2 kc32 4/SM", launch<2, 32, true, true, false, 4>},
    {"kld ex2 nomask", launch<2, 64, true, true, false, 1, 3>},
    {"kld ex2 nomask 3/SM", launch<2, 64, true, true, false, 3, 3>},
    // the blocks of a 590 + 500 pair spread over more of the SMs' places (2026-12-03): all bit-identical to nomask
    {"nomask il", launch<2, 64, true, true, false, 1, 3, false, true>},
    {"nomask 3/SM il", launch<2, 64, true, true, false, 3, 3, false, true>},
    {"nomask sb", launch<2, 64, true, true, false, 1, 3, true>},
    {"nomask sb 3/SM", launch<2, 64, true, true, false, 3, 3, true>},
    {"nomask sb 3/SM il", launch<2, 64, true, true, false, 3, 3, true, true>},
    {"nomask nq1 sb 4/SM", launch<1, 64, true, true, false, 4, 3, true>},
    {"nomask nq1 sb 4/SM il", launch<1, 64, true, true, false, 4, 3, true, true>},
    {"nomask nq1 sb 5/SM", launch<1, 64, true, true, false, 5, 3, true>},
    {"nomask nq1 sb 5/SM il", launch<1, 64, true, true, false, 5, 3, true, true>},
    {"nomask nq1 sb 6/SM", launch<1, 64, true, true, false, 6, 3, true>},
    {"nomask qs", launch<2, 64, true, true, false, 1, 3, false, false, true>},
    {"nomask qs 3/SM", launch<2, 64, true, true, false, 3, 3, false, false, true>},
    {"nomask sb qs 3/SM", launch<2, 64, true, true, false, 3, 3, true, false, true>},
    {"nomask nq1 sb qs 5/SM", launch<1, 64, true, true, false, 5, 3, true, false, true>},
    {"nomask nq1 sb qs 5/SM il", launch<1, 64, true, true, false, 5, 3, true, true, true>},
};
static const int LONE_NOMASK = 8;  // the lone request's kernel as patched (patch 0020): the variants below it match it bit for bit
static const Variant PACKED[] = {
    {"base", launch<4, 64, false, false, false, 1>}, {"kld ex2", launch<4, 64, true, true, false, 1>},
    {"kld ex2 nq2", launch<2, 64, true, true, false, 1>}, {"kld ex2 nq2 kc32", launch<2, 32, true, true, false, 1>},
    {"kld ex2 nq2 3/SM", launch<2, 64, true, true, false, 3>},
    {"kld ex2 nq2 kc32 4/SM", launch<2, 32, true, true, false, 4>},
    {"kld ex2 nq4 2/SM", launch<4, 64, true, true, false, 2>},
    {"kld ex2 rowmask", launch<4, 64, true, true, false, 1, 1>},
    {"kld ex2 nq2 rowmask", launch<2, 64, true, true, false, 1, 1>},
    {"kld ex2 lengths", launch<4, 64, true, true, false, 1, 2>},
    {"kld ex2 nq2 lengths", launch<2, 64, true, true, false, 1, 2>},
    {"kld ex2 nq2 nomask", launch<2, 64, true, true, false, 1, 3>},
    {"kld ex2 nq2 nomask 3/SM", launch<2, 64, true, true, false, 3, 3>},
};

static float time_us(Launcher f, const std::vector<Call *> & cs, int reps) {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 20; ++i) f(cs);
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) f(cs);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CHECK(cudaGetLastError());
    return 1000.0f*ms/reps;
}

static std::vector<char> fetch(const Call & c) {
    std::vector<char> o(c.out_bytes());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(o.data(), c.out, o.size(), cudaMemcpyDeviceToHost));
    return o;
}

static double max_diff(const Call & c, const std::vector<char> & a, const std::vector<char> & b) {
    double d = 0.0;
    const size_t n = c.out_bytes() / (c.out_type == FATTN_SHORT_OUT_F32 ? 4 : 2);
    for (size_t i = 0; i < n; ++i) d = std::max(d, (double) fabsf(out_at(a, c.out_type, i) - out_at(b, c.out_type, i)));
    return d;
}

int main(int argc, char ** argv) {
    const bool ncu = argc > 1 && !strcmp(argv[1], "--ncu");
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    std::mt19937 rng(0);
    struct Case { std::string name; std::vector<Call *> calls; int nq; bool check; };
    std::vector<Case> cases;
    auto pair = [&](const char * name, int l0, int l1) {
        cases.push_back({name, {new Call(make_call(l0, l0, 1, l0, FATTN_SHORT_OUT_BF16, rng)),
                                new Call(make_call(l1, l1, 1, l1, FATTN_SHORT_OUT_BF16, rng))}, 2, true});
    };
    // a request's cond and uncond segments (tools/lm_step_time.py's shapes; auto20t: tools/bench.py's text)
    pair("auto5 pair 147+125", 147, 125);
    pair("clone5 pair 221+125", 221, 125);
    pair("auto20 pair 540+500", 540, 500);
    pair("auto20t pair 590+500", 590, 500);
    // the batched engine's buckets: 64 auto5 requests, cond rows padded to 160 and uncond to 128, masked
    cases.push_back({"64 packed cond 128x160 (147 real)", {new Call(make_call(160, 160, 64, 147, FATTN_SHORT_OUT_F32, rng))}, 4, false});
    cases.push_back({"64 packed uncond 64x128 (125 real)", {new Call(make_call(128, 128, 64, 125, FATTN_SHORT_OUT_F32, rng))}, 4, false});
    cases.push_back({"16 packed cond 16x160 (147 real)", {new Call(make_call(160, 160, 16, 147, FATTN_SHORT_OUT_F32, rng))}, 4, false});

    for (auto & cs : cases) {
        std::vector<char> base, second;  // second: the second variant's output (kld ex2 for the buckets)
        std::vector<char> nomask;        // a lone request's pair: both outputs of LONE[LONE_NOMASK]
        printf("%s\n", cs.name.c_str());
        const bool packed = cs.nq == 4;
        const Variant * vs = packed ? PACKED : LONE;
        const size_t nv = packed ? sizeof(PACKED)/sizeof(*PACKED) : sizeof(LONE)/sizeof(*LONE);
        for (size_t i = 0; i < nv; ++i) {
            const Variant & v = vs[i];
            if (ncu) {
                v.f(cs.calls);
                CHECK(cudaDeviceSynchronize());
                continue;
            }
            const float us = time_us(v.f, cs.calls, 200);
            for (const Call * c : cs.calls) {
                CHECK(cudaMemset(c->out, 0xFF, c->out_bytes()));  // NaN: a row a variant skips shows
            }
            v.f(cs.calls);
            const auto o = fetch(*cs.calls[0]);
            printf("    %-14s %8.2f us", v.name, us);
            if (!packed && (int) i >= LONE_NOMASK) {  // both calls' outputs, byte for byte
                std::vector<char> all;
                for (const Call * c : cs.calls) {
                    const auto oc = fetch(*c);
                    all.insert(all.end(), oc.begin(), oc.end());
                }
                if ((int) i == LONE_NOMASK) {
                    nomask = all;
                } else {
                    printf("  [%s nomask's bytes]", all == nomask ? "equal to" : "DIFFERENT from");
                }
            }
            if (base.empty()) {
                base = o;
                if (cs.check) printf("  (against float64: %.2e)", ref_err(*cs.calls[0], o, {0, 5}));
            } else {
                printf("  (against base: %.1e", max_diff(*cs.calls[0], base, o));
                if (second.empty()) {
                    second = o;
                } else {
                    printf(", against %s: %.1e", vs[1].name, max_diff(*cs.calls[0], second, o));
                }
                printf(")");
            }
            printf("\n");
        }
    }
    return 0;
}

// A layer's q/k RMSNorm x weight + RoPE and V's F32 -> F16 rows outside ggml, timed by CUDA events on the shapes a
// TTS request gives them: a lone request (q into its own F32 tensor; K and V into flash attention's F16 rows) and
// the batched engine's padded buckets (q, K and V each into padded rows by row ids).
//   base       as the patched ggml runs them: lone, patch 0017's one launch (four heads a block of four warps);
//              batched, three kernels (q's and k's RMS_NORM + MUL + ROPE + SET_ROWS, V's SET_ROWS by patch 0015)
//   pos W      one block of W warps a position: the lane's rotation angles computed once for the position's q and
//              k heads (they share the positions and the rope's parameters), each head row held in registers (one
//              read where base reads it twice), then V's row as float4s
// Every variant's outputs are compared with base's bit for bit; base's with a double-precision CPU model of the
// chain. Compiled as ggml's CUDA sources are (-use_fast_math), so sinf/cosf/powf are the same instructions.
// Results: BENCHMARKS.md, "Patches 0022 and 0023" (the kernel as patch 0022 has it, eight warps a position).
//
//     nvcc -O3 -arch=sm_90 -std=c++17 -use_fast_math -Xptxas -v -o /tmp/qrb tools/device/qkv_rope_bench.cu && /tmp/qrb
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define WARP_SIZE 32

// ------------------------------------------------------------------------------- ggml's code, as patched
struct rope_corr_dims { float v[2]; };

static uint3 init_fastdiv_values(uint64_t d_64) {
    uint32_t d = (uint32_t) d_64, L = 0;
    while (L < 32 && (uint32_t{1} << L) < d) L++;
    uint32_t mp = (uint32_t) ((uint64_t{1} << 32) * ((uint64_t{1} << L) - d) / d + 1);
    return make_uint3(mp, L, d);
}
static __device__ __forceinline__ uint32_t fastdiv(uint32_t n, const uint3 f) { return (__umulhi(n, f.x) + n) >> f.y; }
static __device__ __forceinline__ uint32_t fastmodulo(uint32_t n, const uint3 f) { return n - fastdiv(n, f) * f.z; }
static __device__ __forceinline__ uint2 fast_div_modulo(uint32_t n, const uint3 f) {
    const uint32_t d = fastdiv(n, f);
    return make_uint2(d, n - d * f.z);
}
static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    return x;
}
static __device__ float rope_yarn_ramp(const float low, const float high, const int i0) {
    const float y = (i0 / 2 - low) / max(0.001f, high - low);
    return 1.0f - min(1.0f, max(0.0f, y));
}
static __device__ void rope_yarn(const float theta_extrap, const float freq_scale, const rope_corr_dims corr_dims,
                                 const int64_t i0, const float ext_factor, float mscale, float & cos_theta, float & sin_theta) {
    float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    if (ext_factor != 0.0f) {
        float ramp_mix = rope_yarn_ramp(corr_dims.v[0], corr_dims.v[1], i0) * ext_factor;
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    cos_theta = cosf(theta) * mscale;
    sin_theta = sinf(theta) * mscale;
}
template <typename D> static __device__ __forceinline__ D cast_to(float x) { return D(x); }

template <typename D>
struct chain {
    const float * x; D * dst;
    int ncols, nrows, nchannels, nsamples;
    int64_t s01, s02, s03, s1, s2, s3;
    float eps;
    const float * mul;
    int64_t mul_s01, mul_s02, mul_s03;
    uint3 mul_ncols_packed, mul_nrows_packed, mul_nchannels_packed, mul_nsamples_packed;
    int n_dims;
    const int32_t * pos;
    float freq_scale, ext_factor, attn_factor;
    rope_corr_dims corr_dims;
    float theta_scale;
    const float * freq_factors;
    const int64_t * row_indices;
    int set_rows_stride;
    bool is_neox;
};

template <int block_size, typename D>
static __device__ __forceinline__ void base_row(const chain<D> & a, const int row, const int channel, const int sample) {
    const int tid = threadIdx.x;
    const float * x = a.x + sample*a.s03 + channel*a.s02 + row*a.s01;
    const uint32_t mul_row     = fastmodulo(row,     a.mul_nrows_packed);
    const uint32_t mul_channel = fastmodulo(channel, a.mul_nchannels_packed);
    const uint32_t mul_sample  = fastmodulo(sample,  a.mul_nsamples_packed);
    const float * mul = a.mul + mul_sample*a.mul_s03 + mul_channel*a.mul_s02 + mul_row*a.mul_s01;
    float tmp = 0.0f;
    for (int col = tid; col < a.ncols; col += block_size) {
        const float xi = x[col];
        tmp += xi * xi;
    }
    tmp = warp_reduce_sum(tmp);
    const float scale = rsqrtf(tmp/a.ncols + a.eps);
    int64_t idst = sample*a.s3 + channel*a.s2 + row*a.s1;
    if (a.set_rows_stride != 0) {
        idst = row*a.s1 + a.row_indices[channel]*a.set_rows_stride;
    }
    D * dst = a.dst + idst;
    for (int i0 = 2*tid; i0 < a.ncols; i0 += 2*block_size) {
        int ix0, ix1;
        if (a.is_neox && i0 < a.n_dims) { ix0 = i0/2; ix1 = i0/2 + a.n_dims/2; } else { ix0 = i0; ix1 = i0 + 1; }
        const float x0 = scale * x[ix0] * mul[fastmodulo(ix0, a.mul_ncols_packed)];
        const float x1 = scale * x[ix1] * mul[fastmodulo(ix1, a.mul_ncols_packed)];
        if (i0 >= a.n_dims) { dst[ix0] = cast_to<D>(x0); dst[ix1] = cast_to<D>(x1); continue; }
        const float theta_base  = a.pos[channel]*powf(a.theta_scale, i0/2.0f);
        const float freq_factor = 1.0f;
        float cos_theta, sin_theta;
        rope_yarn(theta_base/freq_factor, a.freq_scale, a.corr_dims, i0, a.ext_factor, a.attn_factor, cos_theta, sin_theta);
        dst[ix0] = cast_to<D>(x0*cos_theta - x1*sin_theta);
        dst[ix1] = cast_to<D>(x0*sin_theta + x1*cos_theta);
    }
}

template <typename D>
static __global__ void base_rope(const chain<D> a) {
    base_row<WARP_SIZE, D>(a, blockIdx.x*blockDim.y + threadIdx.y, blockIdx.y, blockIdx.z);
}

struct v_rows { const float * src; half * dst; const int64_t * row_indices; int64_t s1, dst_stride; int ncols; };

static __global__ void base_qkv(const chain<float> q, const chain<half> k, const v_rows v, const int nbq, const int nbk) {
    const int bx = blockIdx.x, channel = blockIdx.y;
    if (bx < nbq) {
        base_row<WARP_SIZE, float>(q, bx*blockDim.y + threadIdx.y, channel, 0);
    } else if (bx < nbq + nbk) {
        base_row<WARP_SIZE, half>(k, (bx - nbq)*blockDim.y + threadIdx.y, channel, 0);
    } else {
        const float * src = v.src + channel*v.s1;
        half * dst = v.dst + v.row_indices[channel]*v.dst_stride;
        for (int i = 4*(threadIdx.y*blockDim.x + threadIdx.x); i < v.ncols; i += 4*blockDim.x*blockDim.y) {
            const float4 s = *(const float4 *) (src + i);
            const half2 lo = __floats2half2_rn(s.x, s.y), hi = __floats2half2_rn(s.z, s.w);
            *(uint2 *) (dst + i) = make_uint2(*(const uint32_t *) &lo, *(const uint32_t *) &hi);
        }
    }
}

// patch 0015's set_rows, F32 -> F16, four values a thread (2-D source, 1-D ids)
static __global__ void base_set_rows_x4(const float * src0, const int64_t * src1, half * dst, const int64_t n4,
                                        const int64_t s01, const int64_t s1, const uint3 ne00_4) {
    const int64_t i = int64_t(blockDim.x) * blockIdx.x + threadIdx.x;
    if (i >= n4) return;
    uint2 dm = fast_div_modulo((uint32_t) i, ne00_4);
    const int64_t i00 = 4*(int64_t) dm.y, i01 = dm.x;
    const int64_t dst_row = src1[i01];
    const float4 x = *(const float4 *) (src0 + i01*s01 + i00);
    half * d = dst + dst_row*s1 + i00;
    const half2 lo = __floats2half2_rn(x.x, x.y), hi = __floats2half2_rn(x.z, x.w);
    *(uint2 *) d = make_uint2(*(const uint32_t *) &lo, *(const uint32_t *) &hi);
}

// ------------------------------------------------------------------------------- the candidate
// One position a block. Lane l holds pair p = l + 32 j (j < NP) of every head row: x[p] and x[p + 32 NP] (NEOX,
// all 64 NP values rotated), so a row is read once and summed in the order base's lane sums it (x[l + 32 m], m =
// 0 .. 2 NP - 1). q's and k's rotations are the same (one pos, one rope), so each lane computes its NP angles once.
struct qkv_pos_args {
    const float * q; const float * k; const float * v;   // source rows: head h of position c at c*s + h*D
    int64_t q_s, k_s, v_s;                                 // floats between positions
    const float * q_w; const float * k_w;                  // the norms' weights [D]
    float * q_dst; half * k_dst; half * v_dst;
    const int64_t * q_rows;                                // q's padded row of each position, or null: row c
    const int64_t * kv_rows;
    int64_t q_stride, k_stride, v_stride;                  // dst elements between rows
    int hq, hk, v_ncols;
    float eps;
    const int32_t * pos;
    float freq_scale, ext_factor, attn_factor, theta_scale;
    rope_corr_dims corr_dims;
};

template <int NP, typename D>
static __device__ __forceinline__ void pos_row(const float * x, const float * w, D * dst, const int ncols,
                                               const float eps, const float (&c)[NP], const float (&s)[NP]) {
    const int lane = threadIdx.x;
    float a[NP], b[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) { a[j] = x[lane + 32*j]; b[j] = x[lane + 32*j + 32*NP]; }
    float tmp = 0.0f;
#pragma unroll
    for (int j = 0; j < NP; ++j) { tmp += a[j] * a[j]; }
#pragma unroll
    for (int j = 0; j < NP; ++j) { tmp += b[j] * b[j]; }
    tmp = warp_reduce_sum(tmp);
    const float scale = rsqrtf(tmp/ncols + eps);
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int p = lane + 32*j;
        const float x0 = scale * a[j] * w[p];
        const float x1 = scale * b[j] * w[p + 32*NP];
        // as ptxas contracts base's x0*cos - x1*sin and x0*sin + x1*cos (its SASS, and ggml's: one FFMA each)
        dst[p]         = cast_to<D>(__fmaf_rn(x0, c[j], -__fmul_rn(x1, s[j])));
        dst[p + 32*NP] = cast_to<D>(__fmaf_rn(x1, c[j], __fmul_rn(x0, s[j])));
    }
}

template <int NP>
static __global__ void pos_qkv(const qkv_pos_args a) {
    const int ch = blockIdx.x, lane = threadIdx.x;
    float c[NP], s[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int i0 = 2*(lane + 32*j);
        const float theta_base = a.pos[ch]*powf(a.theta_scale, i0/2.0f);
        const float freq_factor = 1.0f;
        rope_yarn(theta_base/freq_factor, a.freq_scale, a.corr_dims, i0, a.ext_factor, a.attn_factor, c[j], s[j]);
    }
    const int64_t qr = a.q_rows ? a.q_rows[ch] : ch, kvr = a.kv_rows[ch];
    const int n_items = a.hq + a.hk + a.v_ncols/128;
    for (int it = threadIdx.y; it < n_items; it += blockDim.y) {
        if (it < a.hq) {
            pos_row<NP, float>(a.q + ch*a.q_s + it*64*NP, a.q_w, a.q_dst + qr*a.q_stride + it*64*NP, 64*NP, a.eps, c, s);
        } else if (it < a.hq + a.hk) {
            const int h = it - a.hq;
            pos_row<NP, half>(a.k + ch*a.k_s + h*64*NP, a.k_w, a.k_dst + kvr*a.k_stride + h*64*NP, 64*NP, a.eps, c, s);
        } else {
            const int i = (it - a.hq - a.hk)*128 + 4*lane;
            const float4 x = *(const float4 *) (a.v + ch*a.v_s + i);
            const half2 lo = __floats2half2_rn(x.x, x.y), hi = __floats2half2_rn(x.z, x.w);
            *(uint2 *) (a.v_dst + kvr*a.v_stride + i) = make_uint2(*(const uint32_t *) &lo, *(const uint32_t *) &hi);
        }
    }
}

// ------------------------------------------------------------------------------- harness
struct Shape { const char * name; int L; bool batched; int seg; };

int main(int argc, char ** argv) {
    const int D = 128, HQ = 16, HK = 8, NQKV = (HQ + 2*HK)*D;
    const float eps = 1e-6f, theta = 1000000.0f;
    const Shape shapes[] = {{"auto5", 272, false, 136}, {"clone5", 346, false, 173}, {"auto20", 1040, false, 520},
                            {"16 packed", 4352, true, 136}, {"64 packed", 17408, true, 136}};
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    printf("| shape | positions | base us | pos 4 us | pos 8 us | pos 16 us | equal to base | base vs CPU (max abs) |\n|---|---|---|---|---|---|---|---|\n");
    for (const Shape & sh : shapes) {
        const int L = sh.L;
        std::mt19937 gen(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> h_qkv((size_t) NQKV*L), h_qw(D), h_kw(D);
        for (auto & v : h_qkv) v = nd(gen);
        for (auto & v : h_qw) v = 1.0f + 0.3f*nd(gen);
        for (auto & v : h_kw) v = 1.0f + 0.3f*nd(gen);
        std::vector<int32_t> h_pos(L);
        std::vector<int64_t> h_rows(L);
        int64_t R = 0;
        for (int i = 0; i < L; ++i) {
            h_pos[i] = i % sh.seg;
            h_rows[i] = sh.batched ? i + (i / sh.seg)*5 : i;   // padded buckets: five padding rows a sequence
            R = std::max(R, h_rows[i] + 1);
        }
        float * qkv, * qw, * kw, * q_dst[2];
        half * k_dst[2], * v_dst[2];
        int32_t * pos;
        int64_t * rows;
        CHECK(cudaMalloc(&qkv, sizeof(float)*h_qkv.size()));
        CHECK(cudaMalloc(&qw, sizeof(float)*D));
        CHECK(cudaMalloc(&kw, sizeof(float)*D));
        CHECK(cudaMalloc(&pos, sizeof(int32_t)*L));
        CHECK(cudaMalloc(&rows, sizeof(int64_t)*L));
        for (int b = 0; b < 2; ++b) {
            CHECK(cudaMalloc(&q_dst[b], sizeof(float)*HQ*D*R));
            CHECK(cudaMalloc(&k_dst[b], sizeof(half)*HK*D*R));
            CHECK(cudaMalloc(&v_dst[b], sizeof(half)*HK*D*R));
        }
        CHECK(cudaMemcpy(qkv, h_qkv.data(), sizeof(float)*h_qkv.size(), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(qw, h_qw.data(), sizeof(float)*D, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(kw, h_kw.data(), sizeof(float)*D, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(pos, h_pos.data(), sizeof(int32_t)*L, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(rows, h_rows.data(), sizeof(int64_t)*L, cudaMemcpyHostToDevice));

        const float theta_scale = powf(theta, -2.0f/D);
        auto make = [&](auto * dst, const float * x, const float * w, int nrows, bool set_rows, int64_t stride) {
            using T = std::remove_pointer_t<decltype(dst)>;
            chain<T> a{};
            a.x = x; a.dst = dst; a.ncols = D; a.nrows = nrows; a.nchannels = L; a.nsamples = 1;
            a.s01 = D; a.s02 = NQKV; a.s03 = (int64_t) NQKV*L;
            a.s1 = D; a.s2 = (int64_t) D*nrows; a.s3 = (int64_t) D*nrows*L;
            a.eps = eps; a.mul = w; a.mul_s01 = D; a.mul_s02 = D; a.mul_s03 = D;
            a.mul_ncols_packed = init_fastdiv_values(D); a.mul_nrows_packed = init_fastdiv_values(1);
            a.mul_nchannels_packed = init_fastdiv_values(1); a.mul_nsamples_packed = init_fastdiv_values(1);
            a.n_dims = D; a.pos = pos; a.freq_scale = 1.0f; a.ext_factor = 0.0f; a.attn_factor = 1.0f;
            a.corr_dims.v[0] = 0.0f; a.corr_dims.v[1] = 0.0f; a.theta_scale = theta_scale; a.freq_factors = nullptr;
            a.row_indices = set_rows ? rows : nullptr; a.set_rows_stride = set_rows ? (int) stride : 0; a.is_neox = true;
            return a;
        };
        const chain<float> cq = make(q_dst[0], qkv, qw, HQ, sh.batched, (int64_t) HQ*D);
        const chain<half> ck = make(k_dst[0], qkv + HQ*D, kw, HK, true, (int64_t) HK*D);
        const v_rows vr{qkv + (HQ + HK)*D, v_dst[0], rows, NQKV, (int64_t) HK*D, HK*D};
        auto run_base = [&]() {
            if (sh.batched) {
                base_rope<float><<<dim3(HQ/4, L, 1), dim3(32, 4, 1)>>>(cq);
                base_rope<half><<<dim3(HK/4, L, 1), dim3(32, 4, 1)>>>(ck);
                const int64_t n4 = (int64_t) HK*D*L/4;
                base_set_rows_x4<<<(n4 + 255)/256, 256>>>(vr.src, rows, v_dst[0], n4, NQKV, (int64_t) HK*D,
                                                          init_fastdiv_values(HK*D/4));
            } else {
                base_qkv<<<dim3(HQ/4 + HK/4 + 1, L, 1), dim3(32, 4, 1)>>>(cq, ck, vr, HQ/4, HK/4);
            }
        };
        qkv_pos_args pa{};
        pa.q = qkv; pa.k = qkv + HQ*D; pa.v = qkv + (HQ + HK)*D; pa.q_s = pa.k_s = pa.v_s = NQKV;
        pa.q_w = qw; pa.k_w = kw; pa.q_dst = q_dst[1]; pa.k_dst = k_dst[1]; pa.v_dst = v_dst[1];
        pa.q_rows = sh.batched ? rows : nullptr; pa.kv_rows = rows;
        pa.q_stride = (int64_t) HQ*D; pa.k_stride = pa.v_stride = (int64_t) HK*D;
        pa.hq = HQ; pa.hk = HK; pa.v_ncols = HK*D; pa.eps = eps; pa.pos = pos; pa.freq_scale = 1.0f;
        pa.ext_factor = 0.0f; pa.attn_factor = 1.0f; pa.theta_scale = theta_scale; pa.corr_dims = cq.corr_dims;
        auto run_pos = [&](int W) { pos_qkv<2><<<L, dim3(32, W, 1)>>>(pa); };

        cudaEvent_t e0, e1;
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        auto time = [&](auto && f) {
            for (int i = 0; i < 3; ++i) f();
            CHECK(cudaEventRecord(e0));
            for (int i = 0; i < reps; ++i) f();
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            return 1000.0f*ms/reps;
        };
        // outputs: base's, then each W's compared with it bit for bit (rows a position never writes stay zero)
        auto fetch = [&](int b, std::vector<uint32_t> & q, std::vector<uint16_t> & k, std::vector<uint16_t> & v) {
            q.resize((size_t) HQ*D*R); k.resize((size_t) HK*D*R); v.resize((size_t) HK*D*R);
            CHECK(cudaMemcpy(q.data(), q_dst[b], 4*q.size(), cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(k.data(), k_dst[b], 2*k.size(), cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(v.data(), v_dst[b], 2*v.size(), cudaMemcpyDeviceToHost));
        };
        for (int b = 0; b < 2; ++b) {
            CHECK(cudaMemset(q_dst[b], 0, sizeof(float)*HQ*D*R));
            CHECK(cudaMemset(k_dst[b], 0, sizeof(half)*HK*D*R));
            CHECK(cudaMemset(v_dst[b], 0, sizeof(half)*HK*D*R));
        }
        const float t_base = time(run_base);
        std::vector<uint32_t> bq, nq;
        std::vector<uint16_t> bk, bv, nk, nv;
        fetch(0, bq, bk, bv);
        float t_pos[3];
        bool equal = true;
        const int Ws[3] = {4, 8, 16};
        for (int wi = 0; wi < 3; ++wi) {
            CHECK(cudaMemset(q_dst[1], 0, sizeof(float)*HQ*D*R));
            CHECK(cudaMemset(k_dst[1], 0, sizeof(half)*HK*D*R));
            CHECK(cudaMemset(v_dst[1], 0, sizeof(half)*HK*D*R));
            t_pos[wi] = time([&] { run_pos(Ws[wi]); });
            fetch(1, nq, nk, nv);
            if (nq != bq || nk != bk || nv != bv) {
                size_t dq = 0, dk = 0, dv = 0;
                for (size_t i = 0; i < bq.size(); ++i) dq += nq[i] != bq[i];
                for (size_t i = 0; i < bk.size(); ++i) dk += nk[i] != bk[i];
                for (size_t i = 0; i < bv.size(); ++i) dv += nv[i] != bv[i];
                printf("  %s, pos %d: q %zu, k %zu, v %zu values differ\n", sh.name, Ws[wi], dq, dk, dv);
                equal = false;
            }
        }
        CHECK(cudaGetLastError());
        // base against float64 on the CPU, q of the first and last positions (its angle as ggml's: pos * theta_scale^p)
        double err = 0.0;
        for (int ch : {0, L - 1}) {
            for (int h = 0; h < HQ; ++h) {
                const float * x = &h_qkv[(size_t) ch*NQKV + h*D];
                double ss = 0.0;
                for (int i = 0; i < D; ++i) ss += (double) x[i]*x[i];
                const double sc = 1.0/sqrt(ss/D + eps);
                for (int p = 0; p < D/2; ++p) {
                    const double ang = h_pos[ch]*pow((double) theta_scale, p);
                    const double x0 = sc*x[p]*h_qw[p], x1 = sc*x[p + D/2]*h_qw[p + D/2];
                    const int64_t r = sh.batched ? h_rows[ch] : ch;
                    float g0, g1;
                    memcpy(&g0, &bq[r*HQ*D + h*D + p], 4);
                    memcpy(&g1, &bq[r*HQ*D + h*D + p + D/2], 4);
                    err = std::max(err, std::fabs(g0 - (x0*cos(ang) - x1*sin(ang))));
                    err = std::max(err, std::fabs(g1 - (x0*sin(ang) + x1*cos(ang))));
                }
            }
        }
        printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %s | %.2e |\n", sh.name, L, t_base, t_pos[0], t_pos[1], t_pos[2],
               equal ? "yes" : "**no**", err);
        for (int b = 0; b < 2; ++b) { cudaFree(q_dst[b]); cudaFree(k_dst[b]); cudaFree(v_dst[b]); }
        cudaFree(qkv); cudaFree(qw); cudaFree(kw); cudaFree(pos); cudaFree(rows);
    }
    return 0;
}

/* The package's own CPU kernels for custom ggml nodes (ggml_map_custom*), built beside ggml (CMakeLists.txt) into
 * libomnivoice-ops and loaded by omnivoice/ggml/_ffi.py. Each runs on ggml's worker threads without Python.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml.h"

#if defined(OMNIVOICE_LIBMVEC)
/* glibc's libmvec has vector sinf variants; declaring sinf `simd` lets the compiler call them for the loop below
 * (8 floats a call with AVX2; without the declaration GCC calls the scalar sinf for every value). erff's came with
 * glibc 2.35. */
__attribute__((simd("notinbranch"))) float sinf(float);
#if defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 35)
__attribute__((simd("notinbranch"))) float erff(float);
#endif
#endif
#endif

/* Snake x + sin(alpha x)^2 / (alpha + 1e-9) on channels-last x [C, T] (contiguous), alpha and inv_beta [C]:
 * thread `ith` of `nth` takes its share of the rows. The operations are the graph chain's, in its order
 * (float32 x*alpha, sin, square, *inv_beta, +x), each rounded on its own (no contraction into an FMA).
 * glibc's vector sinf makes it several times faster than the same steps in numpy (whose Python between blocks
 * also takes the GIL that every ggml thread shares). */
void omnivoice_snake_rows(struct ggml_tensor * dst, const struct ggml_tensor * x, const struct ggml_tensor * alpha,
                          const struct ggml_tensor * inv_beta, int ith, int nth, void * userdata) {
    (void) userdata;
    const int64_t C = x->ne[0];
    const int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    const float * restrict a = (const float *) alpha->data;
    const float * restrict ib = (const float *) inv_beta->data;
    for (int64_t r = r0; r < r1; r++) {
        const float * restrict xr = (const float *) x->data + r * C;
        float * restrict yr = (float *) dst->data + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            const float s = sinf(xr[c] * a[c]);
            const float t = s * s;
            const float u = t * ib[c];
            yr[c] = u + xr[c];
        }
    }
}

/* The columns of a channels-last Conv1d (nn/conv.py conv1d_cl): dst [IC*K, T_out] row t holds, side by side, the
 * K input rows t*stride + k*dilation - padding of x [IC, T] (IC floats each; zeros outside x). One pass that
 * writes every row once while the few input rows it reads stay in cache, where one ggml SET per tap streams the
 * whole column buffer K times. `userdata`: int64_t {K, stride, dilation, padding}. */
void omnivoice_conv_columns(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct ggml_tensor * x = dst->src[0];
    const int64_t * p = (const int64_t *) userdata;
    const int64_t K = p[0], stride = p[1], dilation = p[2], padding = p[3];
    const int64_t IC = x->ne[0], T = x->ne[1], t_out = dst->ne[1];
    const size_t row = (size_t) IC * sizeof(float);
    const int64_t t0 = t_out * ith / nth, t1 = t_out * (ith + 1) / nth;
    for (int64_t t = t0; t < t1; t++) {
        char * out = (char *) dst->data + t * dst->nb[1];
        for (int64_t k = 0; k < K; k++) {
            const int64_t s = t * stride + k * dilation - padding;
            if (s >= 0 && s < T) {
                memcpy(out + k * row, (const char *) x->data + s * x->nb[1], row);
            } else {
                memset(out + k * row, 0, row);
            }
        }
    }
}

/* RMSNorm over ne0 times its weight, y = (x * scale) * w with scale = 1 / sqrt(mean(x^2) + eps), one row per
 * step: ggml's RMS_NORM and MUL nodes as one (ggml_map_custom2: x any strides, w [C] F32, dst contiguous;
 * userdata: the float eps). The same operations as ggml's CPU kernels in the same order (float squares summed
 * in double, the mean rounded to float, x * scale then * w), but the sum in vector lanes where ggml's is one
 * scalar chain and its weight a node of its own (tools/op_profile.py lm shows both). */
void omnivoice_rms_norm_rows(struct ggml_tensor * dst, const struct ggml_tensor * x, const struct ggml_tensor * w,
                             int ith, int nth, void * userdata) {
    const float eps = *(const float *) userdata;
    const int64_t C = x->ne[0], n1 = x->ne[1], n2 = x->ne[2], n3 = x->ne[3];
    const int64_t rows = n1 * n2 * n3;
    const int64_t r0 = rows * ith / nth, r1 = rows * (ith + 1) / nth;
    const float * restrict wv = (const float *) w->data;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % n1, i2 = (r / n1) % n2, i3 = r / (n1 * n2);
        const float * restrict xr =
            (const float *) ((const char *) x->data + i1 * x->nb[1] + i2 * x->nb[2] + i3 * x->nb[3]);
        float * restrict yr = (float *) ((char *) dst->data + i1 * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3]);
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < C; c++) {
            sum += (double) (xr[c] * xr[c]);
        }
        const float mean = (float) (sum / C);
        const float scale = 1.0f / sqrtf(mean + eps);
#pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            yr[c] = (xr[c] * scale) * wv[c];
        }
    }
}

/* dst [E, n_0 + n_1 + ...] = the contiguous F32 sources [E, n_i] (dst->src[0..]) side by side along dim 1: each
 * thread copies its share of dst's bytes with memcpy. ggml's CPU CONCAT copies value by value and, along dim 1 of
 * 2-D tensors, on one thread: the more threads, the larger its share of an LM step (tools/op_profile.py lm).
 * A ggml_custom_4d node. */
void omnivoice_concat_cols(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    /* contiguous tensors (the library reads ggml's struct only, it links none of ggml's functions) */
    const size_t total = dst->nb[3] * dst->ne[3], b0 = total * ith / nth, b1 = total * (ith + 1) / nth;
    size_t at = 0;
    for (int i = 0; i < GGML_MAX_SRC && dst->src[i] && at < b1; i++) {
        const size_t n = dst->src[i]->nb[3] * dst->src[i]->ne[3];
        const size_t lo = b0 > at ? b0 : at, hi = b1 < at + n ? b1 : at + n;
        if (lo < hi) memcpy((char *) dst->data + lo, (const char *) dst->src[i]->data + (lo - at), hi - lo);
        at += n;
    }
}

/* dst [C, left + T + right] = the contiguous F32 src [C, T] (dst->src[0]) with `left` zero columns before it and the
 * rest after (userdata: int64 left): each thread zeroes or copies its share of dst's bytes. ggml's CPU PAD goes
 * value by value with a bounds test each (tools/op_profile.py decode shows the pads). A ggml_custom_4d node. */
void omnivoice_pad_cols(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    const struct ggml_tensor * src = dst->src[0];
    const size_t total = dst->nb[3] * dst->ne[3], b0 = total * ith / nth, b1 = total * (ith + 1) / nth;
    const size_t lo = (size_t) *(const int64_t *) userdata * dst->nb[1], hi = lo + src->nb[3] * src->ne[3];
    char * d = (char *) dst->data;
    /* [b0, b1) split at lo and hi: zeros, src's bytes, zeros */
    const size_t z0 = b0 < lo ? b0 : lo, z1 = b1 < lo ? b1 : lo;
    if (z0 < z1) memset(d + z0, 0, z1 - z0);
    const size_t c0 = b0 > lo ? b0 : lo, c1 = b1 < hi ? b1 : hi;
    if (c0 < c1) memcpy(d + c0, (const char *) src->data + (c0 - lo), c1 - c0);
    const size_t e0 = b0 > hi ? b0 : hi;
    if (e0 < b1) memset(d + e0, 0, b1 - e0);
}

/* dst [1, N] = the max of each row of the F32 src [V, N] (dst->src[0]; rows contiguous, any row stride); a row
 * holding a NaN gives NaN. ggml's CPU POOL_2D, which nn.row_max is made of on GPUs, runs on its first thread only:
 * on many threads the three row maxima of an LM step's sampling are a few per cent of the step
 * (tools/op_profile.py lm). Thread ith of nth takes its share of the rows. A ggml_custom_4d node. */
void omnivoice_row_max(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * src = dst->src[0];
    const int64_t V = src->ne[0], N = src->ne[1], r0 = N * ith / nth, r1 = N * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const float * x = (const float *) ((const char *) src->data + r * src->nb[1]);
        float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        int nan = 0;
        int64_t i = 0;
        for (; i + 8 <= V; i += 8)
            for (int j = 0; j < 8; j++) {
                m[j] = m[j] > x[i + j] ? m[j] : x[i + j];
                nan |= x[i + j] != x[i + j];
            }
        for (; i < V; i++) {
            m[0] = m[0] > x[i] ? m[0] : x[i];
            nan |= x[i] != x[i];
        }
        float best = m[0];
        for (int j = 1; j < 8; j++) best = best > m[j] ? best : m[j];
        ((float *) dst->data)[r] = nan ? NAN : best;
    }
}

/* GELU in its erf form, 0.5 x (1 + erf(x / sqrt 2)), of a contiguous F32 x (dst->src[0]): ggml's GELU_ERF's float
 * operations in its order, but with erff 8 values at a time (libmvec) where ggml calls the scalar erff for each:
 * HuBERT's GELUs were a tenth of a clip's encode on two threads (tools/op_profile.py encode). Thread ith of nth
 * takes its share of the values. A ggml_custom_4d node. */
void omnivoice_gelu_erf(struct ggml_tensor * dst, int ith, int nth, void * userdata) {
    (void) userdata;
    const struct ggml_tensor * src = dst->src[0];
    const int64_t n = src->ne[0] * src->ne[1] * src->ne[2] * src->ne[3];
    const int64_t i0 = n * ith / nth, i1 = n * (ith + 1) / nth;
    const float * restrict x = (const float *) src->data;
    float * restrict y = (float *) dst->data;
    const float sqrt_2_inv = 0.70710678118654752440084436210484f;
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * sqrt_2_inv));
}

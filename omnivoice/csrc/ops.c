/* The package's own CPU kernels for custom ggml nodes (ggml_map_custom*), built beside ggml (CMakeLists.txt) into
 * libomnivoice-ops and loaded by omnivoice/ggml/_ffi.py. Each runs on ggml's worker threads without Python.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ggml.h"

#if defined(OMNIVOICE_LIBMVEC)
/* glibc's libmvec has vector sinf variants; declaring sinf `simd` lets the compiler call them for the loop below
 * (8 floats a call with AVX2; without the declaration GCC calls the scalar sinf for every value). */
__attribute__((simd("notinbranch"))) float sinf(float);
#endif

/* Snake x + sin(alpha x)^2 / (alpha + 1e-9) on channels-last x [C, T] (contiguous), alpha and inv_beta [C]:
 * thread `ith` of `nth` takes its share of the rows. The operations are the graph chain's, in its order
 * (float32 x*alpha, sin, square, *inv_beta, +x), each rounded on its own (no contraction into an FMA).
 * Measured on the 2-core Zen 3: 1.5 ns a value on one thread, against 4.9 for the same steps in numpy (whose
 * Python between blocks also takes the GIL that every ggml thread shares). */
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

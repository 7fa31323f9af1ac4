/* The package's own CPU kernels for custom ggml nodes (ggml_map_custom*), built beside ggml (CMakeLists.txt) into
 * libomnivoice-ops and loaded by omnivoice/ggml/_ffi.py. Each runs on ggml's worker threads without Python.
 */
#include <math.h>
#include <stdint.h>

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

/* Which x86 level a libomnivoice-ops-<level> build is for, and whether this CPU runs it.
 *
 * A wheel carries the package's kernels compiled once per level (CMakeLists.txt, GGML_CPU_ALL_VARIANTS), as ggml
 * carries its CPU backend; omnivoice/ggml/_ffi.py loads each and keeps the highest level whose
 * omnivoice_ops_level() is not -1. This file is compiled without the level's flags, so that the check itself runs
 * on any x86-64 CPU (loading a library is safe on any CPU: nothing in it runs before a call). The features checked
 * are exactly the flags the level's other files are compiled with; __builtin_cpu_supports also checks that the OS
 * saves the AVX and AVX-512 registers.
 */
#ifndef OMNIVOICE_OPS_LEVEL
#error "OMNIVOICE_OPS_LEVEL must be defined (CMakeLists.txt)"
#endif

static int has_haswell(void) {
    return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
}

static int has_skylakex(void) {
    return has_haswell() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw");
}

/* This build's level (0 x86-64, 1 haswell, 2 skylakex), or -1 when this CPU lacks a feature it was compiled for. */
int omnivoice_ops_level(void) {
    __builtin_cpu_init();
    const int ok = OMNIVOICE_OPS_LEVEL == 0 ? 1 : OMNIVOICE_OPS_LEVEL == 1 ? has_haswell() : has_skylakex();
    return ok ? OMNIVOICE_OPS_LEVEL : -1;
}

// cpu_features with AVX-512 VNNI reported present (SLUICE_EMULATED_AVX512), so the emulated
// kernels are the ones dispatched: see kernels_avx512_emulated.cpp.
#include "core/cpu_features.cpp"

// The AVX-512 kernels compiled against tests/emu/immintrin.h (a file of its own, so the
// -mavx512* flags CMakeLists.txt gives the real one do not apply): see sluice_tests_avx512emu.
#include "backends/cpu/kernels_avx512.cpp"

// The AVX-512 attention kernels compiled against tests/emu/immintrin.h: see kernels_avx512_emulated.cpp.
#include "backends/cpu/attn_kernels_avx512.cpp"

// core/cpu_features: what the x86 CPU (and the OS, via XCR0) lets us use, detected once by
// CPUID, and the ISA level the cpu backend dispatches on. AMX is only detected here; using it
// needs a per-process permission from the kernel (cpu_request_amx()).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct CpuFeatures {
  // Each flag is true only if the CPU reports it AND the OS saves the register state it
  // needs (XCR0: YMM for AVX*, ZMM/opmask for AVX-512, tile state for AMX).
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512vbmi = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;  // CPU + XCR0 support; permission separate
};

// Detected on first call (thread-safe), then cached.
const CpuFeatures& cpu_features();

// Who made the CPU and what it calls itself (CPUID 0 and 0x80000002..4): "AuthenticAMD",
// "AMD EPYC 9R14 96-Core Processor"; "unknown" where CPUID does not say. Benchmarks print it
// beside every figure so results from different machines are never confused.
struct CpuIdentity {
  std::string vendor, model;
};
CpuIdentity cpu_identity();

// Linux gates AMX tile state per process: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
// must succeed before the first tile instruction, or the process gets SIGILL. Returns true if
// the permission is granted (idempotent); false if there is no AMX or the kernel refuses.
bool cpu_request_amx();

// The kernel sets the cpu backend picks from. Each level implies the ones before it.
enum class CpuIsa {
  generic,  // plain C++, no ISA flags: runs everywhere
  avx2,     // AVX2 + FMA + F16C (Haswell / Zen 1 and later)
  avx512,   // AVX-512 F + BW + VL + DQ (Skylake-X / Zen 4 and later)
};

std::string_view cpu_isa_name(CpuIsa isa);
std::optional<CpuIsa> cpu_isa_from_name(std::string_view name);
// True if this machine can run kernels of that level.
bool cpu_isa_available(CpuIsa isa);
// The best available level, unless the environment variable SLUICE_CPU_ISA
// (generic|avx2|avx512) forces one; forcing a level this CPU lacks throws Error.
CpuIsa cpu_isa_select();

}  // namespace sluice

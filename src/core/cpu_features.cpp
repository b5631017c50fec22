// core/cpu_features: CPUID/XGETBV detection and the SLUICE_CPU_ISA override.
// Bit positions: Intel SDM vol. 2A, CPUID leaf 07H and leaf 01H; XCR0 layout: SDM vol. 1 13.1.
#include "core/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SLUICE_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sluice {
namespace {

#ifdef SLUICE_X86
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  // xgetbv with ecx=0; encoded as bytes so no -mxsave flag is needed for this file.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef SLUICE_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const bool has_fma = (c >> 12) & 1, has_f16c = (c >> 29) & 1, has_avx = (c >> 28) & 1;
  if (!osxsave || !has_avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;              // SSE + AVX state
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  const bool os_tile = (xcr0 & 0x60000) == 0x60000;     // XTILECFG + XTILEDATA
  if (!os_ymm) return f;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  __cpuid_count(7, 0, a7, b7, c7, d7);
  f.fma = has_fma;
  f.f16c = has_f16c;
  f.avx2 = (b7 >> 5) & 1;
  if (os_zmm) {
    f.avx512f = (b7 >> 16) & 1;
    f.avx512dq = (b7 >> 17) & 1;
    f.avx512bw = (b7 >> 30) & 1;
    f.avx512vl = (b7 >> 31) & 1;
    f.avx512vnni = (c7 >> 11) & 1;
    f.avx512vbmi = (c7 >> 1) & 1;
    if (a7 >= 1) {
      unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
      __cpuid_count(7, 1, a71, b71, c71, d71);
      f.avx512bf16 = (a71 >> 5) & 1;
    }
  }
  if (os_tile) {
    f.amx_bf16 = (d7 >> 22) & 1;
    f.amx_tile = (d7 >> 24) & 1;
    f.amx_int8 = (d7 >> 25) & 1;
  }
#endif
#ifdef SLUICE_EMULATED_AVX512
  // tests/emu: the AVX-512 kernels run through a portable emulation, on any x86 CPU.
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = true;
  f.amx_int8 = f.amx_tile = f.amx_bf16 = false;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool cpu_request_amx() {
#if defined(SLUICE_X86) && defined(__linux__) && defined(SYS_arch_prctl)
  if (!cpu_features().amx_tile) return false;
  static const bool granted = [] {
    constexpr int kArchReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM (asm/prctl.h)
    constexpr int kXfeatureXtiledata = 18;     // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic: return "generic";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
  }
  return "?";
}

std::optional<CpuIsa> cpu_isa_from_name(std::string_view name) {
  for (CpuIsa i : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_isa_name(i) == name) return i;
  return std::nullopt;
}

bool cpu_isa_available(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case CpuIsa::generic: return true;
    case CpuIsa::avx2: return avx2;
    case CpuIsa::avx512: return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

CpuIsa cpu_isa_select() {
  if (const char* env = std::getenv("SLUICE_CPU_ISA"); env && *env) {
    auto isa = cpu_isa_from_name(env);
    if (!isa) fail("SLUICE_CPU_ISA=", env, " is not a known level (valid: generic, avx2, avx512)");
    if (!cpu_isa_available(*isa)) fail("SLUICE_CPU_ISA=", env, " but this CPU (or OS) does not support it");
    return *isa;
  }
  if (cpu_isa_available(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_isa_available(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::generic;
}

CpuIdentity cpu_identity() {
  CpuIdentity id;
#ifdef SLUICE_X86
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    id.vendor = v;
  }
  if (static_cast<uint32_t>(__get_cpuid_max(0x80000000, nullptr)) >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &a, &b, &c, &d);
      std::memcpy(brand + 16 * leaf, &a, 4);
      std::memcpy(brand + 16 * leaf + 4, &b, 4);
      std::memcpy(brand + 16 * leaf + 8, &c, 4);
      std::memcpy(brand + 16 * leaf + 12, &d, 4);
    }
    id.model = brand;
    // The brand string is padded with spaces on some CPUs.
    id.model.erase(0, id.model.find_first_not_of(' '));
    id.model.erase(id.model.find_last_not_of(' ') + 1);
  }
#endif
  if (id.vendor.empty()) id.vendor = "unknown";
  if (id.model.empty()) id.model = "unknown";
  return id;
}

}  // namespace sluice

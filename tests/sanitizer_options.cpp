// tests/sanitizer_options: the options the sanitizer twin's binaries (CMakeLists.txt:
// SLUICE_ASAN_TWIN) run with unless ASAN_OPTIONS / UBSAN_OPTIONS say otherwise: leaks are errors,
// and a UBSan report carries its stack. Built into those binaries so that running one by hand
// behaves as it does under ctest.
extern "C" {
__attribute__((used, no_sanitize("address", "undefined"))) const char* __asan_default_options() {
  return "detect_leaks=1";
}
__attribute__((used, no_sanitize("address", "undefined"))) const char* __ubsan_default_options() {
  return "print_stacktrace=1";
}
}

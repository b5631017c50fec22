// tests/cli_path: the `sluice` CLI a test binary runs (test_util.h's cli_path()). One file compiled
// into each test binary with the path of its own CLI (CMakeLists.txt: SLUICE_CLI_PATH), so the
// plain tests run the plain CLI and the sanitizer twin's tests the twin's, from the same test objects.
namespace sluice::test {
const char* cli_path() { return SLUICE_CLI_PATH; }
}  // namespace sluice::test

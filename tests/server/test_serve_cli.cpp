// tests/server/test_serve_cli: `sluice serve`'s options are range-checked before the model is
// loaded, each error naming its option; a port in use is a clear error, not a hang.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "test_util.h"

namespace sluice::test_serve_cli {
namespace {

std::string serve(const std::string& args, int* status) {
  return test::run_command(std::string(::sluice::test::cli_path()) + " serve -m " + test::shared_dir() +
                               "/models/stories260K.gguf " + args + " 2>&1",
                           status);
}

TEST(ServeCli, BadOptionsAreRefusedNamingThem) {
  SLUICE_REQUIRE_SHARED();
  for (const std::string opt : {"--parallel 0", "--parallel x", "--port 70000", "--port -1", "--queue -1", "--batch 0",
                                "--max-body-mb 0", "--threads -3", "--ctx -5", "--temp 1"}) {
    int status = 0;
    const std::string out = serve(opt, &status);
    EXPECT_NE(status, 0) << opt << ": " << out;
    const std::string name = opt.substr(0, opt.find(' '));
    EXPECT_NE(out.find(name), std::string::npos) << opt << ": " << out;
  }
  int status = 0;
  const std::string out = serve("--chat-template /nonexistent.jinja", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--chat-template"), std::string::npos) << out;
}

TEST(ServeCli, APortInUseIsAnError) {
  SLUICE_REQUIRE_SHARED();
  // Bind a port, then ask serve for it.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  int status = 0;
  const std::string out = serve("--port " + std::to_string(ntohs(a.sin_port)), &status);
  ::close(fd);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::test_serve_cli

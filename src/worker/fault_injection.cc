#include "worker/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string_view>

namespace cohort::worker {

namespace {

// True once per run: the caller created the marker file.
bool ClaimTheFault() {
  const char* marker = std::getenv("COHORT_TEST_FAULT_ONCE");
  if (marker == nullptr || *marker == '\0') return false;
  int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

}  // namespace

void MaybeInjectFault(const std::string& op, const std::function<void(const std::string&)>& print,
                      const std::function<void()>& close_events) {
  const char* spec = std::getenv("COHORT_TEST_FAULT");
  if (spec == nullptr) return;
  std::string_view s(spec);
  size_t colon = s.find(':');
  if (colon == std::string_view::npos || s.substr(0, colon) != op) return;
  std::string_view kind = s.substr(colon + 1);
  if (!ClaimTheFault()) return;
  if (kind == "kill") std::raise(SIGKILL);
  if (kind == "segv") {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (kind == "exit") ::_exit(3);
  if (kind == "hang") std::raise(SIGSTOP);  // every thread, the heartbeat's too
  if (kind == "close_stdout") {
    close_events();
    while (true) ::pause();
  }
  if (kind == "garbage") {
    // Lines a broken library might print: the controller logs them and goes on.
    print("@cohort {\"ev\": \"done\", \"id\": ");
    print("@cohort [1, 2, 3]");
    print("\x01\x02 not an event at all");
  }
}

}  // namespace cohort::worker

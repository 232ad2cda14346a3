#include "cli/base/run_cli.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <exception>

namespace cohort::cli {

int RunCli(CLI::App& app, int argc, char** argv, const std::function<Status()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; --help shows the usage.
    std::fprintf(stderr, "cohort: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (!run) {
    std::fprintf(stderr, "cohort: error: no command given (see cohort --help)\n");
    return 2;
  }
  try {
    Status status = run();
    if (!status.ok()) {
      std::fprintf(stderr, "cohort: error: %s\n", status.message().c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    // Only out-of-memory and library bugs get here; still one line.
    std::fprintf(stderr, "cohort: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

std::string SiblingExecutable(const std::string& name) {
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

}  // namespace cohort::cli

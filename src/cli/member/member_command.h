// `cohort train`, `cohort eval`, `cohort predict` (one member without the loop, for
// debugging a member before it joins an ensemble) and `cohort worker` (the persistent worker
// process the loop drives; docs/protocol.md).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "common/status.h"

namespace cohort::cli {

void AddMemberCommands(CLI::App& app, std::function<Status()>* run);

}  // namespace cohort::cli

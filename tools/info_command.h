#pragma once
// `tessera info`: the devices tessera sees, like nvidia-smi for every device kind.
#include <CLI/CLI.hpp>

namespace tessera::tools {

// Adds the `info` subcommand to `app`; it prints when the subcommand is given.
void add_info_command(CLI::App& app);

}  // namespace tessera::tools

#pragma once
// `tessera bench`: the seed's four exercises as benchmarks (tools/bench/).
#include <CLI/CLI.hpp>

namespace tessera::tools {

// Adds the `bench` subcommand to `app`; it runs when the subcommand is given.
void add_bench_command(CLI::App& app);

}  // namespace tessera::tools

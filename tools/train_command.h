#pragma once
// `tessera train`: the main job. Trains a model on Fashion-MNIST and prints its test accuracy.
#include <CLI/CLI.hpp>

namespace tessera::tools {

// Adds the `train` subcommand to `app`; it trains when the subcommand is given.
void add_train_command(CLI::App& app);

}  // namespace tessera::tools

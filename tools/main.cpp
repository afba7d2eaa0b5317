// The `tessera` command line: `tessera train`, `tessera bench`, `tessera info`, `tessera --version`, `--help`.
#include <iostream>

#include <CLI/CLI.hpp>

#include "bench_command.h"
#include "info_command.h"
#include "train_command.h"
#include "tessera/error.h"
#include "tessera/version.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: tensors on explicit devices (CPU, logical CPU devices, CUDA GPUs)",
               "tessera"};
  app.set_version_flag("--version", std::string("tessera ") + tessera::kVersion);
  app.require_subcommand(0, 1);
  tessera::tools::add_info_command(app);
  tessera::tools::add_train_command(app);
  tessera::tools::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: " << e.what() << "\n";
    return 1;
  }
  if (app.get_subcommands().empty()) {  // bare `tessera`: say what it can do
    std::cout << app.help();
    return 1;
  }
  return 0;
}

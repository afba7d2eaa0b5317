// The `tessera` command line: `tessera train`, `tessera bench`, `tessera info`, `tessera --version`, `--help`.
#include <iostream>

#include <CLI/CLI.hpp>

#include "bench_command.h"
#include "info_command.h"
#include "train_command.h"
#include "tessera/error.h"
#include "tessera/process_group.h"
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
  } catch (const std::exception& e) {
    std::cerr << "tessera: " << e.what() << "\n";
    // Under mpirun, the other ranks would wait for this one forever: end them all now.
    tessera::ProcessGroup::abort_world(1);
    return 1;
  }
  if (app.get_subcommands().empty()) {  // bare `tessera`: say what it can do
    std::cout << app.help();
    return 1;
  }
  return 0;
}

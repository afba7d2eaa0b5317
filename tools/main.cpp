// The `tessera` command line: `tessera train`, `tessera bench`, `tessera info`, `tessera
// --version`, `--help`.
#include <iostream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "bench_command.h"
#include "info_command.h"
#include "tessera/error.h"
#include "tessera/process_group.h"
#include "tessera/version.h"
#include "train_command.h"

namespace {

// An error message with its control characters escaped (all but the newlines that separate
// its lines): a name or path from a file must not reach the terminal raw.
std::string printable_message(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const bool c1 = b == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    if ((b < 0x20 && b != '\n') || b == 0x7f) {
      out += fmt::format("\\x{:02x}", b);
    } else if (c1) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[++i]));
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

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
    std::cerr << "tessera: " << printable_message(e.what()) << "\n";
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

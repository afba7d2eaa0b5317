#pragma once
/// The training chart, the C++ counterpart of the book's ProgressBoard: train and validation
/// loss (left axis) and validation accuracy (right axis) per epoch, and, when given, every
/// step's training loss as a thin line. Drawn with Cairo, in its own library: link
/// tessera::plot (the core library, tessera::tessera, draws nothing and links no Cairo).
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

/// Writes the chart of `history` (as Trainer::fit returns it) to `path`: SVG for .svg, PNG
/// for .png (Error for another extension). `step_losses` (Trainer::step_losses(), on the
/// CPU) may be undefined. IOError when the file cannot be written.
TESSERA_API void plot_history(const std::vector<EpochMetrics>& history,
                              const std::filesystem::path& path, const Tensor& step_losses = {},
                              const std::string& title = "");

}  // namespace tessera::train

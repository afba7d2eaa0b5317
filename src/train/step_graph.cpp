// See Note [Recorded steps] in step_graph.h.
#include "train/step_graph.h"

#include <fmt/format.h>

#include "core/copy.h"
#include "tessera/factories.h"

namespace tessera::train {

StepGraph::StepGraph(const std::vector<Device>& devices, const std::vector<data::Batch>& like,
                     const Step& step) {
  for (std::size_t r = 0; r < devices.size(); ++r) {
    inputs_.push_back({empty(like[r].x.shape(), {like[r].x.dtype(), devices[r]}),
                       empty(like[r].y.shape(), {like[r].y.dtype(), devices[r]})});
  }
  try {
    graph_ = std::make_unique<Graph>(Graph::capture(devices, [&] { results_ = step(inputs_); }));
  } catch (const GraphCaptureError& e) {
    throw GraphCaptureError(fmt::format(
        "[Trainer] the training step cannot be recorded as a graph (TrainerOptions::graph, "
        "--graph): {}. Train without the graph option, or keep that work out of the step",
        e.what()));
  }
}

const std::vector<StepResult>& StepGraph::run(const std::vector<data::Batch>& host_shards) {
  for (std::size_t r = 0; r < inputs_.size(); ++r) {
    const auto here = std::source_location::current();
    detail::copy_data(host_shards[r].x, inputs_[r].x, here, detail::SourceWriters::kHostOnly);
    detail::copy_data(host_shards[r].y, inputs_[r].y, here, detail::SourceWriters::kHostOnly);
  }
  graph_->replay();
  return results_;
}

}  // namespace tessera::train

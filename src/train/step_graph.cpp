// See Note [Recorded steps] in step_graph.h.
#include "train/step_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/check.h"
#include "core/copy.h"
#include "tessera/factories.h"

namespace tessera::train {
namespace {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "absent";
  return fmt::format("{} {} on {}", dtype_name(t.dtype()), t.shape().str(), t.device().str());
}

}  // namespace

StepGraph::StepGraph(const std::vector<Device>& devices, const std::vector<data::Batch>& like,
                     const Step& step) {
  for (std::size_t r = 0; r < devices.size(); ++r) {
    data::Batch in;
    in.more.resize(like[r].more.size());
    for (std::size_t i = 0; i < like[r].size(); ++i) {
      const Tensor& t = like[r][i];
      if (t.defined()) in[i] = empty(t.shape(), {t.dtype(), devices[r]});
    }
    inputs_.push_back(std::move(in));
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

const std::vector<StepResult>& StepGraph::run(const std::vector<data::Batch>& shards) {
  for (std::size_t r = 0; r < inputs_.size(); ++r) {
    const data::Batch& in = inputs_[r];
    const data::Batch& shard = shards[r];
    for (std::size_t i = 0; i < std::max(in.size(), shard.size()); ++i) {
      const Tensor none;
      const Tensor& dst = i < in.size() ? in[i] : none;
      const Tensor& src = i < shard.size() ? shard[i] : none;
      TESSERA_CHECK(
          dst.defined() == src.defined() &&
              (!dst.defined() || (dst.shape() == src.shape() && dst.dtype() == src.dtype() &&
                                  dst.device() == src.device())),
          Error,
          "[Trainer] with TrainerOptions::graph every full batch must reach the "
          "recorded step alike, but tensor {} of a batch (after prepare_batch) is {} "
          "and was {} when the step was recorded",
          i, describe(src), describe(dst));
      detail::copy_data(src, dst, "Trainer", std::source_location::current());
    }
  }
  graph_->replay();
  return results_;
}

}  // namespace tessera::train

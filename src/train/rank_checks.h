#pragma once
// Refuses, at the start of a multi-process fit, ranks that would train different things.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/process_group.h"
#include "tessera/tensor.h"

namespace tessera::train {

// What every rank of one fit must agree on.
struct RunFacts {
  std::int64_t batch_size = 0;
  std::int64_t batches = 0;  // per epoch
  std::int64_t max_epochs = 0;
  double gradient_clip_val = 0;
};

// Exchanges each rank's facts and a fingerprint of each parameter (name, dtype, shape), and
// throws Error on every rank when one differs from rank 0's, naming the rank and the
// difference. Host work only (two small all-gathers).
void check_ranks_agree(const ProcessGroup& group, const RunFacts& facts,
                       const std::vector<std::pair<std::string, Tensor>>& params);

}  // namespace tessera::train

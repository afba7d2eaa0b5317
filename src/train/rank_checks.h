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
  std::int64_t batches = 0;   // per epoch
  std::int64_t examples = 0;  // in the training data (the same batch count can hide a difference)
  std::int64_t max_epochs = 0;
  double gradient_clip_val = 0;
  // Facts compared as text (by a hash of it): what each is called, and its value here. The
  // devices, the precision, whether steps are recorded, the data order, the optimizer and
  // the model's layers (two models with the same parameters may compute differently).
  std::vector<std::pair<std::string, std::string>> described;
};

// Exchanges each rank's facts and a fingerprint of each parameter (name, dtype, shape, and
// whether it trains: a gradient bucket lays out the trained ones only), and
// throws Error on every rank when one differs from rank 0's, naming the rank and the
// difference. Host work only (three small all-gathers).
void check_ranks_agree(const ProcessGroup& group, const RunFacts& facts,
                       const std::vector<std::pair<std::string, Tensor>>& params);

// Before loading: throws Error on every rank unless every rank is to resume after the same
// number of epochs (`done`, from the file's header; 0 for a rank that does not resume) from
// a file with the same bytes (`file_digest`, loop::resume_file_digest). Host work only.
void check_ranks_resume_alike(const ProcessGroup& group, int done, std::uint64_t file_digest);

}  // namespace tessera::train

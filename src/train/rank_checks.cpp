#include "train/rank_checks.h"

#include <bit>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include "core/check.h"
#include "tessera/factories.h"
#include "tessera/sync_guard.h"

namespace tessera::train {
namespace {

// Every rank's `mine`, all of one length, rank after rank (read on the host: a start-up
// exchange, not a training step).
std::vector<std::int64_t> gather(const ProcessGroup& group, const std::vector<std::int64_t>& mine) {
  const Tensor t = from_vector(mine, {static_cast<std::int64_t>(mine.size())}, {kInt64, cpu()});
  const Tensor all = group.all_gather(t);
  AllowSync deliberate;
  return all.to_vector<std::int64_t>();
}

std::int64_t fingerprint(const std::string& name, const Tensor& t) {
  const std::string text =
      fmt::format("{}|{}|{}|{}", name, dtype_name(t.dtype()), t.shape().str(), t.requires_grad());
  return static_cast<std::int64_t>(std::hash<std::string>{}(text));
}

// The first (rank, index) at which a rank's `mine` differs from rank 0's, if any.
std::optional<std::pair<std::size_t, std::size_t>> first_difference(
    const ProcessGroup& group, const std::vector<std::int64_t>& mine) {
  if (mine.empty()) return std::nullopt;
  const std::vector<std::int64_t> all = gather(group, mine);
  const std::size_t n = mine.size();
  for (std::size_t r = 1; r < all.size() / n; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      if (all[r * n + i] != all[i]) return std::make_pair(r, i);
    }
  }
  return std::nullopt;
}

}  // namespace

void check_ranks_agree(const ProcessGroup& group, const RunFacts& facts,
                       const std::vector<std::pair<std::string, Tensor>>& params) {
  const std::vector<std::int64_t> mine = {facts.batch_size,
                                          facts.batches,
                                          facts.max_epochs,
                                          std::bit_cast<std::int64_t>(facts.gradient_clip_val),
                                          static_cast<std::int64_t>(params.size()),
                                          facts.examples};
  const char* names[] = {"batch size",          "batches per epoch", "epochs",
                         "gradient clip value", "parameter count",   "count of training examples"};
  const std::vector<std::int64_t> all = gather(group, mine);
  const std::size_t n = mine.size();
  for (std::size_t r = 1; r < all.size() / n; ++r) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t first = all[i], other = all[r * n + i];
      if (first == other) continue;
      const bool clip = i == 3;
      throw Error(fmt::format(
          "[Trainer] rank {}'s {} is {} but rank 0's is {}; every rank must run the same "
          "training (same command-line options and data)",
          r, names[i],
          clip ? fmt::format("{}", std::bit_cast<double>(other)) : std::to_string(other),
          clip ? fmt::format("{}", std::bit_cast<double>(first)) : std::to_string(first)));
    }
  }
  std::vector<std::int64_t> prints;
  for (const auto& [name, t] : params) prints.push_back(fingerprint(name, t));
  if (const auto at = first_difference(group, prints)) {
    const auto& [name, t] = params[at->second];
    throw Error(fmt::format(
        "[Trainer] rank {}'s parameter {} differs in name, dtype, shape or requires_grad from "
        "rank 0's (on rank {} it is '{}' {} {}, {}); every rank must build the same model and "
        "freeze the same parameters",
        at->first, at->second, group.rank(), name, dtype_name(t.dtype()), t.shape().str(),
        t.requires_grad() ? "trained" : "frozen (requires_grad off)"));
  }
  std::vector<std::int64_t> hashes;
  for (const auto& [what, text] : facts.described) {
    hashes.push_back(static_cast<std::int64_t>(std::hash<std::string>{}(text)));
  }
  if (const auto at = first_difference(group, hashes)) {
    const auto& [what, text] = facts.described[at->second];
    throw Error(fmt::format(
        "[Trainer] rank {}'s {} differs from rank 0's (on rank {}: {}); every rank must run "
        "the same training (same command-line options and data)",
        at->first, what, group.rank(), text));
  }
}

void check_ranks_resume_alike(const ProcessGroup& group, int done, std::uint64_t file_digest) {
  // The files' bytes too, not only the epochs: ranks resuming from different files of the
  // same epoch (a stale copy on one host) trained on, each with its own parameters.
  const std::uint64_t digest = done > 0 ? file_digest : 0;
  const std::vector<std::int64_t> all = gather(group, {done, std::bit_cast<std::int64_t>(digest)});
  const std::size_t ranks = all.size() / 2;
  for (std::size_t r = 1; r < ranks; ++r) {
    const std::int64_t theirs = all[2 * r], first = all[0];
    if (theirs == first) continue;
    const auto said = [](std::int64_t d) {
      return d == 0 ? std::string("starts afresh") : fmt::format("resumes after epoch {}", d);
    };
    throw Error(fmt::format(
        "[Trainer] rank {} {} but rank 0 {}; give every rank the same training state to "
        "resume from (--resume), or none",
        r, said(theirs), said(first)));
  }
  for (std::size_t r = 1; r < ranks; ++r) {
    TESSERA_CHECK(all[2 * r + 1] == all[1], Error,
                  "[Trainer] rank {} resumes after epoch {} as rank 0 does, but from another "
                  "training state file (its bytes differ from rank 0's); give every rank the "
                  "same file to resume from (--resume)",
                  r, all[0]);
  }
}

}  // namespace tessera::train

// A 2-rank training run in which rank 1 fails mid-epoch: `rank_fault throw` (an exception,
// caught as the command line does: report, then end the world), `rank_fault catch` (caught,
// reported, and main returns 0 without ending the world: the exit must not wait for ever)
// or `rank_fault kill` (the process dies on SIGKILL). CTest checks that mpirun ends,
// non-zero, within its timeout and names rank 1, instead of rank 0 waiting forever in an
// all-reduce. `rank_fault recovers`: a fit every rank refuses (their batch sizes differ) is
// caught, the next fit trains, and rank 0 works on for longer than a failed rank waits at
// exit: the run must end cleanly (the refusal was every rank's, and they got over it).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "tessera/tessera.h"

namespace {

using namespace tessera;

class FailingTask : public train::Classifier {
 public:
  FailingTask(train::ModelFactory m, train::OptimizerFactory o, bool kill)
      : Classifier(std::move(m), std::move(o)), kill_(kill) {}
  train::StepResult training_step(const data::Batch& batch) override {
    if (ProcessGroup::world().rank() == 1 && ++steps_ == 5) {
      std::fprintf(stderr, "rank_fault: rank 1 fails at step 5\n");
      if (kill_) std::raise(SIGKILL);
      throw Error("rank_fault: rank 1's deliberate failure");
    }
    return Classifier::training_step(batch);
  }

 private:
  bool kill_;
  int steps_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  const bool kill = mode == "kill";
  if (mode == "recovers") {
    const ProcessGroup& group = ProcessGroup::init();
    std::vector<std::uint8_t> pixels(64 * 64, 7);
    std::vector<std::int64_t> labels(64, 1);
    int trained = 0;
    for (const std::int64_t batch : {group.rank() == 0 ? 4 : 8, 4}) {
      data::DataLoader loader(from_vector(pixels, {64, 8, 8}), from_vector(labels, {64}),
                              {.batch_size = batch});
      train::Classifier task(
          [] { return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 4)); },
          [](const std::vector<Tensor>& p) {
            return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1});
          });
      try {
        train::Trainer({.max_epochs = 1, .progress = false, .process_group = &group})
            .fit(task, loader);
        std::fprintf(stderr, "rank_fault: rank %d trained\n", group.rank());
        ++trained;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank_fault: rank %d refused: %s\n", group.rank(), e.what());
      }
    }
    if (group.rank() == 0) sleep(11);  // its own work after training: longer than 10 s
    return trained == 1 ? 0 : 1;
  }
  try {
    const ProcessGroup& group = ProcessGroup::init();
    std::vector<std::uint8_t> pixels(64 * 64, 7);
    std::vector<std::int64_t> labels(64, 1);
    data::DataLoader loader(from_vector(pixels, {64, 8, 8}), from_vector(labels, {64}),
                            {.batch_size = 4});
    FailingTask task(
        [] { return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 4)); },
        [](const std::vector<Tensor>& p) {
          return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1});
        },
        kill);
    train::Trainer({.max_epochs = 1000, .progress = false, .process_group = &group})
        .fit(task, loader);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank_fault: %s\n", e.what());
    if (mode == "catch") return 0;  // as a careless program would
    ProcessGroup::abort_world(1);
    return 1;
  }
  return 0;
}

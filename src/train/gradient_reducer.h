#pragma once
// Sums the gradients of data-parallel replicas in buckets. See Note [Gradient buckets].
#include <cstddef>
#include <functional>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::train {

// Note [Gradient buckets]
// One collective per parameter would cost a rendezvous (a kernel launch, a barrier) per
// tensor; one for everything would leave nothing to overlap. As PyTorch's DDP does, the
// parameters are grouped, in reverse order (the order backward produces their gradients),
// into buckets of about `bucket_bytes` of one dtype. Each replica keeps one flat buffer per
// bucket on its device: its gradients are copied in, the buffers are summed across replicas
// by `all_reduce_sum` (in-process: the collectives over the replicas' devices; across
// processes, a process group would plug in here), and each parameter's grad becomes a view
// of its slice. A parameter that got no gradient contributes zeros.
class GradientReducer {
 public:
  using AllReduceSum = std::function<void(const std::vector<Tensor>& one_per_replica)>;

  // params[r] are replica r's parameters, in the same order and shapes on every replica.
  GradientReducer(std::vector<std::vector<Tensor>> params, AllReduceSum all_reduce_sum,
                  std::size_t bucket_bytes = std::size_t{25} << 20);

  // Replaces every replica's grads with their sum over the replicas. Queued work only.
  void reduce();

  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Slot {
    std::size_t param;  // index into each replica's parameter list
    std::int64_t offset, numel;
  };
  struct Bucket {
    std::vector<Slot> slots;
    std::vector<Tensor> flat;  // one per replica, on its device
  };
  std::vector<std::vector<Tensor>> params_;
  AllReduceSum all_reduce_sum_;
  std::vector<Bucket> buckets_;
};

}  // namespace tessera::train

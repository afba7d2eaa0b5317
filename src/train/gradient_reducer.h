#pragma once
// Sums the gradients of data-parallel replicas in buckets. See Note [Gradient buckets].
#include <cstddef>
#include <cstdint>
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
// of its slice.
//
// Overlap: the reducer sets a grad-ready hook (Note [Grad-ready hooks]) on every parameter.
// When a replica's last gradient of a bucket is complete, its copy into the flat buffer is
// queued at once, in the middle of that replica's backward; when every replica has filled a
// bucket, its all-reduce is queued, while backward goes on with the earlier layers. reduce(),
// called after the replicas' backward passes, finishes the buckets that were not (a
// parameter no loss depends on gets no hook call and contributes zeros to its bucket),
// gives every parameter its summed grad, and starts the next step afresh.
//
// Unused parameters: a parameter that no replica's loss reached (of any rank: `agree_used`
// ORs the flags across processes) keeps no grad on any replica, as on one device, so that
// the optimizers skip it: a zero grad would still decay it (weight_decay, AdamW) and count
// an Adam step. Otherwise it gets the sum, zeros included, on every replica. One backward per
// replica per step: a second pass before reduce() adds nothing to buckets already filled.
//
// Note [Gradients reduced in place]
// Copying a gradient into its bucket costs a pass over its bytes on every replica every
// step: for the MLP on two logical CPU devices, 0.8 MB per device per step, about as long
// as the all-reduce itself. So a parameter of at least kInPlaceBytes gets a bucket of its
// own, whose flat buffer on each replica is the gradient backward made (contiguous, of the
// parameter's dtype): it is summed where it lies, and the copy is saved for the price of
// one more collective per such parameter. A gradient that is not like that (none, a
// strided view, another dtype) is copied into the bucket's own buffer as before.
class GradientReducer {
 public:
  using AllReduceSum = std::function<void(const std::vector<Tensor>& one_per_replica)>;
  // ORs, across processes, the flags of which parameters got a gradient (1) this step.
  using AgreeUsed = std::function<void(std::vector<std::uint8_t>& used)>;

  // params[r] are replica r's parameters, in the same order and shapes on every replica.
  // Sets a grad-ready hook on each; the destructor removes them.
  GradientReducer(std::vector<std::vector<Tensor>> params, AllReduceSum all_reduce_sum,
                  std::size_t bucket_bytes = std::size_t{25} << 20, AgreeUsed agree_used = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // After every replica's backward: replaces every replica's grads with their sum over the
  // replicas. Queued work only.
  void reduce();

  std::size_t buckets() const { return buckets_.size(); }
  // Buckets of one parameter, whose gradients are summed in place (Note [Gradients reduced
  // in place]).
  std::size_t in_place_buckets() const;
  // A parameter's gradient of at least this many bytes is reduced in place.
  static constexpr std::size_t kInPlaceBytes = std::size_t{256} << 10;
  // Buckets whose all-reduce was queued during backward in the last step (for tests).
  std::size_t overlapped() const { return overlapped_; }

 private:
  struct Slot {
    std::size_t param;  // index into each replica's parameter list
    std::int64_t offset, numel;
  };
  struct Bucket {
    std::vector<Slot> slots;
    std::vector<Tensor> own;           // one flat buffer per replica, on its device
    std::vector<Tensor> flat;          // what is summed: `own`, or the gradient in place
    bool in_place = false;             // one parameter, summed where its gradient lies
    std::vector<std::size_t> waiting;  // per replica: slots whose gradient is not final yet
    std::size_t filled = 0;            // replicas whose flat buffer has been filled
    bool launched = false;
  };
  void mark_ready(std::size_t replica, std::size_t param);
  void fill(Bucket& b, std::size_t replica);
  void launch(Bucket& b);
  void reset();

  std::vector<std::vector<Tensor>> params_;
  AllReduceSum all_reduce_sum_;
  AgreeUsed agree_used_;
  std::vector<std::uint8_t> used_;  // per parameter: some replica's backward reached it
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // per parameter index
  std::size_t overlapped_ = 0, launched_in_backward_ = 0;
};

}  // namespace tessera::train

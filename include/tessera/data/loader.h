#pragma once
/// DataLoader: batches of (image, label) pairs from uint8 images in host memory, shuffled
/// with a seed, scaled to float32 in [0, 1] (optionally normalized), in pinned host memory
/// when the machine has a GPU so that Trainer's prepare_batch copies them asynchronously
/// (the copy of one batch overlaps the device's work on the one before; see docs). With
/// `prefetch` (by default when the machine has a GPU) each epoch's batches are gathered ahead
/// of the step on a background thread, in the same order and with the same values.
///
///   data::DataLoader train(d.train_images, d.train_labels, {.batch_size = 256, .seed = 1});
///   for (const data::Batch& b : train) { ... b.x [256, 1, 28, 28], b.y [256] int64 ... }
#include <cstdint>
#include <memory>
#include <source_location>
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::detail {
class Prefetcher;  // src/data/prefetcher.h
}

namespace tessera::data {

struct TESSERA_API LoaderOptions {
  std::int64_t batch_size = 256;
  bool shuffle = true;
  bool drop_last = false;  ///< drop a last batch smaller than batch_size
  std::uint64_t seed = 0;  ///< epoch e shuffles with seed + e: runs repeat exactly
  double mean = 0;         ///< x = (pixel / 255 - mean) / std
  double std = 1;
  /// Batches gathered ahead on a background thread, at most this many waiting (0: each batch
  /// is gathered on the iterating thread when the iterator reaches it). An error on that
  /// thread is rethrown by the iterator, on the iterating thread, when it reaches that batch.
  /// -1 (the default): 2 when the machine has a GPU (the host is otherwise idle while the GPU
  /// works), 0 when it has none (the CPU kernels already use every core; see
  /// docs/benchmarks.md).
  std::int64_t prefetch = -1;
};

/// A batch: x and y, and any further tensors in `more` (the book's later chapters carry four
/// per batch, such as a source, its valid lengths, a target and a label), every one with
/// the batch's examples along dim 0. The image DataLoader fills x and y.
struct TESSERA_API Batch {
  Tensor x;  ///< images: float32 [B, 1, H, W] (a channel dim is added to [N, H, W] images)
  Tensor y;  ///< images: int64 [B] labels
  std::vector<Tensor> more;  ///< the tensors after x and y; none for image batches

  /// A batch of these tensors in order: x, y, then the rest in `more`. Error for none.
  static Batch of(std::vector<Tensor> tensors);
  /// The number of tensors: x and y (counted even when undefined), then `more`.
  std::size_t size() const { return 2 + more.size(); }
  /// Tensor i in that order. Error for i >= size().
  Tensor& operator[](std::size_t i);
  const Tensor& operator[](std::size_t i) const;
  /// All the tensors in that order.
  std::vector<Tensor> tensors() const;
  /// The number of examples: dim 0 of the first defined tensor (0 when none is).
  std::int64_t examples() const;
};

class TESSERA_API DataLoader {
 public:
  /// images: uint8 [N, ...] on the CPU, N > 0; labels: integer [N] on the CPU. Error
  /// otherwise (ShapeError for an empty data set).
  DataLoader(Tensor images, Tensor labels, LoaderOptions options = {});
  /// Batches of any number of tensors (Batch::of): `tensors` are CPU tensors of any dtype
  /// with the same size N > 0 along dim 0, and batch i holds the same examples of each,
  /// as they are (mean and std apply to images only). ShapeError when the sizes differ or
  /// N is 0, DeviceError for a tensor not on the CPU, Error for no tensor. The tensors are a
  /// data set in host memory: on a logical CPU device (cpu:i) too, whose memory the host
  /// reads in place, so a batch is gathered into cpu (or into the devices split() names)
  /// without a ledger entry, as a batch gathered from a file is.
  /// Both read the tensors themselves when they are contiguous (of the right dtype), not a
  /// copy: changes made to them in place between epochs (new labels) are seen from the next
  /// epoch on, an epoch beginning after such a change waiting once for their device's queue.
  /// Changes during an epoch reach its batches at no defined point.
  DataLoader(std::vector<Tensor> tensors, LoaderOptions options = {});

  std::int64_t size() const { return n_; }  ///< examples
  std::int64_t batches() const;             ///< batches per epoch
  const LoaderOptions& options() const { return options_; }
  /// Batches gathered ahead on the background thread: options().prefetch, or what -1 chose.
  std::int64_t prefetch() const { return prefetch_; }

  /// An input iterator: copies share one epoch's prefetched batches (advance only one).
  /// Dropping it mid-epoch stops the background thread after at most one more batch.
  class iterator;
  /// One part of every batch: iterating it starts an epoch, as begin() does, and yields the
  /// rows of each batch that part `part` of `parts` trains on (see shard()).
  class TESSERA_API Shard {
   public:
    iterator begin();
    iterator end() const;

   private:
    friend class DataLoader;
    Shard(DataLoader* loader, std::int64_t part, std::int64_t parts)
        : loader_(loader), part_(part), parts_(parts) {}
    DataLoader* loader_;
    std::int64_t part_, parts_;
  };
  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    const Batch& operator*() const { return pieces_.front(); }
    const Batch* operator->() const { return &pieces_.front(); }
    iterator& operator++();
    bool operator==(const iterator& other) const { return index_ == other.index_; }

   private:
    friend class DataLoader;
    TESSERA_HIDDEN iterator(const DataLoader* loader, std::int64_t index,
                            std::shared_ptr<const std::vector<std::int64_t>> order = nullptr,
                            std::int64_t part = 0, std::int64_t parts = 1,
                            std::vector<Device> devices = {},
                            std::shared_ptr<detail::Prefetcher> prefetcher = nullptr);
    void load();
    const DataLoader* loader_ = nullptr;
    std::int64_t index_ = 0;
    // Its epoch's order, kept: a begin() of the same loader mid-epoch starts another order.
    std::shared_ptr<const std::vector<std::int64_t>> order_;
    std::int64_t part_ = 0, parts_ = 1;  // the rows of each batch it yields (see shard())
    std::vector<Device> devices_;        // split()'s devices; none: one piece on the host
    std::shared_ptr<detail::Prefetcher> prefetcher_;  // null without prefetch
    std::vector<Batch> pieces_{1};                    // one per device of split(), else one
  };
  /// One part of every batch cut again over devices (see split()): iterating it starts an
  /// epoch, as begin() does, and yields one batch per device.
  class TESSERA_API Split {
   public:
    class iterator {
     public:
      using value_type = std::vector<Batch>;
      using difference_type = std::ptrdiff_t;
      const std::vector<Batch>& operator*() const { return it_.pieces_; }
      iterator& operator++() {
        ++it_;
        return *this;
      }
      bool operator==(const iterator& other) const { return it_ == other.it_; }

     private:
      friend class Split;
      explicit iterator(DataLoader::iterator it) : it_(std::move(it)) {}
      DataLoader::iterator it_;
    };
    iterator begin();
    iterator end() const;

   private:
    friend class DataLoader;
    Split(DataLoader* loader, std::int64_t part, std::int64_t parts, std::vector<Device> devices)
        : loader_(loader), part_(part), parts_(parts), devices_(std::move(devices)) {}
    DataLoader* loader_;
    std::int64_t part_, parts_;
    std::vector<Device> devices_;
  };
  /// Starts an epoch: each begin() reshuffles (seed + the number of epochs begun before) and,
  /// with prefetch, starts the thread that gathers the epoch's batches. Rethrows an error of
  /// that thread for the first batch.
  iterator begin();
  iterator end() const;
  /// The next epoch begun (begin(), shard(), split()) is epoch `epochs_begun`, shuffled with
  /// seed + epochs_begun, as in a loader that has begun that many epochs: a resumed training
  /// run continues with the order the interrupted run would have had.
  void set_epoch(std::uint64_t epochs_begun) { epoch_ = epochs_begun; }
  /// The epochs begun so far (or set by set_epoch).
  std::uint64_t epochs_begun() const { return epoch_; }
  /// Batch i of the epoch begun last (begin(), shard(), split()); before the first, of the
  /// examples in their stored order, unshuffled (set_epoch changes nothing until an epoch
  /// begins). Error for an i outside [0, batches()).
  Batch batch(std::int64_t i) const;
  /// Examples in batch i: batch_size, or fewer for a short last batch.
  std::int64_t batch_length(std::int64_t i) const;

  /// Part `part` of `parts` of every batch, for data-parallel training across processes:
  /// each process gathers only the rows it trains on. A batch of L rows is cut in order into
  /// `parts` slices of L / parts rows, the first L % parts one row longer, so the slices of
  /// parts 0 .. parts-1, stacked, are the whole batch (same epoch order and values). A part
  /// can be empty when L < parts. Error unless 0 <= part < parts.
  ///
  ///   for (const data::Batch& mine : train.shard(rank, world_size)) { ... }
  Shard shard(std::int64_t part, std::int64_t parts);
  /// Part `part` of `parts` of every batch (as shard() cuts it), cut again in the same way
  /// over `devices`: for each batch, piece r holds the rows replica r on devices[r] trains
  /// on, the pieces stacked are the part (same epoch order and values). Each piece is
  /// gathered straight into memory of its device when the host writes that memory (the
  /// plain CPU and logical CPU devices), by that device's own work queue when it has one
  /// (so each device gathers its rows on its own core, in order before the work queued
  /// after), so that moving it there (to_device, Trainer::prepare_batch) copies nothing;
  /// into host memory otherwise (a GPU's piece, pinned). A piece can be empty when the part has
  /// fewer rows than devices. Error unless 0 <= part < parts and `devices` is not empty.
  /// Pieces gathered into device memory are gathered when the iterator reaches their batch,
  /// never ahead by the prefetch thread: a device may be recording a graph then, which
  /// another thread's work must not enter. (A gather queued on a logical device costs the
  /// host only an allocation; without queues it runs on the iterating thread, as with
  /// prefetch 0.)
  ///
  ///   for (const std::vector<data::Batch>& pieces : train.split(rank, world_size, devices))
  Split split(std::int64_t part, std::int64_t parts, std::vector<Device> devices);

 private:
  // Batch i of `order`, gathered from `sources` (this loader's, or a prefetch thread's
  // handles to them): images and labels, or any tensors. Only the rows of part `part` of
  // `parts` (see shard()), one piece per device of `devices` (see split()), or one piece on
  // the host when `devices` is empty.
  std::vector<Batch> gather(const std::vector<Tensor>& sources,
                            const std::vector<std::int64_t>& order, std::int64_t i,
                            std::int64_t part = 0, std::int64_t parts = 1,
                            const std::vector<Device>& devices = {}) const;
  iterator begin_epoch(std::int64_t part, std::int64_t parts, std::vector<Device> devices = {});
  // Rows [start, start + len) of `order` into a batch in memory of `home` (a CPU device),
  // gathered by the calling thread, or by work queued on `home` when `on_device` (Note
  // [Gathering on the devices] in loader.cpp).
  Batch gather_rows(const std::vector<Tensor>& sources, const std::vector<std::int64_t>& order,
                    std::int64_t start, std::int64_t len, Device home, bool on_device) const;
  // images and labels (images_ true), or the tensors of a general loader.
  std::vector<Tensor> sources_;
  // Each source's count of in-place writes when the loader last waited for its device.
  std::vector<std::uint64_t> sources_written_;
  bool images_ = true;
  LoaderOptions options_;
  std::int64_t n_ = 0, example_numel_ = 0;
  std::uint64_t epoch_ = 0;
  std::int64_t prefetch_ = 0;
  // The current epoch's order; a new vector each epoch, so a prefetch thread keeps its own.
  std::shared_ptr<const std::vector<std::int64_t>> order_;
};

/// A batch the DataLoader made, on `device`: every tensor of it (each itself when it is
/// already there), as Trainer::prepare_batch moves it. Unlike Tensor::to, it never waits for a
/// logical CPU device's queue: only the loader's thread wrote a fresh batch (a piece that
/// split() had gathered by a device's queue is copied in that queue's order). For a batch you
/// have changed with tensor ops since, use .to(). Writes to the batch afterwards (its device's
/// ops, or the host through data()) come after the copy has read it. Copies are counted in the
/// transfer ledger.
TESSERA_API Batch to_device(const Batch& batch, Device device,
                            std::source_location where = std::source_location::current());

}  // namespace tessera::data

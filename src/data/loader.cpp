// DataLoader: host-side gather and scaling into (pinned) float32 batches.
#include "tessera/data/loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "core/check.h"
#include "core/copy.h"
#include "core/host_fill.h"
#include "core/tensor_impl.h"
#include "data/prefetcher.h"
#include "tessera/device.h"

namespace tessera::data {
namespace {

// Note [Gathering rows ahead]
// A shuffled batch reads its images' rows from random places of a data set larger than the
// caches, so gathering one waited on memory for each row: perf put most of the loop's time
// on the first load of a row and of its label (about 45 ms of the host's time per
// Fashion-MNIST epoch, time the host takes from the devices' cores when they own them all).
// Asking for the row kRowsAhead rows later while converting this one hides that latency.
constexpr std::int64_t kRowsAhead = 4;

// Starts loading [p, p + bytes) into the caches; a hint only, never a fault.
inline void prefetch_bytes(const void* p, std::int64_t bytes) {
#if defined(__GNUC__)
  const char* c = static_cast<const char*>(p);
  for (std::int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace

DataLoader::DataLoader(Tensor images, Tensor labels, LoaderOptions options) : options_(options) {
  detail::check_defined(images, "DataLoader", "images");
  detail::check_defined(labels, "DataLoader", "labels");
  TESSERA_CHECK(images.dtype() == kUInt8, DtypeError,
                "[DataLoader] images must be uint8 [N, ...] (as read_idx returns), got {} {}; "
                "for images of other dtypes use DataLoader({{images, labels}}, options)",
                dtype_name(images.dtype()), images.shape().str());
  TESSERA_CHECK(images.dim() >= 2, ShapeError,
                "[DataLoader] images must be uint8 [N, ...] (N examples along dim 0, each at "
                "least a vector), got shape {}; reshape them to [N, 1] for one value each",
                images.shape().str());
  TESSERA_CHECK(!is_floating(labels.dtype()), DtypeError,
                "[DataLoader] labels must be integers (class indices), got {} {}; convert them "
                "with .to(kInt64)",
                dtype_name(labels.dtype()), labels.shape().str());
  TESSERA_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0), ShapeError,
                "[DataLoader] labels must be [{}], one per image, got shape {}", images.size(0),
                labels.shape().str());
  TESSERA_CHECK(images.device().is_cpu() && labels.device().is_cpu(), DeviceError,
                "[DataLoader] images and labels stay in host memory (batches move to the device "
                "in Trainer::prepare_batch); got {} and {}",
                images.device().str(), labels.device().str());
  TESSERA_CHECK(images.size(0) > 0, ShapeError,
                "[DataLoader] the data set is empty (images {}): there is nothing to train or "
                "evaluate on, and a loop over it would report a loss of 0. Check the data",
                images.shape().str());
  TESSERA_CHECK(options_.batch_size > 0, Error, "[DataLoader] batch_size ({}) must be positive",
                options_.batch_size);
  // A NaN or infinite mean or std made every batch NaN, infinite or zero, with no error.
  TESSERA_CHECK(std::isfinite(options_.mean) && std::isfinite(options_.std) && options_.std > 0,
                Error,
                "[DataLoader] mean ({}) and std ({}) must be finite numbers and std positive: "
                "images are normalized as (pixel / 255 - mean) / std",
                options_.mean, options_.std);
  TESSERA_CHECK(options_.prefetch >= -1, Error,
                "[DataLoader] prefetch ({}) must be -1 (2 with a GPU, else 0), 0 (each batch "
                "gathered on the iterating thread) or a number of batches to gather ahead",
                options_.prefetch);
  // Note [Prefetching batches] in prefetcher.cpp: why a machine without a GPU gets none.
  prefetch_ = options_.prefetch >= 0 ? options_.prefetch : (num_gpus() > 0 ? 2 : 0);
  sources_ = {images.contiguous(), labels.to(kInt64).contiguous()};
  // Batches are gathered on the host from here on: wait once for any queued work that
  // produced the tensors (on a logical CPU device).
  for (const Tensor& t : sources_) {
    synchronize(t.device());
    sources_written_.push_back(detail::impl_of(t).storage->version);
  }
  n_ = images.size(0);
  example_numel_ = n_ == 0 ? 0 : images.numel() / n_;
  auto order = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n_));
  std::iota(order->begin(), order->end(), 0);
  order_ = std::move(order);
}

DataLoader::DataLoader(std::vector<Tensor> tensors, LoaderOptions options)
    : images_(false), options_(options) {
  TESSERA_CHECK(!tensors.empty(), Error, "[DataLoader] needs at least one tensor to batch");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = "tensors[" + std::to_string(i) + "]";
    detail::check_defined(tensors[i], "DataLoader", name.c_str());
    TESSERA_CHECK(tensors[i].device().is_cpu(), DeviceError,
                  "[DataLoader] {} is on {}; the tensors stay in host memory (batches move to "
                  "the device in Trainer::prepare_batch)",
                  name, tensors[i].device().str());
    TESSERA_CHECK(tensors[i].dim() >= 1, ShapeError,
                  "[DataLoader] {} is 0-dim; every tensor holds the examples along dim 0 "
                  "(reshape a single value to [1])",
                  name);
  }
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    TESSERA_CHECK(tensors[i].size(0) == tensors[0].size(0), ShapeError,
                  "[DataLoader] every tensor holds the examples along dim 0, so their sizes "
                  "there must agree: tensors[0] is {}, tensors[{}] is {}",
                  tensors[0].shape().str(), i, tensors[i].shape().str());
  }
  TESSERA_CHECK(tensors[0].size(0) > 0, ShapeError,
                "[DataLoader] the data set is empty (tensors[0] {}): there is nothing to train "
                "or evaluate on. Check the data",
                tensors[0].shape().str());
  TESSERA_CHECK(options_.batch_size > 0, Error, "[DataLoader] batch_size ({}) must be positive",
                options_.batch_size);
  TESSERA_CHECK(options_.prefetch >= -1, Error,
                "[DataLoader] prefetch ({}) must be -1 (2 with a GPU, else 0), 0 (each batch "
                "gathered on the iterating thread) or a number of batches to gather ahead",
                options_.prefetch);
  prefetch_ = options_.prefetch >= 0 ? options_.prefetch : (num_gpus() > 0 ? 2 : 0);
  for (const Tensor& t : tensors) sources_.push_back(t.contiguous());
  for (const Tensor& t : sources_) {
    synchronize(t.device());
    sources_written_.push_back(detail::impl_of(t).storage->version);
  }
  n_ = tensors[0].size(0);
  auto order = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n_));
  std::iota(order->begin(), order->end(), 0);
  order_ = std::move(order);
}

std::int64_t DataLoader::batches() const {
  const std::int64_t b = options_.batch_size;
  // Not (n + b - 1) / b: that overflows for a batch_size near INT64_MAX ("all in one batch").
  return n_ / b + (!options_.drop_last && n_ % b != 0 ? 1 : 0);
}

DataLoader::iterator DataLoader::begin() { return begin_epoch(0, 1); }

namespace {

void check_part(std::int64_t part, std::int64_t parts, const char* op) {
  TESSERA_CHECK(parts >= 1 && part >= 0 && part < parts, Error,
                "[DataLoader::{}] part {} of {} does not exist: parts must be at least 1 and "
                "part in [0, {})",
                op, part, parts, parts);
}

// The rows [start, start + len) of `rows` rows from `begin` that piece `piece` of `pieces`
// holds: `rows` / `pieces` each, the first `rows` % `pieces` one more.
std::pair<std::int64_t, std::int64_t> cut(std::int64_t begin, std::int64_t rows, std::int64_t piece,
                                          std::int64_t pieces) {
  const std::int64_t base = rows / pieces, extra = rows % pieces;
  return {begin + piece * base + std::min(piece, extra), base + (piece < extra ? 1 : 0)};
}

}  // namespace

DataLoader::Shard DataLoader::shard(std::int64_t part, std::int64_t parts) {
  check_part(part, parts, "shard");
  return Shard(this, part, parts);
}

DataLoader::Split DataLoader::split(std::int64_t part, std::int64_t parts,
                                    std::vector<Device> devices) {
  check_part(part, parts, "split");
  TESSERA_CHECK(!devices.empty(), Error,
                "[DataLoader::split] needs at least one device to cut the batches over");
  return Split(this, part, parts, std::move(devices));
}

DataLoader::Split::iterator DataLoader::Split::begin() {
  return iterator(loader_->begin_epoch(part_, parts_, devices_));
}

DataLoader::Split::iterator DataLoader::Split::end() const { return iterator(loader_->end()); }

DataLoader::iterator DataLoader::Shard::begin() { return loader_->begin_epoch(part_, parts_); }

DataLoader::iterator DataLoader::Shard::end() const { return loader_->end(); }

std::int64_t DataLoader::batch_length(std::int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < batches(), Error,
                "[DataLoader::batch_length] batch {} does not exist: an epoch has {} batches", i,
                batches());
  return std::min(options_.batch_size, n_ - i * options_.batch_size);
}

DataLoader::iterator DataLoader::begin_epoch(std::int64_t part, std::int64_t parts,
                                             std::vector<Device> devices) {
  // The epoch's gathers read the sources on the host (or on other devices' queues): an
  // in-place op on a source since the last wait (new labels between epochs) may still be
  // queued on its device, so the device is waited for, once; untouched sources cost nothing.
  sources_written_.resize(sources_.size(), 0);
  for (std::size_t s = 0; s < sources_.size(); ++s) {
    const std::uint64_t written = detail::impl_of(sources_[s]).storage->version;
    if (written == sources_written_[s]) continue;
    if (detail::queued_work_pending(sources_[s].device())) synchronize(sources_[s].device());
    sources_written_[s] = written;
  }
  auto order = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(n_));
  std::iota(order->begin(), order->end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 gen(options_.seed + epoch_);
    std::shuffle(order->begin(), order->end(), gen);
  }
  order_ = std::move(order);
  ++epoch_;
  // Pieces gathered into device memory are gathered in iteration, on the iterating thread:
  // a prefetch thread's gather into a device that the Trainer is recording a graph on was
  // refused (GraphCaptureError, at random). Queued on a logical device, that gather costs the
  // host only an allocation; without queues (the plain CPU, TESSERA_CPU_ASYNC=0) it runs on
  // the iterating thread, as with prefetch 0.
  const bool into_devices = std::any_of(devices.begin(), devices.end(),
                                        [](Device d) { return detail::host_writes_memory_of(d); });
  if (prefetch_ == 0 || batches() == 0 || into_devices) {
    return iterator(this, 0, order_, part, parts, std::move(devices));
  }
  // The thread gathers with its own copy of the loader: handles to the same sources, this
  // epoch's order, the options (Note [Prefetching batches] in prefetcher.cpp). An iterator
  // may outlive its loader; its thread, still gathering ahead, then read the freed loader.
  auto prefetcher = std::make_shared<detail::Prefetcher>(
      batches(), prefetch_, epoch_ - 1,  // counted from 0, as set_epoch and the seed count
      [self = std::make_shared<const DataLoader>(*this), part, parts, devices](std::int64_t i) {
        return self->gather(self->sources_, *self->order_, i, part, parts, devices);
      });
  return iterator(this, 0, order_, part, parts, std::move(devices), std::move(prefetcher));
}

DataLoader::iterator DataLoader::end() const { return iterator(this, batches()); }

Batch DataLoader::batch(std::int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < batches(), Error,
                "[DataLoader::batch] batch {} does not exist: an epoch has {} batches (0 to {})", i,
                batches(), batches() - 1);
  return gather(sources_, *order_, i).front();
}

// Note [Gathering on the devices]
// With logical CPU devices that own every core, the host thread that gathered each replica's
// piece of a batch took that time from one device's core, and the other device then waited
// for that one at the step's all-reduce: the host's gather cost the step about twice its
// time. split() instead queues each CPU device's piece on that device
// (fill_in_device_order): each device gathers the rows it trains on, on its own core, right
// before the step that reads them, and the host only allocates the piece and copies its row
// numbers. The piece is fresh memory of its device, so nothing queued earlier reads it, and
// the step's ops, queued after it, see it filled. Without work queues (the plain CPU,
// TESSERA_CPU_ASYNC=0) the fill runs on the calling thread as before; a GPU's piece is still
// gathered on the host, into pinned memory. A single-device loop (begin(), shard()) keeps
// gathering on the host: there a device that owns part of the cores leaves the host thread
// a core of its own, and Trainer::prepare_batch copies the batch to the device without a
// host wait (to_device).
// The piece's memory is an op output's (make_output), and the queued fill holds it only as
// kernels do (borrowed, Backend::fill_from_host): once the host drops a piece, the piece
// after next takes its block, queued behind the step that read it. When the fill owned its
// piece, a block came back only with every task the host had queued by the time the fill
// ran (256 per device when it feeds two), so with the step recorded (--graph) each device
// gathered into memory last used some 30 steps before and out of its caches: two logical
// devices spent about twice as long in the gather as now
// (docs/benchmarks.md, 2026-11-26).

std::vector<Batch> DataLoader::gather(const std::vector<Tensor>& sources,
                                      const std::vector<std::int64_t>& order, std::int64_t i,
                                      std::int64_t part, std::int64_t parts,
                                      const std::vector<Device>& devices) const {
  // The part's slice of the batch: rows [start, start + len) of the epoch's order.
  const std::int64_t whole = std::min(options_.batch_size, n_ - i * options_.batch_size);
  const auto [start, len] = cut(i * options_.batch_size, whole, part, parts);
  if (devices.empty()) return {gather_rows(sources, order, start, len, cpu(), false)};
  // Note [Data-parallel steps] in data_parallel.cpp: each device's piece of the part.
  std::vector<Batch> pieces;
  const auto k = static_cast<std::int64_t>(devices.size());
  for (std::int64_t r = 0; r < k; ++r) {
    const auto [from, rows] = cut(start, len, r, k);
    const Device d = devices[static_cast<std::size_t>(r)];
    const bool on_device = detail::host_writes_memory_of(d);  // Note [Gathering on the devices]
    pieces.push_back(gather_rows(sources, order, from, rows, on_device ? d : cpu(), on_device));
  }
  return pieces;
}

namespace {

// Rows `rows` of `images` (uint8, example_numel bytes each) scaled into x (float32) and
// their labels into y (int64).
void fill_images(const Tensor& images, const Tensor& labels, const std::vector<std::int64_t>& rows,
                 std::int64_t example_numel, float scale, float shift, const Tensor& x,
                 const Tensor& y) {
  const auto* src = reinterpret_cast<const std::uint8_t*>(detail::impl_of(images).data());
  const auto* label = reinterpret_cast<const std::int64_t*>(detail::impl_of(labels).data());
  auto* xs = reinterpret_cast<float*>(detail::impl_of(x).data());
  auto* ys = reinterpret_cast<std::int64_t*>(detail::impl_of(y).data());
  const auto len = static_cast<std::int64_t>(rows.size());
  for (std::int64_t k = 0; k < len; ++k) {
    // Note [Gathering rows ahead]: start reading a later row now.
    if (k + kRowsAhead < len) {
      const std::int64_t later = rows[static_cast<std::size_t>(k + kRowsAhead)];
      prefetch_bytes(src + later * example_numel, example_numel);
      prefetch_bytes(label + later, 1);
    }
    const std::int64_t e = rows[static_cast<std::size_t>(k)];
    const std::uint8_t* px = src + e * example_numel;
    float* out = xs + k * example_numel;
    for (std::int64_t j = 0; j < example_numel; ++j)
      out[j] = static_cast<float>(px[j]) * scale - shift;
    ys[k] = label[e];
  }
}

// Rows `rows` of each of `sources`, byte for byte, into the matching tensor of `out`.
void fill_rows(const std::vector<Tensor>& sources, const std::vector<std::int64_t>& rows,
               const std::vector<Tensor>& out) {
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const Tensor& t = sources[s];
    const std::size_t row = t.size(0) == 0 ? 0 : t.nbytes() / static_cast<std::size_t>(t.size(0));
    const char* src = static_cast<const char*>(detail::impl_of(t).data());
    char* dst = static_cast<char*>(detail::impl_of(out[s]).data());
    for (std::size_t k = 0; k < rows.size(); ++k) {
      std::memcpy(dst + k * row, src + static_cast<std::size_t>(rows[k]) * row, row);
    }
  }
}

}  // namespace

Batch DataLoader::gather_rows(const std::vector<Tensor>& sources,
                              const std::vector<std::int64_t>& order, std::int64_t start,
                              std::int64_t len, Device home, bool on_device) const {
  // Page-locked when there is a GPU, so prepare_batch's copy is asynchronous.
  const bool pinned = num_gpus() > 0 && home == cpu();
  // Gathered on the device, the piece is written first by the fill queued next there, so it
  // may take memory that work queued before still uses, as an op's output does: the memory
  // of the piece before last, which the device has just read (Note [Gathering on the
  // devices]). Gathered here, it needs memory that nothing queued uses any more.
  const auto allocate = [&](const Shape& shape, Dtype dtype) {
    return on_device ? detail::make_output(shape, dtype, home, "DataLoader")
                     : detail::make_tensor(shape, dtype, home, "DataLoader", pinned);
  };
  std::vector<Tensor> out;
  if (images_) {
    Shape xs = sources[0].shape();
    xs[0] = len;
    if (xs.size() == 3) xs.insert(1, 1);  // [B, H, W] -> [B, 1, H, W]
    out.push_back(allocate(xs, kFloat32));
    out.push_back(allocate({len}, kInt64));
  } else {
    for (const Tensor& t : sources) {
      Shape shape = t.shape();
      shape[0] = len;
      out.push_back(allocate(shape, t.dtype()));
    }
  }
  const auto first = order.begin() + start;
  // Writes the tensors it is handed: `out` itself, or handles to its memory that do not keep
  // it when the fill is queued (fill_in_device_order).
  std::function<void(const std::vector<Tensor>&)> fill;
  if (images_) {
    fill = [sources, rows = std::vector<std::int64_t>(first, first + len), numel = example_numel_,
            scale = static_cast<float>(1.0 / (255.0 * options_.std)),
            shift =
                static_cast<float>(options_.mean / options_.std)](const std::vector<Tensor>& to) {
      fill_images(sources[0], sources[1], rows, numel, scale, shift, to[0], to[1]);
    };
  } else {
    fill = [sources, rows = std::vector<std::int64_t>(first, first + len)](
               const std::vector<Tensor>& to) { fill_rows(sources, rows, to); };
  }
  if (on_device) {
    detail::fill_in_device_order(home, "DataLoader", "gathering a batch", out, std::move(fill));
  } else {
    fill(out);
  }
  return Batch::of(std::move(out));
}

DataLoader::iterator::iterator(const DataLoader* loader, std::int64_t index,
                               std::shared_ptr<const std::vector<std::int64_t>> order,
                               std::int64_t part, std::int64_t parts, std::vector<Device> devices,
                               std::shared_ptr<detail::Prefetcher> prefetcher)
    : loader_(loader),
      index_(index),
      order_(std::move(order)),
      part_(part),
      parts_(parts),
      devices_(std::move(devices)),
      prefetcher_(std::move(prefetcher)) {
  load();
}

void DataLoader::iterator::load() {
  if (index_ >= loader_->batches()) {
    pieces_.assign(1, Batch{});
    prefetcher_.reset();  // the epoch is over: its thread has finished; join it
  } else {
    pieces_ = prefetcher_
                  ? prefetcher_->next(index_)
                  : loader_->gather(loader_->sources_, *order_, index_, part_, parts_, devices_);
  }
}

DataLoader::iterator& DataLoader::iterator::operator++() {
  ++index_;
  load();
  return *this;
}

namespace {

// t on `device`; only the loader's thread wrote t (see to_device).
Tensor host_filled_to(const Tensor& t, Device device, const std::source_location& where) {
  if (t.device() == device) return t;
  Tensor out = detail::make_tensor(t.shape(), t.dtype(), device, "to_device");
  detail::copy_data(t, out, "to_device", where, detail::SourceWriters::kHostOnly);
  return out;
}

}  // namespace

Batch to_device(const Batch& batch, Device device, std::source_location where) {
  Batch out;
  out.more.resize(batch.more.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].defined()) out[i] = host_filled_to(batch[i], device, where);
  }
  return out;
}

// ---- Batch ----

Batch Batch::of(std::vector<Tensor> tensors) {
  TESSERA_CHECK(!tensors.empty(), Error, "[Batch::of] a batch holds at least one tensor");
  Batch b;
  b.x = std::move(tensors[0]);
  if (tensors.size() > 1) b.y = std::move(tensors[1]);
  for (std::size_t i = 2; i < tensors.size(); ++i) b.more.push_back(std::move(tensors[i]));
  return b;
}

Tensor& Batch::operator[](std::size_t i) {
  return const_cast<Tensor&>(static_cast<const Batch&>(*this)[i]);
}

const Tensor& Batch::operator[](std::size_t i) const {
  TESSERA_CHECK(i < size(), Error,
                "[Batch] there is no tensor {} in a batch of {} (x, y and {} in more)", i, size(),
                more.size());
  return i == 0 ? x : i == 1 ? y : more[i - 2];
}

std::vector<Tensor> Batch::tensors() const {
  std::vector<Tensor> all{x, y};
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

std::int64_t Batch::examples() const {
  for (std::size_t i = 0; i < size(); ++i) {
    const Tensor& t = (*this)[i];
    if (t.defined() && t.dim() >= 1) return t.size(0);
  }
  return 0;
}

}  // namespace tessera::data

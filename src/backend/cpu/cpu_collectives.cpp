// Collectives across logical CPU devices, run on the devices' own queues. See
// Note [CPU collectives].
#include <algorithm>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/spin_wait.h"
#include "core/dispatch_half.h"
#include "core/half_rows.h"
#include "core/tensor_impl.h"

// Note [CPU collectives]
// Logical CPU devices share one address space, so a collective needs no messages: each
// device's queue gets one task, and the k tasks meet at a barrier (like the kernels of an
// NCCL call, which also wait for every rank). Task j then owns chunk j of the flattened
// elements: it reduces that chunk over every input and writes it into every output (for a
// gather, it copies input j into slot j of every output). Chunks are disjoint and each
// element is read before it is written, so all-reduce and broadcast work in place. A second
// barrier holds every device until all chunks are written, so no device runs later work
// on an output another task is still filling. The host only queues; it never waits. Each
// task goes to its device's current stream (a side stream under a StreamGuard). Devices
// without queues (TESSERA_CPU_ASYNC=0) run the k chunks one after another on the caller.
//
// Note [Half collectives]
// bfloat16 and float16 tensors move as they are (2 bytes an element, as NCCL and gloo move
// them). How their sums round differs by transport, within a rounding per device:
// - logical CPU devices add every input in float32 and round once, after the division of a
//   mean, so a sum rounds as one addition of the k values would;
// - MPI (mpi_collectives.cpp) sums with an op of tessera's (MPI has no half types: the
//   values travel as MPI_UINT16_T and each addition goes through float32), rounding after
//   each addition as NCCL does. A mean sums float32 copies instead (twice the bytes) and
//   rounds once after the division, as logical devices do: dividing each rank's value
//   first overflowed too (65504 / 3 is 21840 in float16, and three of those are infinity);
// - NCCL adds in its own order, rounding after each addition, and its mean (ncclAvg)
//   multiplies each input by 1/k first, so on three or more GPUs a float16 mean near 65504
//   can overflow (never run: no machine with two GPUs has been lent).
// Both CPU transports convert a block at a time with the kernel level's rows
// (core/half_rows.h): F16C for float16 where the CPU has it. Element by element, a float16
// all-reduce took 15x a float32 one of as many elements on two logical devices, and 4-10x
// over MPI (docs/benchmarks.md, "Half-precision collectives").

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

struct Chunk {
  std::int64_t begin, end;
};

// Elements [begin, end) of `n` for part j of k.
Chunk chunk_of(std::int64_t n, int k, int j) {
  const std::int64_t base = n / k, extra = n % k;
  const std::int64_t begin = j * base + std::min<std::int64_t>(j, extra);
  return {begin, begin + base + (j < extra ? 1 : 0)};
}

// out[e] = sum (or mean) over i of in[i][e], for e in [begin, end), where any out may be an
// in: block by block through a buffer, so every element is read before any is written, and
// the loops over a block vectorize (the pointers are loaded once, not per element).
template <typename T>
void reduce_range(const std::vector<const T*>& in, const std::vector<T*>& out, std::int64_t begin,
                  std::int64_t end, bool mean) {
  constexpr std::int64_t kBlock = 2048;
  const auto k = static_cast<int>(in.size());
  T acc[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const std::int64_t len = std::min(kBlock, end - b);
    std::copy(in[0] + b, in[0] + b + len, acc);
    for (int i = 1; i < k; ++i) {
      const T* src = in[i] + b;
      if constexpr (std::is_integral_v<T>) {  // wraps like the CPU's add, never undefined
        using U = std::make_unsigned_t<T>;
        for (std::int64_t e = 0; e < len; ++e) {
          acc[e] = static_cast<T>(static_cast<U>(acc[e]) + static_cast<U>(src[e]));
        }
      } else {
        for (std::int64_t e = 0; e < len; ++e) acc[e] += src[e];
      }
    }
    if (mean) {
      for (std::int64_t e = 0; e < len; ++e) acc[e] = static_cast<T>(acc[e] / static_cast<T>(k));
    }
    for (T* dst : out) std::copy(acc, acc + len, dst + b);
  }
}

// The same for bfloat16 and float16, added in float32 and rounded once (Note [Half
// collectives]); the conversions are the kernel level's rows (core/half_rows.h).
template <typename H>
void reduce_half_range(const std::vector<const H*>& in, const std::vector<H*>& out,
                       std::int64_t begin, std::int64_t end, bool mean) {
  constexpr std::int64_t kBlock = 2048;
  const auto k = static_cast<int>(in.size());
  float acc[kBlock], next[kBlock];
  H rounded[kBlock];
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const std::int64_t len = std::min(kBlock, end - b);
    rows_to_float(in[0] + b, acc, len);
    for (int i = 1; i < k; ++i) {
      rows_to_float(in[i] + b, next, len);
      for (std::int64_t e = 0; e < len; ++e) acc[e] += next[e];
    }
    if (mean) {
      for (std::int64_t e = 0; e < len; ++e) acc[e] /= static_cast<float>(k);
    }
    rows_from_float(acc, rounded, len);
    for (H* dst : out) std::copy(rounded, rounded + len, dst + b);
  }
}

template <typename T>
void reduce_any_range(const std::vector<const T*>& in, const std::vector<T*>& out,
                      std::int64_t begin, std::int64_t end, bool mean) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    reduce_half_range(in, out, begin, end, mean);
  } else {
    reduce_range(in, out, begin, end, mean);
  }
}

template <typename T>
void run_chunk(const CollectiveCall& call, int j) {
  const int k = static_cast<int>(call.inputs.size());
  std::vector<const T*> in;
  for (const Tensor& t : call.inputs) in.push_back(data_of<T>(t));
  switch (call.kind) {
    case CollectiveKind::kAllReduce: {
      const Chunk c = chunk_of(call.inputs[0].numel(), k, j);
      std::vector<T*> out;
      for (const Tensor& t : call.outputs) out.push_back(data_of<T>(t));
      reduce_any_range(in, out, c.begin, c.end, call.mean);
      break;
    }
    case CollectiveKind::kBroadcast: {
      const Chunk c = chunk_of(call.inputs[0].numel(), k, j);
      const T* src = data_of<T>(call.inputs[call.root]);
      for (int i = 0; i < k; ++i) {
        if (data_of<T>(call.outputs[i]) == src) continue;
        std::copy(src + c.begin, src + c.end, data_of<T>(call.outputs[i]) + c.begin);
      }
      break;
    }
    case CollectiveKind::kAllGather: {
      const std::int64_t n = call.inputs[j].numel();
      const T* src = data_of<T>(call.inputs[j]);
      for (int i = 0; i < k; ++i) std::copy(src, src + n, data_of<T>(call.outputs[i]) + j * n);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      const std::int64_t n = call.outputs[j].numel();
      // Rows [j*n, (j+1)*n) of the sum land at the start of output j.
      std::vector<const T*> rows;
      for (const T* p : in) rows.push_back(p + j * n);
      reduce_any_range(rows, {data_of<T>(call.outputs[j])}, 0, n, call.mean);
      break;
    }
  }
}

void run_chunk_any(const CollectiveCall& call, int j) {
  dispatch_dtype_with_half(call.inputs[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      // Bool moves as bytes (the front end refuses bool reductions).
      run_chunk<std::uint8_t>(call, j);
    } else {
      run_chunk<T>(call, j);
    }
  });
}

// What the k queued tasks share: the call (its tensors stay alive until the last task ends)
// and the two barriers.
struct Meeting {
  explicit Meeting(CollectiveCall c)
      : call(std::move(c)),
        arrived(static_cast<int>(call.inputs.size())),
        done(static_cast<int>(call.inputs.size())) {}
  CollectiveCall call;
  Rendezvous arrived, done;
};

}  // namespace

void CpuBackend::collective(const CollectiveCall& call) {
  const int k = static_cast<int>(call.inputs.size());
  const int first = call.inputs[0].device().index();
  if (queue(first) == nullptr) {
    const auto all_chunks = [call, k] {
      for (int j = 0; j < k; ++j) run_chunk_any(call, j);
    };
    if (k == 1 || capturing(first)) {
      // One kernel on the device's current stream (or in the devices' shared recording).
      launch(first, all_chunks);
      return;
    }
    // One kernel on the calling thread, which runs these devices' default streams, once
    // every device's current stream (a side stream, perhaps) has made its tensors.
    for (const Tensor& t : call.inputs) wait_for_current_stream(t.device().index());
    const InlineThreads threads(kernel_threads());
    all_chunks();
    return;
  }
  auto meeting = std::make_shared<Meeting>(call);
  // Queued as one step, so every queue sees this and other threads' cross-device work in
  // one order (Note [Cross-device submissions]).
  const auto lock = hold_cross_device_submissions();
  for (int j = 0; j < k; ++j) {
    launch(call.inputs[j].device().index(), [meeting, j] {
      meeting->arrived.arrive_and_wait();
      run_chunk_any(meeting->call, j);
      meeting->done.arrive_and_wait();
    });
  }
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

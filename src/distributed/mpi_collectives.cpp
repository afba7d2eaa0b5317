// Collectives on host memory over MPI (mpi.h): what the CPU backend's kernels call.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/dispatch.h"
#include "core/half_rows.h"
#include "distributed/mpi.h"
#include "distributed/mpi_internal.h"

namespace tessera::distributed {
namespace {

MPI_Datatype mpi_type(Dtype dtype) {
  switch (dtype) {
    case kBool:  // moved as bytes; the front end refuses to reduce bools
    case kUInt8:
      return MPI_UINT8_T;
    case kInt32:
      return MPI_INT32_T;
    case kInt64:
      return MPI_INT64_T;
    case kFloat32:
      return MPI_FLOAT;
    case kFloat64:
      return MPI_DOUBLE;
    case kBFloat16:  // moved as their bits, summed by ops of our own (sum_op)
    case kFloat16:
      return MPI_UINT16_T;
  }
  TESSERA_INTERNAL_ASSERT(false, "unknown dtype {}", static_cast<int>(dtype));
  return MPI_BYTE;
}

// MPI counts are int: larger tensors would need derived datatypes, which nothing needs yet.
int mpi_count(std::int64_t count, const char* op) {
  TESSERA_CHECK(count <= INT_MAX, Error,
                "[ProcessGroup::{}] {} elements is more than MPI's int count allows ({}); "
                "split the tensor into parts of at most {} elements",
                op, count, INT_MAX, INT_MAX);
  return static_cast<int>(count);
}

constexpr std::int64_t kBlock = 1024;  // half values converted at a time (core/half_rows.h)

// Division, as the in-process collectives do (integers round like the CPU's division).
void divide(void* data, std::int64_t count, Dtype dtype, int by) {
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      T* p = static_cast<T*>(data);
      for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(by));
    }
  });
}

// The mean of half values: summed in float32 copies and rounded once after the division, as
// on logical CPU devices (Note [Half collectives] in cpu_collectives.cpp). Dividing each
// rank's value first would still overflow: 65504 / 3 rounds to 21840 in float16, and three
// of those round to infinity.
template <typename H>
void half_mean(const H* in, H* out, std::int64_t count, int n, MPI_Comm comm, int size) {
  std::vector<float> sums(static_cast<std::size_t>(count));
  for (std::int64_t b = 0; b < count; b += kBlock) {
    detail::rows_to_float(in + b, sums.data() + b, std::min(kBlock, count - b));
  }
  TESSERA_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), n, MPI_FLOAT, MPI_SUM, comm));
  for (float& v : sums) v /= static_cast<float>(size);
  for (std::int64_t b = 0; b < count; b += kBlock) {
    detail::rows_from_float(sums.data() + b, out + b, std::min(kBlock, count - b));
  }
}

// Open MPI's vectorized MPI_SUM saturates 8-bit unsigned sums (open-mpi/ompi#8045, in
// 32-byte blocks: 200 + 200 gave 255 or 144 by position); uint8 sums wrap as tessera's
// addition does, so they use an op of our own.
void add_wrapping_u8(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const std::uint8_t*>(in);
  auto* b = static_cast<std::uint8_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<std::uint8_t>(a[i] + b[i]);
}

// MPI has no half types (MPI 4.1 has none either): their bits move as uint16, and each
// addition goes through float32 and rounds back, as NCCL's do, a block at a time through the
// kernel level's conversions (element by element, float16 sums took 4-10x a float32 sum).
template <typename H>
void add_half(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const H*>(in);
  auto* b = static_cast<H*>(inout);
  float x[kBlock], y[kBlock];
  for (std::int64_t s = 0; s < *len; s += kBlock) {
    const std::int64_t n = std::min<std::int64_t>(kBlock, *len - s);
    detail::rows_to_float(a + s, x, n);
    detail::rows_to_float(b + s, y, n);
    for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
    detail::rows_from_float(y, b + s, n);
  }
}

MPI_Op op_of(MPI_User_function* f) {
  MPI_Op op = MPI_OP_NULL;
  TESSERA_MPI_CHECK(MPI_Op_create(f, /*commute=*/1, &op));
  return op;
}

MPI_Op sum_op(Dtype dtype) {
  switch (dtype) {
    case kUInt8: {
      static const MPI_Op wrapping = op_of(&add_wrapping_u8);
      return wrapping;
    }
    case kBFloat16: {
      static const MPI_Op bf16 = op_of(&add_half<detail::BFloat16>);
      return bf16;
    }
    case kFloat16: {
      static const MPI_Op f16 = op_of(&add_half<detail::Float16>);
      return f16;
    }
    default:
      return MPI_SUM;
  }
}

}  // namespace

void mpi_all_reduce(const void* in, void* out, std::int64_t count, Dtype dtype, bool mean,
                    int lane) {
  MPI_Comm comm = lane_comm(lane);
  int size = 1;
  TESSERA_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int n = mpi_count(count, "all_reduce");
  if (mean && size > 1 && dtype == kBFloat16) {
    half_mean(static_cast<const detail::BFloat16*>(in), static_cast<detail::BFloat16*>(out), count,
              n, comm, size);
    return;
  }
  if (mean && size > 1 && dtype == kFloat16) {
    half_mean(static_cast<const detail::Float16*>(in), static_cast<detail::Float16*>(out), count, n,
              comm, size);
    return;
  }
  const void* send = in == out ? MPI_IN_PLACE : in;
  TESSERA_MPI_CHECK(MPI_Allreduce(send, out, n, mpi_type(dtype), sum_op(dtype), comm));
  if (mean && size > 1) divide(out, count, dtype, size);
}

void mpi_broadcast(void* buffer, std::int64_t count, Dtype dtype, int root, int lane) {
  TESSERA_MPI_CHECK(
      MPI_Bcast(buffer, mpi_count(count, "broadcast"), mpi_type(dtype), root, lane_comm(lane)));
}

void mpi_all_gather(const void* in, void* out, std::int64_t count, Dtype dtype, int lane) {
  const int n = mpi_count(count, "all_gather");
  TESSERA_MPI_CHECK(
      MPI_Allgather(in, n, mpi_type(dtype), out, n, mpi_type(dtype), lane_comm(lane)));
}

void mpi_barrier() { TESSERA_MPI_CHECK(MPI_Barrier(host_comm())); }

std::vector<std::int64_t> mpi_exchange(const std::vector<std::int64_t>& mine) {
  MPI_Comm comm = host_comm();
  int size = 1;
  TESSERA_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(size));
  const int n = static_cast<int>(mine.size());
  TESSERA_MPI_CHECK(MPI_Allgather(mine.data(), n, MPI_INT64_T, all.data(), n, MPI_INT64_T, comm));
  return all;
}

void mpi_broadcast_bytes(void* buffer, std::size_t bytes, int root) {
  TESSERA_MPI_CHECK(MPI_Bcast(buffer, mpi_count(static_cast<std::int64_t>(bytes), "init"), MPI_BYTE,
                              root, host_comm()));
}

}  // namespace tessera::distributed

#include "backend/backend.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

Backend* backend_for(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? &cpu_backend() : cuda_backend();
}

void Backend::copy_from_cpu(const Tensor& src, const Tensor& dst) {
  copy_from_host(impl_of(src).data(), dst);
}

void Backend::fill_from_host(int index, std::vector<Tensor> /*outputs*/, HostFill /*fill*/) {
  TESSERA_INTERNAL_ASSERT(false,
                          "fill_from_host on device {} of a backend whose memory the "
                          "host does not write; ask fills_from_host() first",
                          index);
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
  }
  return "collective";
}

void Backend::collective(const CollectiveCall& call) {
  throw DeviceError(fmt::format(
      "[collective] {} devices have no collectives in this build; group devices of a kind "
      "that has them (logical CPU devices, or GPUs with NCCL)",
      call.inputs.empty() ? std::string("these") : call.inputs.front().device().str()));
}

void Backend::process_collective(const ProcessCollectiveCall& call) {
  throw DeviceError(fmt::format(
      "[ProcessGroup] {} tensors cannot be moved between processes in this build; use CPU "
      "tensors with the MPI backend, or GPU tensors with NCCL",
      call.input.device().str()));
}

Backend& backend_of(Device device) {
  Backend* backend = backend_for(device.kind());
  TESSERA_INTERNAL_ASSERT(backend != nullptr, "no backend for {}", device.str());
  return *backend;
}

}  // namespace tessera::detail

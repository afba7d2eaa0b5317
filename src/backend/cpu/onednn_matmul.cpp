// See onednn_matmul.h.
#include "backend/cpu/onednn_matmul.h"

#include <cstddef>
#include <vector>

namespace tessera::detail {

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine = [] {
    // oneDNN's own cache of primitives would keep up to 1024 more (100 MB and up) beside
    // tessera's (primitive_cache.h), which keeps the ones tessera makes. tessera is the
    // process's user of oneDNN primitives: its float32 products call dnnl_sgemm, which
    // keeps none.
    dnnl::set_primitive_cache_capacity(0);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return engine;
}

void run_onednn_matmul(const dnnl::matmul& primitive, const dnnl::matmul::primitive_desc& pd,
                       const void* src, const void* weights, void* dst) {
  // This thread's scratchpad, grown as needed.
  thread_local std::vector<std::byte> scratch;
  const dnnl::memory::desc scratch_desc = pd.scratchpad_desc();
  if (scratch.size() < scratch_desc.get_size()) scratch.resize(scratch_desc.get_size());
  const dnnl::engine& engine = cpu_engine();
  dnnl::stream stream(engine);
  const dnnl::memory scratchpad(scratch_desc, engine, scratch.data());
  const dnnl::memory a(pd.src_desc(), engine, const_cast<void*>(src));
  const dnnl::memory b(pd.weights_desc(), engine, const_cast<void*>(weights));
  const dnnl::memory c(pd.dst_desc(), engine, dst);
  primitive.execute(stream, {{DNNL_ARG_SRC, a},
                             {DNNL_ARG_WEIGHTS, b},
                             {DNNL_ARG_DST, c},
                             {DNNL_ARG_SCRATCHPAD, scratchpad}});
  stream.wait();
}

}  // namespace tessera::detail

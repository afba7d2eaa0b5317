// See onednn_conv.h.
#include "backend/cpu/conv/onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/onednn_matmul.h"
#include "backend/cpu/primitive_cache.h"
#include "core/check.h"

// Note [oneDNN convolutions]
// im2col + one GEMM per image (Note [CPU convolution] in im2col_conv.cpp) copies each image
// into columns 9 times its size (3x3) and hands dnnl_sgemm operands it packs again on every
// call: a 3x3 convolution of [8, 64, 32, 32] took 1.2x PyTorch's time one way and both ways,
// bfloat16 too. PyTorch's CPU convolutions are oneDNN's convolution primitives, the library
// tessera already links for its products: direct kernels on blocked layouts (channels in
// blocks of 16, nChw16c; weights OIhw16i16o), no columns. The convolutions of the im2col path
// (cpu_conv.cpp says which) now run on them. tessera's tensors stay NCHW: each call reorders
// its operands into the layouts the primitive chose (layouts `any`) and its outputs back
// (a tenth of a float32 call's time, a fifth of a bfloat16 one's); an operand read twice in one
// call (the output gradient, by the input- and weight-gradient primitives) is reordered once.
// - Primitives and their reorders are made once per shape, type, bias and thread count
//   (oneDNN splits the work for the threads at creation) and kept as the bfloat16 products'
//   are (PrimitiveCache); every call runs them with a scratchpad of its own (Note [One
//   primitive on several threads] in cpu_matmul.cpp), from any device's thread.
// - The blocked copies and scratchpads are the calling thread's memory (Note [Convolution
//   scratch kept per thread]), not tensors': running out is an OutOfMemoryError naming the op
//   (with_scratch_memory), as for im2col's columns.
// - float32: sums in oneDNN's order, not im2col's (last-bit differences); deterministic for a
//   given thread count (the weight gradient adds the threads' partial sums in a fixed
//   order). bfloat16 (AVX512-BF16): exact products summed in float32, each output, gradient
//   and bias gradient rounded once, as Note [bfloat16 convolution] has it.

namespace tessera::detail {
namespace {

using md = dnnl::memory::desc;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct ConvKey {
  std::int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw;
  OnednnConvType type;
  bool bias;
  int threads;
  auto tie() const { return std::tie(n, c, h, w, o, kh, kw, sh, sw, ph, pw, type, bias, threads); }
  bool operator<(const ConvKey& other) const { return tie() < other.tie(); }
};

ConvKey key_of(const ConvGeometry& g, OnednnConvType type, bool bias) {
  const Window2d& win = g.win;
  const int threads = omp_get_max_threads();
  return {g.n,          g.c,          g.h,       g.w,       g.o,  g.kh, g.kw,
          win.stride_h, win.stride_w, win.pad_h, win.pad_w, type, bias, threads};
}

// The convolution's tensors in tessera's layouts (`plain`) or in layouts oneDNN may choose.
struct ConvDescs {
  md x, w, b, y;

  ConvDescs(const ConvKey& k, bool plain) {
    const dt type = k.type == OnednnConvType::kBFloat16 ? dt::bf16 : dt::f32;
    const std::int64_t oh = (k.h + 2 * k.ph - k.kh) / k.sh + 1;
    const std::int64_t ow = (k.w + 2 * k.pw - k.kw) / k.sw + 1;
    x = md({k.n, k.c, k.h, k.w}, type, plain ? tag::nchw : tag::any);
    w = md({k.o, k.c, k.kh, k.kw}, type, plain ? tag::oihw : tag::any);
    b = md({k.o}, type, tag::x);
    y = md({k.n, k.o, oh, ow}, type, plain ? tag::nchw : tag::any);
  }
};

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvKey& k) {
  const ConvDescs any(k, false);
  const dnnl::memory::dims stride{k.sh, k.sw}, pad{k.ph, k.pw};
  const auto desc =
      k.bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                               dnnl::algorithm::convolution_direct, any.x, any.w,
                                               any.b, any.y, stride, pad, pad)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                               dnnl::algorithm::convolution_direct, any.x, any.w,
                                               any.y, stride, pad, pad);
  return {desc, user_scratchpad(), cpu_engine()};
}

// One operand of a primitive: its layout in tessera and the one the primitive chose, with the
// reorder between them (plain to chosen for an input, back for an output) when they differ.
struct Operand {
  md plain, chosen;
  std::optional<dnnl::reorder> reorder;
  std::size_t scratch = 0;  // the reorder's scratchpad, in bytes

  Operand(const md& plain_md, const md& chosen_md, bool input)
      : plain(plain_md), chosen(chosen_md) {
    if (chosen == plain) return;
    const dnnl::engine& e = cpu_engine();
    const dnnl::reorder::primitive_desc pd =
        input ? dnnl::reorder::primitive_desc(e, plain, e, chosen, user_scratchpad())
              : dnnl::reorder::primitive_desc(e, chosen, e, plain, user_scratchpad());
    scratch = pd.scratchpad_desc().get_size();
    reorder = dnnl::reorder(pd);
  }
};

constexpr std::size_t kScratchAlign = 64;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// The most memory a call takes (Call): the scratchpad, a buffer for each operand in a layout
// of its primitive's choosing, and `others`.
std::size_t call_bytes(std::size_t scratch, std::initializer_list<const Operand*> operands,
                       std::initializer_list<md> others) {
  std::size_t bytes = aligned(scratch);
  for (const Operand* op : operands) {
    if (op->reorder) bytes += aligned(op->chosen.get_size());
  }
  for (const md& desc : others) bytes += aligned(desc.get_size());
  return bytes;
}

struct Forward {
  dnnl::convolution_forward conv;
  Operand x, w, y;
  md b;
  std::size_t scratch;  // the largest scratchpad of the primitives, in bytes
  std::size_t bytes;    // a call's memory: Call's
};

struct Backward {
  dnnl::convolution_backward_data data;
  Operand data_gy, data_w, data_dx;
  dnnl::convolution_backward_weights weights;
  Operand weights_x, weights_gy, weights_dw;
  md db;
  std::size_t weights_scratch;  // the weight gradient's scratchpad: zeroed per call
  std::size_t scratch;
  std::size_t bytes;
};

Forward make_forward(const ConvKey& k) {
  const ConvDescs plain(k, true);
  const auto pd = forward_pd(k);
  Forward f{dnnl::convolution_forward(pd),
            Operand(plain.x, pd.src_desc(), true),
            Operand(plain.w, pd.weights_desc(), true),
            Operand(plain.y, pd.dst_desc(), false),
            plain.b,
            0,
            0};
  f.scratch = std::max({pd.scratchpad_desc().get_size(), f.x.scratch, f.w.scratch, f.y.scratch});
  f.bytes = call_bytes(f.scratch, {&f.x, &f.w, &f.y}, {});
  return f;
}

Backward make_backward(const ConvKey& k) {
  const ConvDescs plain(k, true), any(k, false);
  const dnnl::memory::dims stride{k.sh, k.sw}, pad{k.ph, k.pw};
  const auto hint = forward_pd(k);
  const dnnl::convolution_backward_data::primitive_desc data_pd(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any.x, any.w,
                                            any.y, stride, pad, pad),
      user_scratchpad(), cpu_engine(), hint);
  const dnnl::convolution_backward_weights::primitive_desc weights_pd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any.x, any.w,
                                               any.b, any.y, stride, pad, pad),
      user_scratchpad(), cpu_engine(), hint);
  Backward b{dnnl::convolution_backward_data(data_pd),
             Operand(plain.y, data_pd.diff_dst_desc(), true),
             Operand(plain.w, data_pd.weights_desc(), true),
             Operand(plain.x, data_pd.diff_src_desc(), false),
             dnnl::convolution_backward_weights(weights_pd),
             Operand(plain.x, weights_pd.src_desc(), true),
             Operand(plain.y, weights_pd.diff_dst_desc(), true),
             Operand(plain.w, weights_pd.diff_weights_desc(), false),
             plain.b,
             weights_pd.scratchpad_desc().get_size(),
             0,
             0};
  b.scratch =
      std::max({data_pd.scratchpad_desc().get_size(), weights_pd.scratchpad_desc().get_size(),
                b.data_gy.scratch, b.data_w.scratch, b.data_dx.scratch, b.weights_x.scratch,
                b.weights_gy.scratch, b.weights_dw.scratch});
  // Every operand's buffer, and the weight and bias gradients' when they are not wanted.
  b.bytes = call_bytes(
      b.scratch, {&b.data_gy, &b.data_w, &b.data_dx, &b.weights_x, &b.weights_gy, &b.weights_dw},
      {b.weights_dw.chosen, b.db});
  return b;
}

// The most recently used kept, each a few hundred KB of JIT code and descriptors.
constexpr std::size_t kConvPrimitivesKept = 64;

std::shared_ptr<const Forward> forward_of(const ConvKey& k) {
  static PrimitiveCache<ConvKey, Forward> cache(kConvPrimitivesKept);
  return cache.get(k, [&] { return make_forward(k); });
}

std::shared_ptr<const Backward> backward_of(const ConvKey& k) {
  static PrimitiveCache<ConvKey, Backward> cache(kConvPrimitivesKept);
  return cache.get(k, [&] { return make_backward(k); });
}

// Note [Convolution scratch kept per thread]
// A call's blocked copies and scratchpad (a few MB for [8, 64, 32, 32]) taken from operator
// new and freed at its end came back from the system as fresh pages on the next call (glibc
// returns a freed heap top that large): page faults took a third of a float32 convolution's
// forward and backward. Each thread keeps its last call's memory for the next, as
// run_onednn_matmul keeps its scratchpad, unless it is over kScratchKept; it is the
// thread's until the thread ends, not tensor memory (memory_reserved does not count it).
constexpr std::size_t kScratchKept = std::size_t{64} << 20;

// One call's memory: blocks carved in order from this thread's kept buffer (grown before the
// call to what the call needs, so carving never moves it), each kScratchAlign-aligned as
// oneDNN's own allocations are (operator new aligns to 16 bytes only).
class CallMemory {
 public:
  explicit CallMemory(std::size_t bytes) : size_(bytes) {
    const std::size_t allocated = bytes + kScratchAlign;
    std::byte* start = nullptr;
    if (bytes <= kScratchKept) {
      thread_local std::unique_ptr<std::byte[]> buffer;
      thread_local std::size_t size = 0;
      if (size < allocated) {
        buffer.reset();  // before the new one: both at once may not fit
        size = 0;
        buffer.reset(new std::byte[allocated]);
        size = allocated;
      }
      start = buffer.get();
    } else {
      own_.reset(new std::byte[allocated]);
      start = own_.get();
    }
    const auto address = reinterpret_cast<std::uintptr_t>(start);
    base_ = start + (aligned(address) - address);
  }
  // The next `bytes`, aligned (call_bytes counted them).
  std::byte* take(std::size_t bytes) {
    std::byte* p = base_ + used_;
    used_ += aligned(bytes);
    TESSERA_INTERNAL_ASSERT(used_ <= size_, "a oneDNN convolution took {} bytes of the {} counted",
                            used_, size_);
    return p;
  }

 private:
  std::size_t size_;
  std::unique_ptr<std::byte[]> own_;
  std::byte* base_ = nullptr;
  std::size_t used_ = 0;
};

// One call's primitives on tensors in tessera's layouts: inputs reordered into buffers of the
// chosen layouts first (each tensor once per layout), outputs written to buffers and
// reordered out by finish(). `bytes`: call_bytes of its primitives.
class Call {
 public:
  Call(std::size_t bytes, std::size_t scratch_bytes)
      : memory_(bytes), scratch_bytes_(scratch_bytes), stream_(cpu_engine()) {
    scratch_ = memory_.take(scratch_bytes);
  }

  // `data`'s values in op's chosen layout.
  dnnl::memory in(const Operand& op, const void* data) {
    const dnnl::memory plain(op.plain, cpu_engine(), const_cast<void*>(data));
    if (!op.reorder) return plain;
    for (const Reordered& r : reordered_) {
      if (r.data == data && r.memory.get_desc() == op.chosen) return r.memory;
    }
    const dnnl::memory chosen = buffer(op.chosen);
    run(*op.reorder, {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, chosen}});
    reordered_.push_back({data, chosen});
    return chosen;
  }

  // Memory for op's output, which finish() leaves in `data` in tessera's layout.
  dnnl::memory out(const Operand& op, void* data) {
    const dnnl::memory plain(op.plain, cpu_engine(), data);
    if (!op.reorder) return plain;
    const dnnl::memory chosen = buffer(op.chosen);
    outputs_.push_back({&*op.reorder, chosen, plain});
    return chosen;
  }

  // Memory of `desc` that the call owns (an output nobody wants).
  dnnl::memory buffer(const md& desc) {
    return {desc, cpu_engine(), memory_.take(desc.get_size())};
  }

  // `zeroed`: the first bytes of the scratchpad that `p` needs zeroed.
  void run(const dnnl::primitive& p, std::unordered_map<int, dnnl::memory> args,
           std::size_t zeroed = 0) {
    if (zeroed > 0) std::memset(scratch_, 0, zeroed);
    if (scratch_bytes_ > 0) {
      const md desc({static_cast<dnnl::memory::dim>(scratch_bytes_)}, dt::u8, tag::x);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(desc, cpu_engine(), scratch_));
    }
    p.execute(stream_, args);
  }

  void finish() {
    for (const Output& o : outputs_) {
      run(*o.reorder, {{DNNL_ARG_FROM, o.chosen}, {DNNL_ARG_TO, o.plain}});
    }
    stream_.wait();
  }

 private:
  struct Reordered {
    const void* data;
    dnnl::memory memory;
  };
  struct Output {
    const dnnl::reorder* reorder;
    dnnl::memory chosen, plain;
  };
  CallMemory memory_;
  std::byte* scratch_;
  std::size_t scratch_bytes_;
  dnnl::stream stream_;
  std::vector<Reordered> reordered_;
  std::vector<Output> outputs_;
};

// Note [Weight gradients from a clean scratchpad]
// oneDNN 2.6's bfloat16 weight gradient (jit_bf16:avx512_core_bf16) never initialises the
// float32 sums of kernel taps that see only padding (x [1, 123, 8, 1] by [2, 123, 2, 6],
// stride (1, 4), padding (0, 3): only kernel column 3 ever reads the input) and writes
// whatever its scratchpad held: from the thread's kept memory, the last convolution's sums
// (1e29, NaN) where the gradient is 0. PyTorch 2.15's bfloat16 convolutions, on the same
// oneDNN kernel, show the same stale values. The weight gradient's scratchpad is zeroed
// before each run, in float32 too (where it has one: with several threads): it holds the
// weights' float32 sums and buffers, 0.4 MB for 64 filters of 64x3x3 in bfloat16, a few
// microseconds against the pass's 1.5 ms.

// Runs `body`, turning oneDNN's failures into tessera's errors.
template <typename F>
void guarded(const char* pass, const ConvGeometry& g, OnednnConvType type, F&& body) {
  try {
    std::forward<F>(body)();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_out_of_memory) throw std::bad_alloc();
    TESSERA_CHECK(false, Error,
                  "[conv2d] oneDNN's {} convolution {} failed for x [{}, {}, {}, {}] and weight "
                  "[{}, {}, {}, {}], stride ({}, {}), padding ({}, {}): {} (status {}). "
                  "TESSERA_CPU_ONEDNN_CONV=0 computes convolutions by im2col instead",
                  type == OnednnConvType::kBFloat16 ? "bfloat16" : "float32", pass, g.n, g.c, g.h,
                  g.w, g.o, g.c, g.kh, g.kw, g.win.stride_h, g.win.stride_w, g.win.pad_h,
                  g.win.pad_w, e.what(), static_cast<int>(e.status));
  }
}

}  // namespace

void onednn_conv_forward(const ConvGeometry& g, OnednnConvType type, const void* x, const void* w,
                         const void* b, void* y) {
  guarded("forward", g, type, [&] {
    const std::shared_ptr<const Forward> f = forward_of(key_of(g, type, b != nullptr));
    Call call(f->bytes, f->scratch);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, call.in(f->x, x)},
                                               {DNNL_ARG_WEIGHTS, call.in(f->w, w)},
                                               {DNNL_ARG_DST, call.out(f->y, y)}};
    if (b != nullptr) {
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(f->b, cpu_engine(), const_cast<void*>(b)));
    }
    call.run(f->conv, std::move(args));
    call.finish();
  });
}

void onednn_conv_backward(const ConvGeometry& g, OnednnConvType type, const void* x, const void* w,
                          const void* gy, void* dx, void* dw, void* db) {
  guarded("backward", g, type, [&] {
    const std::shared_ptr<const Backward> b = backward_of(key_of(g, type, true));
    Call call(b->bytes, b->scratch);
    if (dx != nullptr) {
      call.run(b->data, {{DNNL_ARG_DIFF_DST, call.in(b->data_gy, gy)},
                         {DNNL_ARG_WEIGHTS, call.in(b->data_w, w)},
                         {DNNL_ARG_DIFF_SRC, call.out(b->data_dx, dx)}});
    }
    if (dw != nullptr || db != nullptr) {
      const dnnl::memory bias =
          db != nullptr ? dnnl::memory(b->db, cpu_engine(), db) : call.buffer(b->db);
      call.run(b->weights,
               {{DNNL_ARG_SRC, call.in(b->weights_x, x)},
                {DNNL_ARG_DIFF_DST, call.in(b->weights_gy, gy)},
                {DNNL_ARG_DIFF_WEIGHTS,
                 dw != nullptr ? call.out(b->weights_dw, dw) : call.buffer(b->weights_dw.chosen)},
                {DNNL_ARG_DIFF_BIAS, bias}},
               b->weights_scratch);  // Note [Weight gradients from a clean scratchpad]
    }
    call.finish();
  });
}

}  // namespace tessera::detail

// CPU op cases timed one by one against bench/peers/pytorch_cpu_ops.py (same names, same
// shapes): the review of 2026-11-27 that found the cliffs in docs/benchmarks.md ("CPU cliffs
// against PyTorch"). Run through bench/cpu_ops/compare.sh.
#include <tessera/tessera.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
using namespace tessera;
using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  std::function<void()> fn;
};

double time_case(const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  synchronize();
  // calibrate: reps so that one sample takes ~10 ms
  auto t0 = Clock::now();
  fn();
  synchronize();
  double one = std::chrono::duration<double>(Clock::now() - t0).count();
  int reps = std::max(1, std::min(100000, (int)(0.01 / std::max(one, 1e-7))));
  double best = 1e30;
  for (int s = 0; s < 7; ++s) {
    auto a = Clock::now();
    for (int r = 0; r < reps; ++r) fn();
    synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - a).count() / reps);
  }
  return best * 1e6;
}

int main(int argc, char** argv) {
  std::vector<Case> cs;
  auto add = [&](std::string n, std::function<void()> f) {
    cs.push_back({std::move(n), std::move(f)});
  };
  NoGradGuard* ng = nullptr;
  (void)ng;
  // ---- elementwise ----
  {
    Tensor c = randn({1024, 1}), r = randn({1, 1024});
    add("add_bcast_col_row_1024", [=] { auto y = c + r; });
    Tensor x = randn({32, 64, 32, 32}), bb = randn({64, 1, 1});
    add("add_bcast_nchw_c11", [=] { auto y = x + bb; });
    Tensor a = randn({1024, 1024}), b = randn({1024, 1024});
    add("add_contig_1024sq", [=] { auto y = a + b; });
    add("add_transposed_1024sq", [=] { auto y = a + b.t(); });
    add("add_both_transposed_1024sq", [=] { auto y = a.t() + b.t(); });
    Tensor s1 = randn({64, 64}), s2 = randn({64, 64});
    add("add_64x64", [=] { auto y = s1 + s2; });
    add("exp_64x64", [=] { auto y = exp(s1); });
    add("sum_64x64_last", [=] { auto y = sum(s1, {-1}); });
    add("matmul_64", [=] { auto y = matmul(s1, s2); });
    add("mul_scalar_64x64", [=] { auto y = s1 * 2.0; });
    Tensor u = randn({1 << 20});
    add("exp_1M", [=] { auto y = exp(u); });
    add("log_1M", [=] { auto y = log(abs(u)); });
    add("rand_1M", [] { auto y = rand({1 << 20}); });
    add("randn_1M", [] { auto y = randn({1 << 20}); });
    add("abs_1M", [=] { auto y = abs(u); });
    add("tanh_1M", [=] { auto y = tanh(u); });
    add("sigmoid_1M", [=] { auto y = sigmoid(u); });
    add("gelu_1M", [=] { auto y = gelu(u); });
    add("gelu_tanh_1M", [=] { auto y = gelu(u, GeluApproximation::kTanh); });
    add("silu_1M", [=] { auto y = silu(u); });
    add("relu_1M", [=] { auto y = relu(u); });
    add("sqrt_1M", [=] { auto y = sqrt(abs(u)); });
    add("pow2_1M", [=] { auto y = pow(u, 2.0); });
    add("div_1M", [=] { auto y = u / (abs(u) + 1.0); });
    add("exp_T_1024sq", [=] { auto y = exp(a.t()); });
    add("sigmoid_T_1024sq", [=] { auto y = sigmoid(a.t()); });
    add("relu_T_1024sq", [=] { auto y = relu(a.t()); });
    add("tanh_T_1024sq", [=] { auto y = tanh(a.t()); });
    add("gt_1M", [=] { auto y = gt(u, 0.0); });
    Tensor cond = gt(u, 0.0), u2 = randn({1 << 20});
    add("where_1M", [=] { auto y = where(cond, u, u2); });
    add("clamp_1M", [=] { auto y = minimum(maximum(u, -0.5), 0.5); });
    add("maximum_1M", [=] { auto y = maximum(u, u2); });
    Tensor i32 = (u * 100.0).to(kInt32), i64 = (u * 100.0).to(kInt64),
           u8 = (abs(u) * 50.0).to(kUInt8);
    Tensor bf = u.to(kBFloat16), bf2 = u2.to(kBFloat16), f64 = u.to(kFloat64),
           f64b = u2.to(kFloat64);
    add("add_int32_1M", [=] { auto y = i32 + i32; });
    add("add_int64_1M", [=] { auto y = i64 + i64; });
    add("add_uint8_1M", [=] { auto y = u8 + u8; });
    add("add_bf16_1M", [=] { auto y = bf + bf2; });
    add("mul_bf16_1M", [=] { auto y = bf * bf2; });
    add("exp_bf16_1M", [=] { auto y = exp(bf); });
    add("add_f64_1M", [=] { auto y = f64 + f64b; });
    add("exp_f64_1M", [=] { auto y = exp(f64); });
    add("to_bf16_1M", [=] { auto y = u.to(kBFloat16); });
    add("bf16_to_f32_1M", [=] { auto y = bf.to(kFloat32); });
    add("to_f64_1M", [=] { auto y = u.to(kFloat64); });
    add("to_int32_1M", [=] { auto y = u.to(kInt32); });
    add("int64_to_f32_1M", [=] { auto y = i64.to(kFloat32); });
    add("mul_scalar_1M", [=] { auto y = u * 2.0; });
  }
  // ---- reductions ----
  {
    Tensor a = randn({1024, 1024});
    add("sum_last_1024sq", [=] { auto y = sum(a, {-1}); });
    add("sum_first_1024sq", [=] { auto y = sum(a, {0}); });
    add("sum_all_1024sq", [=] { auto y = sum(a); });
    add("mean_last_1024sq", [=] { auto y = mean(a, {-1}); });
    add("max_last_1024sq", [=] { auto y = max(a, {-1}); });
    add("max_first_1024sq", [=] { auto y = max(a, {0}); });
    add("argmax_last_1024sq", [=] { auto y = argmax(a, -1); });
    add("argmax_first_1024sq", [=] { auto y = argmax(a, 0); });
    add("norm_1024sq", [=] { auto y = norm(a); });
    add("sum_last_T_1024sq", [=] { auto y = sum(a.t(), {-1}); });
    Tensor m = randn({64, 256, 64});
    add("sum_mid_64x256x64", [=] { auto y = sum(m, {1}); });
    add("mean_mid_64x256x64", [=] { auto y = mean(m, {1}); });
    Tensor v = randn({32, 64, 32, 32});
    add("mean_nchw_023", [=] { auto y = mean(v, {0, 2, 3}); });
    Tensor ai = (a * 100.0).to(kInt64);
    add("sum_int64_last_1024sq", [=] { auto y = sum(ai, {-1}); });
    Tensor ab = a.to(kBFloat16);
    add("sum_bf16_last_1024sq", [=] { auto y = sum(ab, {-1}); });
    add("softmax_last_1024sq", [=] { auto y = softmax(a, -1); });
    add("softmax_first_1024sq", [=] { auto y = softmax(a, 0); });
    add("log_softmax_last_1024sq", [=] { auto y = log_softmax(a, -1); });
    add("log_softmax_first_1024sq", [=] { auto y = log_softmax(a, 0); });
    Tensor cls = randn({256, 10});
    add("softmax_256x10", [=] { auto y = softmax(cls, -1); });
  }
  // ---- matmul ----
  {
    Tensor a = randn({512, 512}), b = randn({512, 512});
    add("mm_512", [=] { auto y = matmul(a, b); });
    add("mm_tA_512", [=] { auto y = matmul(a.t(), b); });
    add("mm_tB_512", [=] { auto y = matmul(a, b.t()); });
    Tensor ba = randn({32, 128, 128}), bb = randn({32, 128, 128});
    add("bmm_32x128", [=] { auto y = matmul(ba, bb); });
    add("bmm_tB_32x128", [=] { auto y = matmul(ba, bb.transpose(1, 2)); });
    Tensor M = randn({2048, 2048}), vv = randn({2048});
    add("mv_2048", [=] { auto y = matmul(M, vv); });
    add("vm_2048", [=] { auto y = matmul(vv, M); });
    Tensor ts = randn({65536, 64}), w = randn({64, 64});
    add("mm_tall_65536x64x64", [=] { auto y = matmul(ts, w); });
    add("mm_tall_tA_64x65536x64", [=] { auto y = matmul(ts.t(), ts); });
    Tensor ad = a.to(kFloat64), bd = b.to(kFloat64);
    add("mm_f64_512", [=] { auto y = matmul(ad, bd); });
    Tensor ah = a.to(kBFloat16), bh = b.to(kBFloat16);
    add("mm_bf16_512", [=] { auto y = matmul(ah, bh); });
    Tensor x = randn({256, 784}), W = randn({128, 784}), bias = randn({128});
    add("linear_256x784x128", [=] { auto y = nn::linear(x, W, bias); });
  }
  // ---- conv / pool ----
  {
    Tensor x = randn({8, 64, 32, 32}), w = randn({64, 64, 3, 3}), bias = randn({64});
    add("conv3x3_p1_8x64x32", [=] {
      auto y = conv2d(x, w, bias, {.stride = {1, 1}, .padding = {1, 1}});
    });
    add("conv3x3_s2_8x64x32", [=] {
      auto y = conv2d(x, w, bias, {.stride = {2, 2}, .padding = {1, 1}});
    });
    Tensor w1 = randn({128, 64, 1, 1});
    add("conv1x1_8x64x32_to128", [=] { auto y = conv2d(x, w1, {}); });
    Tensor x1 = randn({1, 64, 56, 56});
    add("conv3x3_p1_b1_64x56", [=] {
      auto y = conv2d(x1, w, bias, {.stride = {1, 1}, .padding = {1, 1}});
    });
    Tensor xi = randn({8, 3, 32, 32}), wi = randn({64, 3, 3, 3});
    add("conv3x3_p1_8x3x32_to64", [=] {
      auto y = conv2d(xi, wi, {}, {.stride = {1, 1}, .padding = {1, 1}});
    });
    add("maxpool2_8x64x32", [=] { auto y = max_pool2d(x); });
    add("avgpool2_8x64x32", [=] { auto y = avg_pool2d(x); });
    add("maxpool3s2p1_8x64x32", [=] {
      auto y = max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    });
    Tensor xg = randn({8, 64, 32, 32}), wg = randn({64, 64, 3, 3});
    xg.requires_grad_();
    wg.requires_grad_();
    add("conv3x3_p1_fwdbwd_8x64x32", [=] {
      auto y = conv2d(xg, wg, {}, {.stride = {1, 1}, .padding = {1, 1}});
      sum(y).backward();
    });
    add("conv1x1_fwdbwd_8x64x32", [=] {
      Tensor w1g = w1;
      auto y = conv2d(xg, wg.slice(2, 1, 2).slice(3, 1, 2), {});
      sum(y).backward();
    });
    add("maxpool2_fwdbwd_8x64x32", [=] {
      auto y = max_pool2d(xg);
      sum(y).backward();
    });
    add("avgpool2_fwdbwd_8x64x32", [=] {
      auto y = avg_pool2d(xg);
      sum(y).backward();
    });
  }
  // ---- normalization and indexing (2026-11-27, later) ----
  {
    Tensor xb = randn({32, 64, 32, 32}).requires_grad_();
    Tensor gamma = ones({64}).requires_grad_(), beta = zeros({64}).requires_grad_();
    Tensor rm = zeros({64}), rv = ones({64});
    add("batchnorm2d_fwdbwd_32x64x32", [=] {
      auto y = nn::batch_norm(xb, rm, rv, gamma, beta, /*training=*/true);
      sum(y).backward();
    });
    add("batchnorm2d_eval_32x64x32", [=] {
      NoGradGuard no_grad;
      auto y = nn::batch_norm(xb, rm, rv, gamma, beta, /*training=*/false);
    });
    Tensor x1 = randn({256, 120}).requires_grad_();
    Tensor g1 = ones({120}).requires_grad_(), b1 = zeros({120}).requires_grad_();
    Tensor rm1 = zeros({120}), rv1 = ones({120});
    add("batchnorm1d_fwdbwd_256x120", [=] {
      auto y = nn::batch_norm(x1, rm1, rv1, g1, b1, /*training=*/true);
      sum(y).backward();
    });
    Tensor xl = randn({256, 512}).requires_grad_();
    Tensor gl = ones({512}).requires_grad_(), bl = zeros({512}).requires_grad_();
    add("layernorm_fwdbwd_256x512", [=] {
      auto y = nn::layer_norm(xl, {512}, gl, bl);
      sum(y).backward();
    });
    Tensor table = randn({50000, 256}).requires_grad_();
    Tensor ids = randint(0, 50000, {4096});
    add("index_select_4096_of_50000x256", [=] {
      NoGradGuard no_grad;
      auto y = index_select(table, 0, ids);
    });
    add("embedding_fwdbwd_4096_of_50000x256", [=] {
      auto y = nn::embedding(ids, table);
      sum(y).backward();
    });
  }
  // ---- data movement ----
  {
    Tensor a = randn({2048, 2048});
    add("contig_T_2048sq", [=] { auto y = a.t().contiguous(); });
    add("clone_2048sq", [=] { auto y = a.clone(); });
    add("slice_cols_copy_2048x512", [=] { auto y = a.slice(1, 0, 512).contiguous(); });
    add("slice_step2_copy", [=] { auto y = a.slice(1, 0, 2048, 2).contiguous(); });
    Tensor x = randn({32, 64, 32, 32});
    add("permute0231_contig_32x64x32", [=] { auto y = x.permute({0, 2, 3, 1}).contiguous(); });
    add("permute1023_contig_32x64x32", [=] { auto y = x.permute({1, 0, 2, 3}).contiguous(); });
    Tensor sm = randn({64, 64});
    add("contig_T_64", [=] { auto y = sm.t().contiguous(); });
    add("expand_contig_1x1024_to_1024sq", [=] {
      auto y = randn({1, 1024}).expand({1024, 1024}).contiguous();
    });
  }
  // ---- autograd overhead ----
  {
    Tensor p = randn({8});
    p.requires_grad_();
    add("autograd_chain100_fwdbwd", [=] {
      Tensor y = p;
      for (int i = 0; i < 25; ++i) {
        y = y * 1.01;
        y = y + 0.1;
        y = tanh(y);
        y = y - 0.05;
      }
      sum(y).backward();
    });
    Tensor q = randn({8});
    add("chain100_fwd_nograd", [=] {
      Tensor y = q;
      for (int i = 0; i < 25; ++i) {
        y = y * 1.01;
        y = y + 0.1;
        y = tanh(y);
        y = y - 0.05;
      }
    });
  }
  // ---- extra ----
  {
    Tensor lg = randn({256, 1000});
    lg.requires_grad_();
    std::vector<std::int64_t> tv(256);
    for (int i = 0; i < 256; ++i) tv[i] = (i * 37) % 1000;
    Tensor tg = from_vector(tv, Shape{256});
    add("xent_fwdbwd_256x1000", [=] { nn::cross_entropy(lg, tg).backward(); });
    add("softmax_fwdbwd_last_256x1000", [=] { sum(softmax(lg, -1) * lg).backward(); });
    Tensor u = randn({1 << 20});
    u.requires_grad_();
    add("tanh_fwdbwd_1M", [=] { sum(tanh(u)).backward(); });
    add("gelu_fwdbwd_1M", [=] { sum(gelu(u)).backward(); });
    add("silu_fwdbwd_1M", [=] { sum(silu(u)).backward(); });
    Tensor x = randn({1024, 1024});
    add("layernorm_like_1024sq", [=] {
      auto m = mean(x, {-1}, true);
      auto d = x - m;
      auto v = mean(d * d, {-1}, true);
      auto y = d / sqrt(v + 1e-5);
    });
    Tensor sr = randn({65536, 10});
    add("argmax_last_65536x10", [=] { auto y = argmax(sr, -1); });
    add("max_last_65536x10", [=] { auto y = max(sr, {-1}); });
    add("sum_last_65536x10", [=] { auto y = sum(sr, {-1}); });
    add("softmax_last_65536x10", [=] { auto y = softmax(sr, -1); });
    Tensor xl = randn({256, 784});
    Tensor W = randn({128, 784});
    W.requires_grad_();
    Tensor bb = randn({128});
    bb.requires_grad_();
    add("linear_fwdbwd_256x784x128", [=] { sum(nn::linear(xl, W, bb)).backward(); });
  }
  // ---- half precision (bfloat16, float16) ----
  {
    Tensor a = randn({1024, 1024});
    Tensor ab = a.to(kBFloat16), ah = a.to(kFloat16);
    add("sum_f16_last_1024sq", [=] { auto y = sum(ah, {-1}); });
    add("sum_bf16_first_1024sq", [=] { auto y = sum(ab, {0}); });
    add("sum_bf16_all_1024sq", [=] { auto y = sum(ab); });
    add("mean_bf16_last_1024sq", [=] { auto y = mean(ab, {-1}); });
    add("max_bf16_last_1024sq", [=] { auto y = max(ab, {-1}); });
    add("norm_bf16_1024sq", [=] { auto y = norm(ab); });
    add("softmax_bf16_last_1024sq", [=] { auto y = softmax(ab, -1); });
    add("log_softmax_bf16_last_1024sq", [=] { auto y = log_softmax(ab, -1); });
    Tensor u = randn({1 << 20});
    Tensor h = u.to(kFloat16), h2 = randn({1 << 20}).to(kFloat16), bf = u.to(kBFloat16);
    add("add_f16_1M", [=] { auto y = h + h2; });
    add("exp_f16_1M", [=] { auto y = exp(h); });
    add("relu_bf16_1M", [=] { auto y = relu(bf); });
    add("sigmoid_bf16_1M", [=] { auto y = sigmoid(bf); });
    add("gelu_bf16_1M", [=] { auto y = gelu(bf); });
    Tensor x = randn({32, 64, 32, 32}).to(kBFloat16), c = randn({64, 1, 1}).to(kBFloat16);
    add("add_bf16_bcast_nchw_c11", [=] { auto y = x + c; });
    Tensor m1 = randn({512, 512}).to(kFloat16), m2 = randn({512, 512}).to(kFloat16);
    add("mm_f16_512", [=] { auto y = matmul(m1, m2); });
    Tensor xl = randn({256, 784}).to(kBFloat16);
    Tensor W = randn({128, 784}).to(kBFloat16);
    W.requires_grad_();
    Tensor bb = randn({128}).to(kBFloat16);
    bb.requires_grad_();
    add("linear_fwdbwd_bf16_256x784x128", [=] { sum(nn::linear(xl, W, bb)).backward(); });
    Tensor xn = randn({256, 512}).to(kBFloat16);
    xn.requires_grad_();
    Tensor gl = ones({512}, kBFloat16), bl = zeros({512}, kBFloat16);
    gl.requires_grad_();
    bl.requires_grad_();
    add("layernorm_fwdbwd_bf16_256x512",
        [=] { sum(nn::layer_norm(xn, {512}, gl, bl)).backward(); });
    Tensor lg = randn({256, 1000}).to(kBFloat16);
    lg.requires_grad_();
    std::vector<std::int64_t> tv(256);
    for (int i = 0; i < 256; ++i) tv[i] = (i * 37) % 1000;
    Tensor tg = from_vector(tv, Shape{256});
    add("xent_fwdbwd_bf16_256x1000", [=] { nn::cross_entropy(lg, tg).backward(); });
    Tensor xc = randn({8, 64, 32, 32}).to(kBFloat16), wc = randn({64, 64, 3, 3}).to(kBFloat16);
    add("conv3x3_p1_bf16_8x64x32", [=] {
      auto y = conv2d(xc, wc, Tensor{}, {.stride = {1, 1}, .padding = {1, 1}});
    });
    Tensor xcg = xc.detach().requires_grad_(), wcg = wc.detach().requires_grad_();
    add("conv3x3_p1_fwdbwd_bf16_8x64x32", [=] {
      auto y = conv2d(xcg, wcg, Tensor{}, {.stride = {1, 1}, .padding = {1, 1}});
      sum(y).backward();
    });
    // LeNet's second convolution (a batch of 256: the direct path, Note [Direct convolution]).
    Tensor lx = randn({256, 6, 14, 14}).requires_grad_(),
           lw = randn({16, 6, 5, 5}).requires_grad_();
    add("conv5x5_lenet2_fwdbwd_256x6x14", [=] { sum(conv2d(lx, lw, Tensor{})).backward(); });
    Tensor lxh = lx.detach().to(kBFloat16).requires_grad_();
    Tensor lwh = lw.detach().to(kBFloat16).requires_grad_();
    add("conv5x5_lenet2_fwdbwd_bf16_256x6x14", [=] { sum(conv2d(lxh, lwh, Tensor{})).backward(); });
  }
  std::string filt = argc > 1 ? argv[1] : "";
  for (auto& c : cs) {
    if (!filt.empty() && c.name != filt) continue;
    double us = time_case(c.fn);
    std::printf("%s %.3f\n", c.name.c_str(), us);
    std::fflush(stdout);
  }
}

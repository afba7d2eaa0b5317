// Factories: shapes, dtypes, devices, seeded random numbers, and their errors.
#include <cmath>

#include "backend/backend.h"
#include "backend/philox.h"
#include "core/device_registry.h"
#include "support/device_test.h"
#include "tessera/memory.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Factories : public DeviceTest {};

TEST_P(Factories, ConstantsAndRanges) {
  EXPECT_EQ(zeros({2, 2}, device()).to_vector<float>(), std::vector<float>(4, 0));
  EXPECT_EQ(ones({3}, {kInt32, device()}).to_vector<int>(), std::vector<int>(3, 1));
  EXPECT_EQ(full({2}, 2.5, {kFloat64, device()}).to_vector<double>(), std::vector<double>(2, 2.5));
  EXPECT_EQ(arange(5, device()).to_vector<int>(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5, device()).dtype(), kInt64);
  EXPECT_EQ(arange(0, 1, 0.25, device()).to_vector<float>(),
            (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(3, 0, -1, device()).to_vector<int>(), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(arange(0, 0, 1, device()).numel(), 0);
  const Tensor like = zeros_like(ones({2, 3}, {kFloat64, device()}));
  EXPECT_EQ(like.dtype(), kFloat64);
  EXPECT_EQ(like.device(), device());
  EXPECT_EQ(full_like(like, 7).to_vector<double>(), std::vector<double>(6, 7));
  expect_throw_with<Error>([&] { arange(0, 5, 0, device()); }, {"[arange]", "non-zero step"});
  expect_throw_with<Error>([&] { arange(0, 5, -1, device()); }, {"[arange]", "flip the step"});
  expect_throw_with<ShapeError>([&] { zeros({2, -1}, device()); }, {"[zeros]", "negative size"});
}

// A zero beside huge sizes: nothing is allocated, and computing the strides or the element
// count must not overflow (undefined behaviour, caught by UBSan in CI before the fix).
TEST_P(Factories, IntegerLiteralsKeepEveryBit) {
  const std::int64_t big = 9007199254740993LL;  // 2^53 + 1
  const Tensor t = tensor({big, big - 1, -big}, device());
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{big, big - 1, -big}));
  EXPECT_FALSE(t.to_vector<bool>().empty());
  EXPECT_EQ((tensor({big}, device()) == tensor({big - 1}, device())).item<bool>(), false);
  EXPECT_EQ(tensor({{1, 2}, {3, 4}}, {device(), kFloat32}).to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(tensor({true, false}, {device(), kInt32}).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, 0}));
  expect_throw_with<DtypeError>(
      [&] {
        tensor({1, 300}, {device(), kUInt8});
      },
      {"[tensor]", "300", "uint8"});
  expect_throw_with<DtypeError>([&] { tensor({big}, {device(), kInt32}); }, {"int32"});
}

// C++ types that did not compile: unsigned entries ({1u}, a size_t), std::vector<bool>
// (packed bits, no data()) and long long (another type than std::int64_t on Linux).
TEST_P(Factories, UnsignedEntriesBoolVectorsAndLongLongWork) {
  const std::size_t n = 3;
  const Tensor u = tensor({1u, 2u, n}, device());
  EXPECT_EQ(u.dtype(), kInt64);
  EXPECT_EQ(u.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3}));
  expect_throw_with<DtypeError>([&] { tensor({~0ULL}, device()); },
                                {"[tensor] the entry 18446744073709551615 does not fit int64"});
  const std::vector<bool> mask{true, false, true, true};
  const Tensor b = from_vector(mask, {device()});
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(b.to_vector<bool>(), mask);
  EXPECT_EQ(from_vector(mask, {2, 2}, {device(), kFloat32}).to_vector<float>(),
            (std::vector<float>{1, 0, 1, 1}));
  const std::vector<long long> wide{-1LL, 1LL << 40};
  const Tensor w = from_vector(wide, {device()});
  EXPECT_EQ(w.dtype(), kInt64);
  EXPECT_EQ(w.to_vector<long long>(), wide);
}

TEST_P(Factories, AValueThatDoesNotFitTheDtypeIsRefused) {
  // Converting it would be undefined for integers (300 became 44 in uint8) or infinite.
  expect_throw_with<DtypeError>(
      [&] {
        full({2}, 300, {device(), kUInt8});
      },
      {"[full]", "300", "uint8", "0 to 255"});
  expect_throw_with<DtypeError>([&] { full({2}, -1, {device(), kUInt8}); }, {"[full]", "-1"});
  expect_throw_with<DtypeError>([&] { full({2}, NAN, {device(), kInt32}); }, {"int32"});
  expect_throw_with<DtypeError>(
      [&] {
        full({2}, 1e6, {device(), kFloat16});
      },
      {"[full]", "float16", "infinity"});
  expect_throw_with<DtypeError>([&] { full({2}, 1e39, {device(), kFloat32}); }, {"float32"});
  expect_throw_with<DtypeError>(
      [&] {
        zeros({2}, {device(), kInt32}).fill_(3e9);
      },
      {"[fill_]", "int32"});
  EXPECT_EQ(full({1}, 255.9, {device(), kUInt8}).item<std::int64_t>(), 255);  // truncated
  EXPECT_EQ(full({1}, -2147483648.0, {device(), kInt32}).item<std::int64_t>(), -2147483648LL);
  EXPECT_EQ(full({1}, 65504, {device(), kFloat16}).item<double>(), 65504);
  EXPECT_TRUE(std::isinf(full({1}, INFINITY, {device(), kFloat32}).item<double>()));
  EXPECT_TRUE(std::isnan(full({1}, NAN, {device(), kBFloat16}).item<double>()));
  EXPECT_TRUE(full({1}, 1e300, {device(), kBool}).item<bool>());
  // A scalar combined with an integer tensor is computed in its dtype, so it must fit too.
  const Tensor ints = tensor({1, 2}, {device(), kInt32});
  // A comparison with a value outside the dtype has one answer for every element.
  EXPECT_EQ(lt(ints, 3e9).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(eq(ints, 3'000'000'000LL).to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_EQ(gt(tensor({1, 2}, {device(), kUInt8}), -1).to_vector<bool>(),
            (std::vector<bool>{true, true}));
  expect_throw_with<DtypeError>(
      [&] {
        add(tensor({1}, {device(), kUInt8}), 256);
      },
      {"[add]", "uint8"});
  EXPECT_EQ(lt(ints, 2.5).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(lt(tensor({1.0}, device()), 1e300).item<bool>(), true);  // float32 compares as before
  // In place too: t.mul_(1e30) converted 1e30 to int64 (undefined) and stored garbage.
  Tensor longs = tensor({5, 2}, device());
  expect_throw_with<DtypeError>([&] { longs.mul_(1e30); },
                                {"[mul_] the result is float32 but self is int64"});
  Tensor int32s = tensor({1, 2}, {device(), kInt32});
  expect_throw_with<DtypeError>([&] { int32s.add_(3'000'000'000LL); },
                                {"[add_]", "does not fit int32", ".to(kInt64) or .to(kFloat64)"});
  EXPECT_EQ(longs.to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 2}));  // untouched
  // where() names itself, not the full() it makes the scalar with.
  const Tensor cond = tensor({true, false}, device());
  expect_throw_with<DtypeError>(
      [&] {
        where(cond, tensor({1, 2}, {device(), kUInt8}), -1);
      },
      {"[where] the value -1 does not fit uint8"});
  expect_throw_with<DtypeError>(
      [&] {
        where(cond, 1e6, ones({2}, {device(), kFloat16}));
      },
      {"[where] the value 1000000 does not fit float16"});
}

// A double rounds once to a half type, not through the nearest float32 first.
TEST_P(Factories, HalfFillsRoundTheDoubleOnce) {
  const double below_overflow = 65519.999;  // nearest float32: 65520, which float16 makes inf
  EXPECT_EQ(full({1}, below_overflow, {device(), kFloat16}).item<double>(), 65504.0);
  Tensor h = zeros({3}, {device(), kFloat16});
  h.fill_(below_overflow);
  EXPECT_EQ(h.to_vector<double>(), std::vector<double>(3, 65504.0));
  // Just above half of float16's smallest subnormal: 2^-24, not 0 (the float32 was the tie).
  EXPECT_EQ(full({1}, 0x1p-25 + 0x1p-60, {device(), kFloat16}).item<double>(), 0x1p-24);
  // bfloat16: 1 + 2^-8 + 2^-40 is past the tie between 1 and 1 + 2^-7.
  EXPECT_EQ(full({1}, 1 + 0x1p-8 + 0x1p-40, {device(), kBFloat16}).item<double>(), 1 + 0x1p-7);
  EXPECT_EQ(full({1}, -(1 + 0x1p-8 + 0x1p-40), {device(), kBFloat16}).item<double>(),
            -(1 + 0x1p-7));
  EXPECT_EQ(full({1}, 1 + 0x1p-8, {device(), kBFloat16}).item<double>(), 1.0);  // tie: even
}

// Half factories hold little more than their result (Note [Half factories in bounded
// memory]): zeros and full made a float32 tensor of the whole shape (3x the result), rand 7.5x.
// Drawn in pieces, rand's values are still one draw's: the same as a float32 draw rounded.
TEST_P(Factories, HalfFactoriesAllocateLittleMoreThanTheirResult) {
  constexpr std::int64_t n = std::int64_t{1} << 24;  // 32 MiB of bfloat16, four of rand's pieces
  constexpr std::uint64_t result = 2 * n;
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    synchronize(device());
    const std::uint64_t base = memory_stats(device()).in_use;
    reset_peak_memory(device());
    {
      const Tensor z = zeros({n}, {device(), dtype});
      const Tensor f = full({n}, 0.5, {device(), dtype});
      synchronize(device());
      EXPECT_LE(memory_stats(device()).peak, base + 2 * result + (64u << 10)) << dtype_name(dtype);
      EXPECT_EQ(f.narrow(0, n - 3, 3).to_vector<double>(), std::vector<double>(3, 0.5));
      EXPECT_EQ(z.sum().item<double>(), 0.0);
    }
    synchronize(device());
    reset_peak_memory(device());
    manual_seed(21);
    const Tensor r = rand({n}, {device(), dtype});
    synchronize(device());
    EXPECT_LE(memory_stats(device()).peak, base + result + (64u << 20)) << dtype_name(dtype);
    manual_seed(21);
    const Tensor reference = rand({n}, {device(), kFloat32}).to(dtype);
    // Equal but where rounding reached 1, which rand moves below it.
    const Tensor differ = (r != reference).to(kInt64) * (reference < 1.0).to(kInt64);
    EXPECT_EQ(differ.sum().item<std::int64_t>(), 0) << dtype_name(dtype);
    EXPECT_LT(r.max().item<double>(), 1.0);
  }
}

TEST_P(Factories, SizesPastWhatAnyDeviceHoldsAreRefused) {
  // 2^64 - 4 bytes wrapped the allocator's size classes to a 0-byte block (heap overflow).
  expect_throw_with<OutOfMemoryError>([&] { empty({(std::int64_t{1} << 62) - 1}, device()); },
                                      {"[empty]", "no device holds 2^62 bytes or more"});
  // No limit refused it, so raising one is no fix (the message said to).
  try {
    (void)empty({(std::int64_t{1} << 62) - 1}, device());
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(std::string(e.what()).find("set_memory_limit"), std::string::npos) << e.what();
  }
  expect_throw_with<OutOfMemoryError>(
      [&] {
        arange(1e300, {kFloat32, device()});
      },
      {"[arange]", "more than any tensor holds"});
  // Nothing cannot pass a limit, even one below what is in use.
  const Tensor held = ones({1000}, device());
  set_memory_limit(device(), 100);
  EXPECT_EQ(empty({0}, device()).numel(), 0);
  set_memory_limit(device(), SIZE_MAX);
}

TEST_P(Factories, EmptyTensorsWithHugeOtherSizes) {
  constexpr std::int64_t kHuge = std::int64_t{1} << 40;
  for (const Shape& shape :
       {Shape{0, kHuge, kHuge}, Shape{kHuge, kHuge, 0}, Shape{kHuge, 0, kHuge}}) {
    const Tensor t = zeros(shape, device());
    EXPECT_EQ(t.numel(), 0) << shape.str();
    EXPECT_TRUE(t.is_contiguous()) << shape.str();
    EXPECT_EQ(t.sum().item<float>(), 0.0F) << shape.str();
    EXPECT_EQ(t.reshape({0}).numel(), 0) << shape.str();
  }
  EXPECT_EQ((Shape{kHuge, kHuge, kHuge}.numel()), INT64_MAX);  // saturates, never wraps
}

TEST_P(Factories, NestedListsInferShapeAndDtype) {
  const Tensor a = tensor({{1, 2, 3}, {4, 5, 6}}, device());
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(tensor({1, 2.5}, device()).dtype(), kFloat32);
  EXPECT_EQ(tensor({true, false}, device()).dtype(), kBool);
  EXPECT_EQ(tensor({1, 2}, {kFloat64, device()}).dtype(), kFloat64);
  EXPECT_EQ(tensor(3.5, device()).dim(), 0);
  EXPECT_EQ(tensor(3.5, device()).item<float>(), 3.5f);
  EXPECT_EQ(tensor({{{1.0}, {2.0}}}, device()).shape(), (Shape{1, 2, 1}));
  expect_throw_with<ShapeError>(
      [&] {
        tensor({{1, 2}, {3}}, device());
      },
      {"[tensor]", "ragged", "has 1 entries, expected 2"});
  expect_throw_with<ShapeError>([&] { tensor({{1, 2}, 3}, device()); }, {"[tensor]", "ragged"});
  expect_throw_with<ShapeError>(
      [&] {
        tensor({1, {2}}, device());
      },
      {"[tensor] the nested list is ragged: a list appears at depth 1 "
       "where the first entries are numbers (depth 1)"});
  // Into an integer dtype the integers keep every bit beside decimals too (they went through
  // double: INT64_MAX became 2^63, undefined as an int64).
  EXPECT_EQ(tensor({9223372036854775807LL, 0.0}, {kInt64, device()}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9223372036854775807LL, 0}));
  EXPECT_EQ(tensor({9007199254740993LL, 2.5, -2.5}, {kInt64, device()}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9007199254740993LL, 2, -2}));
}

TEST_P(Factories, FromVector) {
  const Tensor t = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, {device()});
  EXPECT_EQ(t.dtype(), kFloat64);
  EXPECT_EQ(from_vector(std::vector<int>{1, 2}, {kFloat32, device()}).dtype(), kFloat32);
  expect_throw_with<ShapeError>(
      [&] {
        from_vector(std::vector<float>{1, 2, 3}, {2, 2}, {device()});
      },
      {"[from_vector]", "got 3 values for shape [2, 2], which holds 4"});
}

TEST_P(Factories, RandomIsSeededAndDeviceIndependent) {
  manual_seed(42);
  const auto a = rand({1000}, device()).to_vector<float>();
  const auto n = randn({20000}, {kFloat64, device()}).to_vector<double>();
  manual_seed(42);
  EXPECT_EQ(rand({1000}, device()).to_vector<float>(), a);
  // The counter-based generator gives the same values on every device.
  manual_seed(42);
  EXPECT_EQ(rand({1000}, cpu()).to_vector<float>(), a);
  double mean = 0, var = 0;
  for (double x : n) mean += x;
  mean /= n.size();
  for (double x : n) var += (x - mean) * (x - mean);
  var /= n.size();
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(var, 1, 0.05);
  for (float x : a) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, 1.0f);
  }
  const auto u = uniform({1000}, -2, 3, {kFloat64, device()}).to_vector<double>();
  for (double x : u) {
    EXPECT_GE(x, -2);
    EXPECT_LT(x, 3);
  }
  const auto g = normal({20000}, 5, 0.5, device()).to_vector<double>();
  double gm = 0;
  for (double x : g) gm += x;
  EXPECT_NEAR(gm / g.size(), 5, 0.02);
  expect_throw_with<DtypeError>([&] { rand({2}, {kInt32, device()}); }, {"[rand]", "int32"});
  expect_throw_with<Error>([&] { uniform({2}, 1, 1, device()); }, {"[uniform]", "low < high"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Factories);

// Normal draws are Box-Muller from one Philox draw each (backend/philox.h): the CPU's
// vectorized log and cos (Note [Vectorized normal draws] in backend/cpu/normal_draws.h) and
// a GPU's own give libm's double values within a few ulp, and the same float32 values, at an
// offset that is not a multiple of any chunk, across the quarter turns where cos is 0.
TEST_P(Factories, NormalDrawsAreLibmsBoxMullerWithinAFewUlp) {
  constexpr std::uint64_t kSeed = 0x5eed, kOffset = 12345;
  constexpr std::int64_t kCount = 100003;
  const Tensor d = empty({kCount}, {kFloat64, device()}), f = empty({kCount}, device());
  detail::backend_of(device()).random(d, detail::RandomKind::kNormal, 0, 1, kSeed, kOffset);
  detail::backend_of(device()).random(f, detail::RandomKind::kNormal, 2, 3, kSeed, kOffset);
  const auto got = d.to_vector<double>();
  const auto got_f = f.to_vector<float>();
  double worst = 0;
  for (std::int64_t i = 0; i < kCount; ++i) {
    const detail::Philox4 r = detail::philox4x32(kOffset + static_cast<std::uint64_t>(i), kSeed);
    const double want = detail::normal_double(r);
    // In units of the radius sqrt(-2 ln u1)'s ulp: libm's cos(6.283185307179586 u2) is off by
    // the product's rounding, a few 1e-16 absolutely, which is many ulp of a value near 0.
    const double radius = std::sqrt(-2.0 * std::log((r.x[2] + 1.0) / 4294967296.0));
    if (radius > 0) worst = std::max(worst, std::abs(got[i] - want) / (radius * 0x1p-52));
    EXPECT_EQ(got_f[i], static_cast<float>(2 + 3 * want)) << "draw " << i;
  }
  EXPECT_LE(worst, 8);
}

// uniform() draws in [low, high): low + (high - low) * u rounded up to high for u near 1 (3%
// of the draws here in float32); ranges past the dtype fill inf. Integer aranges count in
// int64 (past 2^53 in double they repeated values) and refuse values the dtype cannot hold.
TEST_P(Factories, UniformStaysBelowHighAndArangeCountsExactly) {
  manual_seed(1);
  for (const Dtype dtype : {kFloat32, kFloat64}) {
    const double low = dtype == kFloat32 ? 1e6 : 1e15;
    const Tensor u = uniform({100000}, low, low + 1, {dtype, device()});
    EXPECT_EQ((u >= low + 1).to(kInt64).sum().item<std::int64_t>(), 0) << dtype_name(dtype);
    EXPECT_EQ((u < low).to(kInt64).sum().item<std::int64_t>(), 0) << dtype_name(dtype);
  }
  expect_throw_with<Error>([&] { (void)uniform({4}, -1e38, 3e38, device()); },
                           {"[uniform] the range [-1e+38, 3e+38) spans more than float32 holds"});
  expect_throw_with<Error>(
      [&] { (void)uniform({4}, 0, std::numeric_limits<double>::infinity(), device()); },
      {"[uniform]", "choose a narrower range"});
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(5.0).dtype(), kFloat32);  // as PyTorch: written as a floating value
  EXPECT_EQ(arange(0, 5, 1.0).dtype(), kFloat32);
  EXPECT_EQ(arange(9007199254740992LL, 9007199254740996LL, 1, device()).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9007199254740992, 9007199254740993, 9007199254740994,
                                       9007199254740995}));
  // Integers past 2^53 are counted and computed in integers: in double the first began at
  // 2^53 and the others were empty.
  EXPECT_EQ(arange(9007199254740993LL, 9007199254740997LL, 1, device()).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9007199254740993, 9007199254740994, 9007199254740995,
                                       9007199254740996}));
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(arange(kMax - 3, kMax, 1, device()).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{kMax - 3, kMax - 2, kMax - 1}));
  EXPECT_EQ(arange(kMax, kMax - 3, -1, device()).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{kMax, kMax - 1, kMax - 2}));
  EXPECT_EQ(arange(kMax, 0, -(1LL << 62), device()).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{kMax, kMax - (1LL << 62)}));
  EXPECT_EQ(arange(100000000000000001LL, 100000000000000002LL, 1, device()).numel(), 1);
  expect_throw_with<Error>(
      [&] { (void)arange(std::numeric_limits<std::int64_t>::min(), kMax, 1LL << 62, device()); },
      {"[arange] start=-9223372036854775808, end=9223372036854775807, step=4611686018427387904: "
       "the values span more than int64 holds"});
  // More values than any tensor holds: this recursed until the stack overflowed, and past
  // 2^63 values the count wrapped ("step 1 goes away from end").
  expect_throw_with<OutOfMemoryError>([&] { (void)arange(std::int64_t{1} << 54, device()); },
                                      {"[arange]", "make 18014398509481984 values, more than"});
  expect_throw_with<OutOfMemoryError>(
      [&] { (void)arange(std::numeric_limits<std::int64_t>::min(), kMax, 1, device()); },
      {"[arange]", "more than any tensor holds"});
  expect_throw_with<Error>(
      [&] {
        (void)arange(1LL << 60, (1LL << 60) + 2, 1, {kInt32, device()});
      },
      {"[arange] the value 1152921504606846976 does not fit int32"});
  expect_throw_with<Error>(
      [&] {
        (void)arange(0, 6e9, 1e9, {kInt32, device()});
      },
      {"[arange] the value 5000000000 does not fit int32",
       // A factory's fix is its options: it said to convert a tensor it had not made.
       "ask for a wider dtype in its options (kInt64 or kFloat64)"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)full({2}, 300, {kUInt8, device()});
      },
      {"[full] the value 300 does not fit uint8", "in its options"});
  // The *_like factories name themselves, not the factory they share code with.
  expect_throw_with<DtypeError>(
      [&] {
        (void)full_like(zeros({2}, {kInt64, device()}), 1e19);
      },
      {"[full_like] the value 1e+19 does not fit int64", "in its options"});
  expect_throw_with<Error>([&] { (void)zeros_like(Tensor()); }, {"[zeros_like]"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)full({2}, 1e6, {kFloat16, device()});
      },
      {"[full]",
       "round to infinity; ask for a wider dtype in its "
       "options (kFloat64)"});
  const Tensor top = arange(9223372036854774784LL, 9223372036854775807LL, 512, {kInt64, device()});
  EXPECT_EQ(top.to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{9223372036854774784, 9223372036854775296}))
      << "values near 2^63 fit int64";
  expect_throw_with<Error>(
      [&] {
        (void)arange(-9.2e18, 9.2e18, 4e18, {kInt64, device()});
      },
      {"[arange] start=-9.2e+18, end=9.2e+18, step=4e+18 run past int64's range"});
  EXPECT_EQ(arange(0.5, 3, 1, {kInt64, device()}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(Print, LooksLikePyTorch) {
  const Tensor x = ones({2, 3});
  if (!has_logical_cpu_devices()) {
    EXPECT_EQ(x.str(), "tensor([[1., 1., 1.],\n        [1., 1., 1.]])");
    EXPECT_EQ(tensor({1, 2, 3}).str(), "tensor([1, 2, 3])");
    EXPECT_EQ(tensor(3.25).str(), "tensor(3.2500)");
    EXPECT_EQ(tensor({0.5, -1.25}, kFloat64).str(), "tensor([ 0.5000, -1.2500], dtype=float64)");
    EXPECT_EQ(tensor({true, false}).str(), "tensor([ True, False])");
    EXPECT_EQ(zeros({0}).str(), "tensor([])");
    EXPECT_EQ(tensor({1e-6, 1.0}).str(), "tensor([1.0000e-06, 1.0000e+00])");
    const std::string big = zeros({100, 100}).str();
    EXPECT_NE(big.find("..."), std::string::npos);
    EXPECT_LT(big.size(), 400u);
  } else {
    // With logical devices every CPU device is a device apart from the host: shown.
    EXPECT_EQ(ones({2}, cpu(1)).str(), "tensor([1., 1.], device=cpu:1)");
    EXPECT_EQ(ones({2}, cpu(0)).str(), "tensor([1., 1.], device=cpu:0)");
  }
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
}

// PyTorch's notation rule: values spanning more than 1000x print in scientific notation
// (0.00012 and 0.00014 beside 1000.5 both showed as 0.0001), and the rule sees only the
// values shown. A summarized tensor reads only those (it was copied whole to the host), and
// an empty one reads nothing.
TEST_P(Factories, PrintingShowsDistinctValuesAndReadsOnlyWhatItShows) {
  const auto body = [](const Tensor& t) {
    const std::string s = t.str();
    return s.substr(0, s.find(']') + 1);
  };
  EXPECT_EQ(body(tensor({0.00012, 0.00014, 1000.5}, {kFloat64, device()})),
            "tensor([1.2000e-04, 1.4000e-04, 1.0005e+03]");
  EXPECT_EQ(body(tensor({1.0, 10000.0}, device())), "tensor([1.0000e+00, 1.0000e+04]");
  EXPECT_EQ(body(full({1}, 1e8, device())), "tensor([100000000.]");
  std::vector<double> v(2001, 1.5);
  v[1000] = 1e9;  // hidden by the summary: does not decide the notation
  const Tensor wide = from_vector(v, {2001}, {kFloat64, device()});
  EXPECT_EQ(body(wide), "tensor([1.5000, 1.5000, 1.5000, ..., 1.5000, 1.5000, 1.5000]");
  const Tensor m = arange(0.0, 3000.0, 1.0, {kInt64, device()}).reshape({1000, 3});
  reset_transfer_stats();
  const std::string s = m.str();
  EXPECT_NE(s.find("[2997, 2998, 2999]]"), std::string::npos) << s;
  EXPECT_NE(s.find("[   0,    1,    2],"), std::string::npos) << s;
  if (!detail::is_host(device())) {
    EXPECT_EQ(transfer_stats(device()).d2h_bytes, 6u * 3u * sizeof(std::int64_t));
    reset_transfer_stats();
    EXPECT_EQ(zeros({0, 3}, {kInt64, device()}).str().find("dtype=int64") != std::string::npos,
              true);
    EXPECT_EQ(transfer_stats(device()).host_waits, 0u) << "an empty tensor reads nothing";
  }
}

TEST(Print, IntegersPrintEveryDigit) {
  const std::int64_t big = 9007199254740993LL;  // 2^53 + 1: no double holds it
  const Tensor t = from_vector(std::vector<std::int64_t>{big, -big}).to(cpu());
  EXPECT_NE(t.str().find("9007199254740993, -9007199254740993"), std::string::npos) << t.str();
}

}  // namespace
}  // namespace tessera

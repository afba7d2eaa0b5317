// A library that exports an internal function, as tessera would without hidden visibility:
// scripts/check-exports must refuse it (CTest lint.exports_refuses_a_leak).
namespace tessera::detail {
__attribute__((visibility("default"))) int leaked() { return 1; }
}  // namespace tessera::detail

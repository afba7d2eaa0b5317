#pragma once
/// Sequential: modules applied in order, indexable like the book's net[0].
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/export.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class TESSERA_API Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  /// Sequential(nn::Linear(2, 8), nn::ReLU(), nn::Linear(8, 1)): takes ownership of
  /// modules given as temporaries; pass a std::shared_ptr to keep a handle on one (a module
  /// has one place in a model: Error for one added twice). One Sequential temporary alone,
  /// Sequential(Sequential(...)), is that Sequential itself (C++ elides the copy), not a
  /// nested one: nest it with Sequential(std::make_shared<Sequential>(...)).
  template <typename... Ms>
    requires(sizeof...(Ms) > 0)
  explicit Sequential(Ms&&... modules) : Sequential() {
    if constexpr ((addable<Ms> && ...)) {
      (push_back(std::forward<Ms>(modules)), ...);
    } else {
      // One line that names the fix, instead of 35 about push_back's constraints.
      static_assert((addable<Ms> && ...),
                    "nn::Sequential(...) takes modules as temporaries (nn::Linear(2, 8)) or as "
                    "std::shared_ptr (std::make_shared<nn::Linear>(2, 8)); a named module "
                    "would be copied: write std::move(layer), or keep it in a std::shared_ptr "
                    "to share it. A function (relu) is no module: use nn::ReLU()");
    }
  }

  /// Appends a module (named by its index, "0", "1", ...) and returns it.
  Module& push_back(std::shared_ptr<Module> module);
  template <typename M>
    requires std::derived_from<M, Module> && (!std::is_lvalue_reference_v<M>)
  M& push_back(M&& module) {
    return static_cast<M&>(push_back(std::make_shared<M>(std::move(module))));
  }

  /// Whether Sequential(...) takes an argument of type M: a module temporary or a shared_ptr.
  template <typename M>
  static constexpr bool addable =
      (std::derived_from<std::remove_cvref_t<M>, Module> && !std::is_lvalue_reference_v<M>) ||
      std::is_convertible_v<M, std::shared_ptr<Module>>;

  std::size_t size() const { return layers_.size(); }
  /// The i-th module; Error when i is out of range.
  Module& operator[](std::size_t i) const;
  /// The i-th module as its class, e.g. net.at<nn::Linear>(0).weight; Error naming the
  /// actual class when it is another.
  template <typename M>
  M& at(std::size_t i) const {
    Module& m = (*this)[i];
    if (auto* typed = dynamic_cast<M*>(&m)) return *typed;
    throw_wrong_type(i, m);
  }

  Tensor forward(const Tensor& x) override;

 private:
  [[noreturn]] void throw_wrong_type(std::size_t i, const Module& m) const;
  std::vector<Module*> layers_;  // owned through the children list
};

}  // namespace tessera::nn

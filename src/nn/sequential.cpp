// Sequential.
#include "tessera/nn/sequential.h"

#include "core/check.h"

namespace tessera::nn {

Module& Sequential::push_back(std::shared_ptr<Module> module) {
  Module& m = register_module(std::to_string(layers_.size()), std::move(module), true);
  layers_.push_back(&m);
  return m;
}

Module& Sequential::operator[](std::size_t i) const {
  // A negative index arrives as a huge one (size_t): say so rather than print 2^64 - 1.
  constexpr std::size_t kNegative = std::size_t{1} << 63;
  TESSERA_CHECK(
      i < kNegative, Error, "[Sequential] {}[{}]: indices count from 0 and cannot be negative; {}",
      path(), static_cast<std::int64_t>(i),
      layers_.empty()
          ? std::string("this Sequential is empty")
          : fmt::format("the last module is [size() - 1], here [{}]", layers_.size() - 1));
  TESSERA_CHECK(i < layers_.size(), Error, "[Sequential] {} has {} modules, there is no [{}]",
                path(), layers_.size(), i);
  return *layers_[i];
}

void Sequential::throw_wrong_type(std::size_t i, const Module& m) const {
  throw Error(
      fmt::format("[Sequential] {}[{}] is a {}, not the class asked for; use "
                  "at<nn::{}>({})",
                  path(), i, m.type_name(), m.type_name(), i));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (Module* m : layers_) y = (*m)(y);
  return y;
}

}  // namespace tessera::nn

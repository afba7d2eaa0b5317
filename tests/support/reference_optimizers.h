#pragma once
// Float64 host references of PyTorch's optimizer formulas, for the optimizer and gradient
// scaler tests.
#include <cmath>
#include <vector>

#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"

namespace tessera::testing {

// torch.optim.SGD's single-tensor update.
struct RefSgd {
  optim::SgdOptions o;
  std::vector<double> buf;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    const bool first = buf.empty();
    if (first) buf.resize(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      double d = g[i] + o.weight_decay * w[i];
      if (o.momentum != 0) {
        buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      w[i] -= o.lr * d;
    }
  }
};

// torch.optim.Adam / AdamW's single-tensor update (amsgrad off).
struct RefAdam {
  optim::AdamOptions o;
  bool decoupled = false;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& w, const std::vector<double>& g) {
    if (m.empty()) m.assign(w.size(), 0), v.assign(w.size(), 0);
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < w.size(); ++i) {
      double gi = g[i];
      if (decoupled) {
        w[i] *= 1 - o.lr * o.weight_decay;
      } else {
        gi += o.weight_decay * w[i];
      }
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      w[i] -= o.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
    }
  }
};

}  // namespace tessera::testing

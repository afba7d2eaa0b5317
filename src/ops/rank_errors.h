#pragma once
// Errors every rank of a process group throws together, told apart from a rank's own: see
// Note [Leaving after an error alone] in src/distributed/mpi_world.cpp. A rank's own error
// leaves the others waiting for it in a collective, so its exit must not wait for them; an
// error every rank throws at once (a comparison of calls or facts across ranks found a
// difference) leaves nobody waiting.
#include <exception>

namespace tessera::detail {

// Marks `error`, about to be thrown on every rank at once.
void mark_thrown_on_every_rank(const std::exception_ptr& error);
// Whether `error` is the error last marked on this thread.
bool thrown_on_every_rank(const std::exception_ptr& error);

// Runs `checks`, which throw the same error on every rank or none, marking what they throw.
template <typename Checks>
void on_every_rank(Checks&& checks) {
  try {
    checks();
  } catch (...) {
    mark_thrown_on_every_rank(std::current_exception());
    throw;
  }
}

}  // namespace tessera::detail

#pragma once
/// Process groups: collectives across processes (ranks), one tensor per process, as
/// multi-process data-parallel training uses them. Launch the ranks with mpirun
/// (`mpirun -np 2 ./app`); a program started without a launcher is a world of one.
///
///   ProcessGroup& pg = ProcessGroup::init();       // MPI: CPU tensors
///   Tensor g = ...;                                // on cpu (or cpu:i)
///   pg.all_reduce(g, ReduceKind::kMean);           // every rank now holds the mean
///
/// Backends: kMpi moves CPU tensors (the plain CPU or logical CPU devices, where the
/// collective is queued on the device's work queue like any kernel); kNccl moves GPU tensors,
/// one process per GPU, and uses MPI only to start. Every rank must make the same calls
/// (barriers too) in the same order with tensors of the same dtype and shape, and with MPI
/// on the same device (cpu:i): the group compares them across ranks first (a short exchange
/// on the host) and throws on every rank when they differ or when one rank refuses its call
/// on its own (that rank with its own error, the others naming it); an all_reduce's ReduceKind
/// is compared too. Integer sums wrap. The bytes a rank receives are counted in the transfer
/// ledger (d2d, on the tensor's device). MPI is finalized when the process exits, after this
/// process's queued collectives have run; finalizing waits for every rank. A rank that catches
/// an error the others may not have got (Trainer::fit notes every error that escapes it, with
/// note_failure) waits at most 10 s for them at exit, then ends the world (MPI_Abort, naming
/// itself and the error) instead of waiting for ever for ranks that wait for it; call
/// abort_world() where the error is caught, as `tessera train` does, to end them at once.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/collectives.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

/// What moves the bytes between processes.
enum class ProcessBackend : std::uint8_t { kMpi, kNccl };

class TESSERA_API ProcessGroup {
 public:
  /// Joins the world of processes (initialising MPI when nothing has yet) and returns its
  /// group for `backend`; later calls return the same group. Throws Error when tessera was
  /// built without MPI, when MPI's thread level cannot serve logical CPU devices' queues,
  /// or when the ranks disagree on TESSERA_CPU_DEVICES; throws DeviceError for kNccl in a
  /// process that sees no GPU. Waits for every rank to arrive.
  static ProcessGroup& init(ProcessBackend backend = ProcessBackend::kMpi);
  /// The group init() made for `backend`. Throws Error when init() has not been called.
  static ProcessGroup& world(ProcessBackend backend = ProcessBackend::kMpi);

  /// How many ranks a launcher (mpirun) started this program with, read from the
  /// environment without starting MPI: 1 without a launcher, 0 when it does not say.
  static int launched_size();
  /// This process's index among the ranks on its machine (0 without a launcher): the GPU a
  /// one-process-per-GPU program takes.
  static int local_rank();

  /// After an error on this rank: ends every rank of the world at once (MPI_Abort, which
  /// mpirun reports with this rank's number) so that none waits for this one forever.
  /// Returns when no world of two or more processes was joined.
  static void abort_world(int code);

  /// Notes that this rank had an error (`what`) the other ranks may not have had, so they may
  /// wait for it in a collective: at exit this rank then waits at most 10 s for every rank to
  /// exit too (ranks that all failed together do, at once) and otherwise ends the world with
  /// MPI_Abort, saying why, instead of waiting for ever in MPI_Finalize. Trainer::fit notes
  /// every error that escapes it; call this for errors of your own loops. Only the first is
  /// kept. Applies when tessera initialised MPI (a program that did finalizes it itself).
  void note_failure(const std::string& what) const;

  /// This process's index in the world, 0 .. size() - 1.
  int rank() const { return rank_; }
  /// How many processes the world has (1 without a launcher).
  int size() const { return size_; }
  ProcessBackend backend() const { return backend_; }

  /// Replaces `tensor`, in place, with its sum (or mean) over the ranks. Contiguous, not
  /// bool; a mean needs a floating tensor. Queued on the tensor's device (no wait for the device;
  /// the host meets the other ranks for the check). Throws DeviceError for a tensor the backend
  /// cannot move, DtypeError or ShapeError when the ranks' tensors differ.
  void all_reduce(const Tensor& tensor, ReduceKind op = ReduceKind::kSum) const;
  /// Copies rank `root`'s tensor into every other rank's, in place. Same errors; Error for a
  /// root outside [0, size()) or roots that differ across ranks.
  void broadcast(const Tensor& tensor, int root = 0) const;
  /// Every rank's tensor concatenated along dim 0, in rank order (size() times the rows), on
  /// the tensor's device. ShapeError for a 0-dim tensor; otherwise as all_reduce.
  Tensor all_gather(const Tensor& tensor) const;
  /// Every rank's `mine`, rank after rank (size() * mine.size() values), exchanged on the
  /// host: no tensor, no device, no wait for queued work (for small facts the ranks must
  /// agree on, such as which parameters got a gradient this step). Every rank must pass as
  /// many values: Error on every rank otherwise.
  std::vector<std::int64_t> exchange(const std::vector<std::int64_t>& mine) const;
  /// Blocks the host until every rank has called barrier(). Does not wait for queued device
  /// work: synchronize() first when the barrier must also order it.
  void barrier() const;

 private:
  ProcessGroup(ProcessBackend backend, int rank, int size)
      : backend_(backend), rank_(rank), size_(size) {}
  ProcessBackend backend_;
  int rank_;
  int size_;
};

/// "mpi" or "nccl".
TESSERA_API const char* process_backend_name(ProcessBackend backend);

}  // namespace tessera

// The MPI layer of the backend: MPI's lifetime, one communicator
// per process group, and MpiOp, the MPI requests of one op.
//
// MPI is initialised once per process, when the first process group is
// created (never at import), at MPI_THREAD_MULTIPLE: every process group runs
// its ops on a worker thread of its own, and groups are created on the
// caller's thread meanwhile, so several threads call MPI at once. If the
// program initialised MPI itself (mpi4py does at import), that level is
// checked instead. The backend finalises MPI at exit if it initialised it.
//
// An op body starts non-blocking MPI calls (MPI_Iallreduce, MPI_Isend, ...) and
// hands their requests over with MpiOp::completeLater(). Bodies only start
// (kBodiesOnlyStart in ops.hpp), so a collective runs on the caller's thread when
// nothing is queued before it. The caller waiting for the op tests the
// requests itself (MPI_Test), as MPI_Allreduce would; the worker thread tests
// those of the ops nobody waits for, between later ops, so ops overlap. The op
// fails when its deadline passes, it is aborted or the group is destroyed.
// MPI cannot cancel a collective: one that was given up on keeps its buffers
// (and its communicator) alive, and, like every failed collective, leaves the
// process group unusable (the plumbing's Health). A receive given up on is
// cancelled; if MPI had matched its message already, the message is
// delivered when the op can still succeed, and otherwise the group becomes
// unusable, since the next receive from that rank would take the wrong one.
//
// Like ops.hpp this header includes only <ATen/core/Tensor.h>, and <mpi.h>.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"

// Calls an MPI function and throws (naming it and MPI's error) unless it
// returned MPI_SUCCESS: CHECK_MPI(MPI_Ibarrier(comm, &request)).
#define CHECK_MPI(call) ::NEW_BACKEND_NAMESPACE::checkMpi((call), #call)

namespace NEW_BACKEND_NAMESPACE {

struct OpContext;
enum class Reduction;
class MpiUse;

// Throws a c10::Error naming `call` (up to its first parenthesis) and MPI's
// message for `code`, unless `code` is MPI_SUCCESS.
void checkMpi(int code, const char* call);

// The MPI datatype that carries a tensor of `dtype`, or MPI_DATATYPE_NULL.
// Types MPI lacks (float16, bfloat16, float8...) travel as unsigned integers of
// the same width.
MPI_Datatype mpiDatatype(c10::ScalarType dtype);

// The MPI_Op that performs `op` on `dtype`, or MPI_OP_NULL where there is
// none. AVG is MPI_SUM (the op divides afterwards); float16 and bfloat16 use
// ops of our own (MPI_Op_create) that compute in float.
MPI_Op mpiReduction(Reduction op, c10::ScalarType dtype);

// This process in MPI_COMM_WORLD, as {rank, size}; initialises MPI if needed.
std::pair<int, int> mpiWorld();

// `value` as rank 0 of MPI_COMM_WORLD has it (MPI_Bcast); initialises MPI if needed.
std::string mpiBroadcast(const std::string& value);

// Whether MPI is initialised and not finalised, by anyone.
bool mpiInitialized();

// Called at exit: finalises MPI if this backend initialised it, and this
// process is not a child forked after that. Ops still in flight fail first.
// MPI_Finalize is called even when ops never completed (a peer died or timed
// out), as every rank must (the launcher ends the job when one exits
// without it), with a warning on stderr; should it not return within 30 s,
// the process exits with status 1.
void finalizeMpi();

// The MPI communicator of one process group.
class MpiComm {
 public:
  // Creates the communicator whose rank i is MPI_COMM_WORLD's rank
  // globalRanks[i], from `parent`, which holds them all
  // (MPI_Comm_create_group: collective over those processes only). `rank` is
  // this process's rank in the group as torch.distributed numbers it;
  // `isWorld` is true for the default group. Fails with a clear error if
  // torch.distributed and MPI disagree on who this process is.
  MpiComm(
      const std::string& backend,
      const std::vector<int64_t>& globalRanks,
      int rank,
      bool isWorld,
      MPI_Comm parent = MPI_COMM_WORLD);
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const {
    return comm_;
  }

  // The largest tag MPI allows (MPI_TAG_UB).
  int maxTag() const {
    return maxTag_;
  }


 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int maxTag_ = 0;
};

// A tensor as MPI sees it: memory, element count and datatype. It is the
// tensor's own memory when the tensor is contiguous and on the CPU; otherwise
// a contiguous CPU copy (see MpiOp::in/out/inout).
struct Buffer {
  void* ptr = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  size_t itemsize = 0;
};

// The MPI requests of one op, and what they need until they complete.
//
//   MpiOp mpi(ctx, ctx.comm.mpi);
//   const Buffer data = mpi.inout(tensor);
//   CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data.ptr, data.count, data.type,
//                            MPI_SUM, mpi.comm(), mpi.request()));
//   mpi.completeLater();
//
// Staging copies (for non-contiguous or non-CPU tensors) are written back to
// the tensors when the requests complete. An MpiOp dropped before its
// requests completed (an MPI call threw) keeps its buffers alive for MPI.
class MpiOp {
 public:
  // The requests of the op `ctx` on the group's communicator `comm`.
  MpiOp(const OpContext& ctx, std::shared_ptr<MpiComm> comm);
  ~MpiOp();
  MpiOp(const MpiOp&) = delete;
  MpiOp& operator=(const MpiOp&) = delete;

  MPI_Comm comm() const;

  // A buffer MPI reads from.
  Buffer in(const at::Tensor& tensor);
  // A buffer MPI writes to; a staging copy is written back at completion.
  Buffer out(const at::Tensor& tensor);
  // The same, apart from `input`: MPI forbids a receive buffer that overlaps
  // the send buffer, as in reduce_scatter_tensor(input.chunk(n)[rank], input),
  // so then it is a staging copy.
  Buffer out(const at::Tensor& tensor, const Buffer& input);
  // A buffer MPI reads and writes.
  Buffer inout(const at::Tensor& tensor);
  // Several tensors of one dtype, one after the other, as one buffer: their
  // own memory when they already lie back to back in one storage, else a
  // staging copy. An empty list is an empty buffer (ptr == nullptr).
  Buffer in(const std::vector<at::Tensor>& tensors);
  Buffer out(const std::vector<at::Tensor>& tensors);

  // A request of a collective (MPI cannot cancel it).
  MPI_Request* request();
  // A request of a send.
  MPI_Request* sendRequest();
  // A request of a receive into `into`: cancelled if given up on, and on
  // completion the message must have filled `into` exactly.
  MPI_Request* recvRequest(const Buffer& into);

  // `tag` after checking it is one MPI allows (0..MPI_TAG_UB).
  int tag(int tag) const;
  // Keeps `values` (counts, offsets) alive until the requests complete, as
  // non-blocking MPI calls require; returns their address.
  const int* keep(std::vector<int> values);
  // For AVG: divides `tensor` by the group size once the requests completed.
  void divideIfAverage(Reduction op, const at::Tensor& tensor);

  // Returns now; the op completes when every request has (tested by the
  // caller waiting for it, else by the worker thread), and fails when its
  // deadline passes or the group is destroyed first.
  void completeLater();
  // For a receive from any source (MPI_ANY_SOURCE): completeLater(), and once
  // the message arrived its sender's rank becomes the op's result
  // (OpContext::source). Returns -1, the rank not known yet.
  int completeLaterWithSource();

  struct State;

 private:
  const OpContext& ctx_;
  std::unique_ptr<MpiUse> use_;  // MPI is not finalized while the body calls it
  std::shared_ptr<State> state_;
};

} // namespace NEW_BACKEND_NAMESPACE

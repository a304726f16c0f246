// The collectives of the "mpi_all" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the runtime in
// runtime/ (vendored) does the rest: queueing, futures, timeouts and errors.
//
// As generated, every op is the natural non-blocking MPI call (MPI_Iallreduce,
// MPI_Ibcast, MPI_Isend, ...) on the group's communicator, on the tensors'
// own memory. The body starts the call and returns; the worker thread
// completes the op when MPI has (see MpiOp in mpi_comm.hpp), so the group's
// next ops start meanwhile.
#include "ops.hpp"

#include <iostream>
#include <algorithm>
#include <climits>
#include <functional>

namespace mpi_all_collectives {

bool supportsDtype(c10::ScalarType dtype) {
  return mpiDatatype(dtype) != MPI_DATATYPE_NULL;  // see mpi_comm.cpp for the mapping
}

bool supportsReduction(Reduction op, c10::ScalarType dtype) {
  return mpiReduction(op, dtype) != MPI_OP_NULL;
}

// Helpers of the MPI implementation (inline: a backend with few ops does not
// use them all).
namespace {

// The MPI_Op of `op` on the tensor's dtype (supportsReduction() checked there is one).
inline MPI_Op reduction(Reduction op, const at::Tensor& tensor) {
  return mpiReduction(op, tensor.scalar_type());
}

// A tensor's element count as MPI counts it (an int).
inline int elementCount(const at::Tensor& tensor) {
  TORCH_CHECK(
      tensor.numel() <= INT_MAX,
      "a tensor of ", tensor.numel(), " elements is more than one MPI call can count");
  return static_cast<int>(tensor.numel());
}

// Elements per row of dimension 0 (what all_to_all_single splits count).
inline int64_t rowNumel(const at::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d = 1; d < tensor.dim(); ++d) {
    n *= tensor.size(d);
  }
  return n;
}

// Split sizes in rows, as element counts.
inline std::vector<int> elementCounts(const std::vector<int64_t>& splits, int64_t rowSize) {
  std::vector<int> counts;
  for (int64_t rows : splits) {
    TORCH_CHECK(
        rows * rowSize <= INT_MAX,
        "a split of ", rows * rowSize, " elements is more than one MPI call can count");
    counts.push_back(static_cast<int>(rows * rowSize));
  }
  return counts;
}

// Where each piece starts when the pieces lie one after the other.
inline std::vector<int> offsets(const std::vector<int>& counts) {
  std::vector<int> result;
  int64_t offset = 0;
  for (int count : counts) {
    TORCH_CHECK(offset <= INT_MAX, "an offset of ", offset, " elements is more than MPI can count");
    result.push_back(static_cast<int>(offset));
    offset += count;
  }
  return result;
}

inline bool allEqual(const std::vector<int>& values) {
  return std::adjacent_find(values.begin(), values.end(), std::not_equal_to<int>()) == values.end();
}

// MPI_IN_PLACE when `send` already is this rank's piece of `recv`, as in
// all_gather_into_tensor(out, out.chunk(size)[rank]): MPI forbids overlapping
// send and receive buffers.
inline const void* inPlaceIfAliased(const Buffer& send, const Buffer& recv, int rank) {
  if (recv.ptr == nullptr || send.ptr == nullptr) {
    return send.ptr;
  }
  const size_t pieceBytes = static_cast<size_t>(send.count) * send.itemsize;
  const char* piece = static_cast<const char*>(recv.ptr) + rank * pieceBytes;
  return send.ptr == piece ? MPI_IN_PLACE : send.ptr;
}

} // namespace

namespace ops {

// The lifecycle of a group (see ops.hpp).

std::shared_ptr<Communicator> init(const GroupInfo& group) {
  if (group.options.verbose) {
    std::cerr << group.backend << ": rank " << group.rank << " of " << group.size << " creates group "
              << group.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = group.options;
  // Collective over the group's processes: a communicator of MPI_COMM_WORLD.
  comm->mpi = std::make_shared<MpiComm>(group.backend, group.globalRanks, group.rank, group.world);
  return comm;
}

std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child) {
  if (!parent.mpi) {
    return nullptr;  // finalized
  }
  if (child.options.verbose) {
    std::cerr << child.backend << ": rank " << child.rank << " of " << child.size << " splits group "
              << child.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = child.options;
  // Collective over the child's processes only: a communicator of the parent's.
  comm->mpi = std::make_shared<MpiComm>(
      child.backend, child.globalRanks, child.rank, false, parent.mpi->get());
  return comm;
}

void finalize(Communicator& comm) {
  comm.mpi.reset();  // MPI_Comm_free, once ops in flight (which share it) let go
}

void abort(Communicator& comm) {
  // MPI cannot cancel a collective. Ops in flight give up when they see the
  // group aborted, the plumbing refuses every later op, and the communicator
  // is freed only once the ops that share it let go.
  (void)comm;
}

// Copies the root's tensor into the tensor of every rank.
void broadcast(const OpContext& ctx, at::Tensor& tensor, int root) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer data = mpi.inout(tensor);
  CHECK_MPI(MPI_Ibcast(data.ptr, data.count, data.type, root, mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer data = mpi.inout(tensor);
  CHECK_MPI(MPI_Iallreduce(
      MPI_IN_PLACE, data.ptr, data.count, data.type, reduction(op, tensor), mpi.comm(),
      mpi.request()));
  mpi.divideIfAverage(op, tensor);
  mpi.completeLater();
}

// All-reduces several tensors as one operation.
void allreduce_coalesced(const OpContext& ctx, std::vector<at::Tensor>& tensors, Reduction op) {
  // One MPI_Iallreduce per tensor, all in flight at once: no flattening copy.
  MpiOp mpi(ctx, ctx.comm.mpi);
  for (at::Tensor& tensor : tensors) {
    const Buffer data = mpi.inout(tensor);
    CHECK_MPI(MPI_Iallreduce(
        MPI_IN_PLACE, data.ptr, data.count, data.type, reduction(op, tensor), mpi.comm(),
        mpi.request()));
    mpi.divideIfAverage(op, tensor);
  }
  mpi.completeLater();
}

// Reduces the tensor of every rank into the root's tensor.
void reduce(const OpContext& ctx, at::Tensor& tensor, Reduction op, int root) {
  // The root reduces into its own tensor; the other ranks' tensors are only read.
  MpiOp mpi(ctx, ctx.comm.mpi);
  const bool isRoot = ctx.group.rank == root;
  const Buffer data = isRoot ? mpi.inout(tensor) : mpi.in(tensor);
  CHECK_MPI(MPI_Ireduce(
      isRoot ? MPI_IN_PLACE : data.ptr, data.ptr, data.count, data.type, reduction(op, tensor),
      root, mpi.comm(), mpi.request()));
  if (isRoot) {
    mpi.divideIfAverage(op, tensor);
  }
  mpi.completeLater();
}

// Gathers the tensor of every rank into a list on every rank.
void allgather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = mpi.out(outputs);  // in place when the outputs lie back to back
  CHECK_MPI(MPI_Iallgather(
      inPlaceIfAliased(send, recv, ctx.group.rank), send.count, send.type,
      recv.ptr, send.count, recv.type, mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Gathers the tensor of every rank into one flat tensor on every rank.
void _allgather_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = mpi.out(output);
  CHECK_MPI(MPI_Iallgather(
      inPlaceIfAliased(send, recv, ctx.group.rank), send.count, send.type,
      recv.ptr, send.count, recv.type, mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// All-gathers several tensors as one operation.
void allgather_coalesced(const OpContext& ctx, std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs) {
  // One MPI_Iallgather per input, all in flight at once.
  MpiOp mpi(ctx, ctx.comm.mpi);
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> fromRanks;
    for (const std::vector<at::Tensor>& fromRank : outputs) {
      fromRanks.push_back(fromRank[i]);
    }
    const Buffer send = mpi.in(inputs[i]);
    const Buffer recv = mpi.out(fromRanks);
    CHECK_MPI(MPI_Iallgather(
        send.ptr, send.count, send.type, recv.ptr, send.count, recv.type, mpi.comm(), mpi.request()));
  }
  mpi.completeLater();
}

// Runs several flat all-gathers as one operation.
void allgather_into_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  // One MPI_Iallgather per pair, all in flight at once.
  MpiOp mpi(ctx, ctx.comm.mpi);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Buffer send = mpi.in(inputs[i]);
    const Buffer recv = mpi.out(outputs[i]);
    CHECK_MPI(MPI_Iallgather(
        inPlaceIfAliased(send, recv, ctx.group.rank), send.count, send.type,
        recv.ptr, send.count, recv.type, mpi.comm(), mpi.request()));
  }
  mpi.completeLater();
}

// Gathers the tensor of every rank into a list on the root.
void gather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = mpi.out(outputs);  // outputs is empty except on the root
  CHECK_MPI(MPI_Igather(
      inPlaceIfAliased(send, recv, ctx.group.rank), send.count, send.type,
      recv.ptr, send.count, send.type, root, mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Gathers the tensor of every rank into one flat tensor on the root.
void gather_single(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, int root) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = ctx.group.rank == root ? mpi.out(output) : Buffer{};  // used on the root only
  CHECK_MPI(MPI_Igather(
      inPlaceIfAliased(send, recv, ctx.group.rank), send.count, send.type,
      recv.ptr, send.count, send.type, root, mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Sends the root's i-th tensor to rank i.
void scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(inputs);  // inputs is empty except on the root
  const Buffer recv = mpi.out(output);
  CHECK_MPI(MPI_Iscatter(
      send.ptr, recv.count, recv.type, recv.ptr, recv.count, recv.type, root,
      mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Reduces the i-th tensor of every rank into the output of rank i.
void reduce_scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, Reduction op) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(inputs);  // in place when the inputs lie back to back
  const Buffer recv = mpi.out(output, send);  // a copy if it overlaps the input
  CHECK_MPI(MPI_Ireduce_scatter_block(
      send.ptr, recv.ptr, recv.count, recv.type, reduction(op, output), mpi.comm(), mpi.request()));
  mpi.divideIfAverage(op, output);
  mpi.completeLater();
}

// Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
void _reduce_scatter_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, Reduction op) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = mpi.out(output, send);  // a copy if it overlaps the input
  CHECK_MPI(MPI_Ireduce_scatter_block(
      send.ptr, recv.ptr, recv.count, recv.type, reduction(op, output), mpi.comm(), mpi.request()));
  mpi.divideIfAverage(op, output);
  mpi.completeLater();
}

// Runs several flat reduce-scatters as one operation.
void reduce_scatter_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, Reduction op) {
  // One MPI_Ireduce_scatter_block per pair, all in flight at once.
  MpiOp mpi(ctx, ctx.comm.mpi);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Buffer send = mpi.in(inputs[i]);
    const Buffer recv = mpi.out(outputs[i], send);
    CHECK_MPI(MPI_Ireduce_scatter_block(
        send.ptr, recv.ptr, recv.count, recv.type, reduction(op, outputs[i]), mpi.comm(),
        mpi.request()));
    mpi.divideIfAverage(op, outputs[i]);
  }
  mpi.completeLater();
}

// Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
void alltoall_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits) {
  // Splits count rows of dimension 0; MPI counts elements.
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(input);
  const Buffer recv = mpi.out(output, send);
  const std::vector<int> sendCounts = elementCounts(inputSplits, rowNumel(input));
  const std::vector<int> recvCounts = elementCounts(outputSplits, rowNumel(output));
  if (allEqual(sendCounts) && allEqual(recvCounts)) {
    CHECK_MPI(MPI_Ialltoall(
        send.ptr, sendCounts.front(), send.type, recv.ptr, recvCounts.front(), recv.type,
        mpi.comm(), mpi.request()));
  } else {
    // MPI reads the count and offset arrays until the op completes: mpi.keep() holds them.
    CHECK_MPI(MPI_Ialltoallv(
        send.ptr, mpi.keep(sendCounts), mpi.keep(offsets(sendCounts)), send.type,
        recv.ptr, mpi.keep(recvCounts), mpi.keep(offsets(recvCounts)), recv.type,
        mpi.comm(), mpi.request()));
  }
  mpi.completeLater();
}

// Every rank sends its i-th tensor to rank i.
void alltoall(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer send = mpi.in(inputs);
  const Buffer recv = mpi.out(outputs);
  std::vector<int> sendCounts;
  std::vector<int> recvCounts;
  for (int r = 0; r < ctx.group.size; ++r) {
    sendCounts.push_back(elementCount(inputs[r]));
    recvCounts.push_back(elementCount(outputs[r]));
  }
  // MPI reads the count and offset arrays until the op completes: mpi.keep() holds them.
  CHECK_MPI(MPI_Ialltoallv(
      send.ptr, mpi.keep(sendCounts), mpi.keep(offsets(sendCounts)), send.type,
      recv.ptr, mpi.keep(recvCounts), mpi.keep(offsets(recvCounts)), recv.type,
      mpi.comm(), mpi.request()));
  mpi.completeLater();
}

// Sends the tensor to one peer, matched by tag.
void send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  // Completes once MPI no longer needs the tensor; the group's next ops need not wait for it.
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer data = mpi.in(tensor);
  CHECK_MPI(MPI_Isend(
      data.ptr, data.count, data.type, dst, mpi.tag(tag), mpi.comm(), mpi.sendRequest()));
  mpi.completeLater();
}

// Receives a tensor from one peer, matched by tag.
void recv(const OpContext& ctx, at::Tensor& tensor, int src, int tag) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer data = mpi.out(tensor);
  CHECK_MPI(MPI_Irecv(
      data.ptr, data.count, data.type, src, mpi.tag(tag), mpi.comm(), mpi.recvRequest(data)));
  mpi.completeLater();
}

// Receives a tensor from whichever peer sends first with the tag.
int recvAnysource(const OpContext& ctx, at::Tensor& tensor, int tag) {
  // Completes later, as recv does, so that it never holds up the receives posted
  // after it; the sender's rank becomes the op's result once the message arrived.
  MpiOp mpi(ctx, ctx.comm.mpi);
  const Buffer data = mpi.out(tensor);
  CHECK_MPI(MPI_Irecv(
      data.ptr, data.count, data.type, MPI_ANY_SOURCE, mpi.tag(tag), mpi.comm(),
      mpi.recvRequest(data)));
  return mpi.completeLaterWithSource();
}

// Returns once every rank has entered it.
void barrier(const OpContext& ctx) {
  MpiOp mpi(ctx, ctx.comm.mpi);
  CHECK_MPI(MPI_Ibarrier(mpi.comm(), mpi.request()));
  mpi.completeLater();
}

} // namespace ops
} // namespace mpi_all_collectives

{%- set p = project() -%}
// The collectives of the "{{ p.name }}" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the plumbing in
// backend.cpp does the rest: queueing, futures, timeouts and errors.
//
{%- if p.impl == "dummy" %}
// As generated, this is the dummy backend of PyTorch's tutorial: every output
// is zeroed and nothing is sent.
{%- elif p.impl == "store" %}
// As generated, this is a reference implementation that works everywhere
// torch.distributed does: every collective is built from a few exchanges
// through the group's c10d Store (see store_exchange.hpp). It is correct for
// every op, dtype and reduction, and slow: all data passes through the
// store's server. Use it as the expected behaviour while you write your own.
{%- elif p.impl == "mpi" %}
// As generated, every op is the natural non-blocking MPI call (MPI_Iallreduce,
// MPI_Ibcast, MPI_Isend, ...) on the group's communicator, on the tensors'
// own memory. The body starts the call and returns; the worker thread
// completes the op when MPI has (see MpiOp in mpi_comm.hpp), so the group's
// next ops start meanwhile.
{%- endif %}
#include "ops.hpp"

#include <iostream>
{%- if p.impl == "mpi" %}
#include <algorithm>
#include <climits>
#include <functional>
{%- endif %}

namespace {{ p.package }} {
{%- if p.impl == "dummy" %}

bool supportsDtype(c10::ScalarType /* dtype */) {
  return true;  // The dummy only zeroes tensors, which works for every dtype.
}

bool supportsReduction(Reduction /* op */, c10::ScalarType /* dtype */) {
  return true;  // The dummy reduces nothing.
}
{%- elif p.impl == "store" %}

bool supportsDtype(c10::ScalarType dtype) {
  // Anything with a fixed size per element travels through the store.
  return !c10::isQIntType(dtype) && !c10::isBitsType(dtype);
}

bool supportsReduction(Reduction op, c10::ScalarType dtype) {
  if (c10::isFloat8Type(dtype) || c10::isBarebonesUnsignedType(dtype)) {
    return false;  // no CPU arithmetic for these
  }
  switch (op) {
    case Reduction::kBand:
    case Reduction::kBor:
    case Reduction::kBxor:
      return c10::isIntegralType(dtype, /*includeBool=*/true);
    case Reduction::kAvg:
      return c10::isFloatingType(dtype) || c10::isComplexType(dtype);
    case Reduction::kMin:
    case Reduction::kMax:
      return !c10::isComplexType(dtype);
    default:
      return true;
  }
}

// Helpers of the reference implementation (inline: a backend with few ops
// does not use them all).
namespace {

inline StoreExchange& exchange(const OpContext& ctx) {
  return *ctx.comm.exchange;
}

// Reduces one tensor per rank, in rank order, so every rank that reduces the
// same tensors gets the same bits.
inline at::Tensor reduceAll(const std::vector<at::Tensor>& tensors, Reduction op) {
  at::Tensor result = tensors.front().clone(at::MemoryFormat::Contiguous);
  for (size_t i = 1; i < tensors.size(); ++i) {
    const at::Tensor& x = tensors[i];
    switch (op) {
      case Reduction::kSum:
      case Reduction::kAvg:
        result.add_(x);
        break;
      case Reduction::kProduct:
        result.mul_(x);
        break;
      case Reduction::kMin:
        result = result.minimum(x);
        break;
      case Reduction::kMax:
        result = result.maximum(x);
        break;
      case Reduction::kBand:
        result.bitwise_and_(x);
        break;
      case Reduction::kBor:
        result.bitwise_or_(x);
        break;
      case Reduction::kBxor:
        result.bitwise_xor_(x);
        break;
    }
  }
  if (op == Reduction::kAvg) {
    result.div_(static_cast<int64_t>(tensors.size()));
  }
  return result;
}

// Elements per row of dimension 0 (what all_to_all_single splits count).
inline int64_t rowNumel(const at::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d = 1; d < tensor.dim(); ++d) {
    n *= tensor.size(d);
  }
  return n;
}

// Cuts `tensor`, flattened, into consecutive pieces of `counts` elements.
inline std::vector<at::Tensor> splitPieces(
    const at::Tensor& tensor,
    const std::vector<int64_t>& counts) {
  const at::Tensor flat = tensor.reshape(-1);
  std::vector<at::Tensor> pieces;
  int64_t offset = 0;
  for (int64_t count : counts) {
    pieces.push_back(flat.narrow(0, offset, count));
    offset += count;
  }
  return pieces;
}

// Writes `pieces` one after the other into `out`, seen flat.
inline void copyPieces(at::Tensor& out, const std::vector<at::Tensor>& pieces) {
  at::Tensor flat = out.is_contiguous() ? out.view(-1) : out.new_empty({out.numel()});
  int64_t offset = 0;
  for (const at::Tensor& piece : pieces) {
    flat.narrow(0, offset, piece.numel()).copy_(piece.reshape(-1));
    offset += piece.numel();
  }
  if (!out.is_contiguous()) {
    out.copy_(flat.view(out.sizes()));
  }
}

// The tensors, one after the other, in one flat buffer.
inline at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    total += t.numel();
  }
  at::Tensor flat = tensors.front().new_empty({total});
  copyPieces(flat, tensors);
  return flat;
}

// Copies a flat buffer made by flatten() back into the tensors.
inline void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Reduce-scatter of one flat tensor: rank r keeps the r-th chunk of the result.
inline void reduceScatterFlat(
    const OpContext& ctx,
    at::Tensor& output,
    const at::Tensor& input,
    Reduction op) {
  const std::vector<int64_t> counts(ctx.group.size, output.numel());
  const std::vector<at::Tensor> chunks = splitPieces(input, counts);
  output.copy_(reduceAll(exchange(ctx).alltoall(ctx, chunks, counts), op).view(output.sizes()));
}

} // namespace
{%- elif p.impl == "mpi" %}

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
{%- endif %}

namespace ops {

// The lifecycle of a group (see ops.hpp).

std::shared_ptr<Communicator> init(const GroupInfo& group) {
  if (group.options.verbose) {
    std::cerr << group.backend << ": rank " << group.rank << " of " << group.size << " creates group "
              << group.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = group.options;
{%- if p.impl == "dummy" %}
  // Your library's communicator is created here: rank 0 makes a unique id,
  // group.store.set("id", ...) publishes it, the others group.store.get("id").
{%- elif p.impl == "store" %}
  comm->exchange = std::make_shared<StoreExchange>(group.store);
{%- elif p.impl == "mpi" %}
  // Collective over the group's processes: a communicator of MPI_COMM_WORLD.
  comm->mpi = std::make_shared<MpiComm>(group.backend, group.globalRanks, group.rank, group.world);
{%- endif %}
  return comm;
}

std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child) {
{%- if p.impl == "mpi" %}
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
{%- else %}
  (void)parent;
  (void)child;
  return nullptr;  // {{ "each group's exchange is its own store: init() makes it" if p.impl == "store" else "init() makes the child's communicator" }}
{%- endif %}
}

void finalize(Communicator& comm) {
{%- if p.impl == "dummy" %}
  (void)comm;  // your library's communicator is destroyed here
{%- elif p.impl == "store" %}
  comm.exchange->close();  // deletes what failed collectives left in the store
{%- elif p.impl == "mpi" %}
  comm.mpi.reset();  // MPI_Comm_free, once ops in flight (which share it) let go
{%- endif %}
}

void abort(Communicator& comm) {
{%- if p.impl == "dummy" %}
  (void)comm;  // your library's abort goes here: it makes stuck calls return
{%- elif p.impl == "store" %}
  comm.exchange->abort();  // wakes the threads blocked on the store
{%- elif p.impl == "mpi" %}
  // MPI cannot cancel a collective. Ops in flight give up when they see the
  // group aborted, the plumbing refuses every later op, and the communicator
  // is freed only once the ops that share it let go.
  (void)comm;
{%- endif %}
}
{% for op in p.ops %}
// {{ op.summary }}
{{ op.returns }} {{ op.name }}(const OpContext& ctx{{ ", " ~ op.body if op.body }}) {
{%- if p.impl == "dummy" %}
  // Your library's {{ op.name }} goes here.
{%- endif %}
  {{ op.body_for(p.impl) | indent(2) }}
}
{% endfor %}
} // namespace ops
} // namespace {{ p.package }}

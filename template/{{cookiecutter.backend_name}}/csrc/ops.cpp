{%- set p = project() -%}
// The collectives of the "{{ p.name }}" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the runtime in
// runtime/ (vendored) does the rest: queueing, futures, timeouts and errors.
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
{%- elif p.impl == "ucx" %}
// As generated, every collective is a classic algorithm written out over
// UCX's tagged messages (see UcxMessages in ucx_comm.hpp): ring reduce-scatter
// and all-gather (together, all_reduce), binomial trees for broadcast and
// reduce, pairwise exchange for all_to_all, dissemination for barrier. They
// work on host memory: CUDA tensors are staged through a host copy.
{%- endif %}
#include "ops.hpp"
{%- if p.impl == "ucx" %}

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
{%- endif %}

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
{%- elif p.impl == "ucx" %}

bool supportsDtype(c10::ScalarType dtype) {
  // Any fixed-size element travels as bytes.
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

// The building blocks of the algorithms (inline: a backend with few ops does
// not use them all).
namespace {

// The group's UCX connections (made by ops::init).
inline UcxComm& ucx(const OpContext& ctx) {
  return *ctx.comm.ucx;
}

// The tensor as UCX can send it: contiguous, in host memory. The tensor
// itself when it already is.
inline at::Tensor onHost(const at::Tensor& tensor) {
  return tensor.to(at::kCPU).contiguous();
}

// A contiguous host copy of the tensor, to send or to use as scratch.
inline at::Tensor hostCopy(const at::Tensor& tensor) {
  return tensor.to(at::kCPU).clone(at::MemoryFormat::Contiguous);
}

// Copies `host` (made by onHost(tensor)) back into `tensor`, unless it is
// `tensor` itself.
inline void writeBack(at::Tensor& tensor, const at::Tensor& host) {
  if (!host.is_same(tensor)) {
    tensor.copy_(host.view(tensor.sizes()));
  }
}

// How long one test of a receive that waits alone may wait for it. The wait
// sleeps on UCX's events, so a message that comes wakes it at once (the
// receive thread's own polling yields between polls, and on a busy core a
// yield costs milliseconds); a receive posted behind it starts at most this
// late. Receives that wait together are tested in turn without sleeping, so
// that none waits out another's slice.
constexpr auto kReceiveSlice = std::chrono::milliseconds(1);

// Fails the group after the receive of `ctx` gave up on a message UCX had
// matched already (UCX cannot take one back): the next receive from that
// sender would take the message after it.
[[noreturn]] inline void failMidMessage(const OpContext& ctx, int src, const char* what) {
  const std::string why = std::string(ctx.op) + " #" + std::to_string(ctx.seq) + " from " +
      (src < 0 ? std::string("any rank") : "rank " + std::to_string(src)) + " " + what +
      ": a later receive would take the message after it";
  ctx.failGroup(why);
  TORCH_CHECK(false, why);
}

// Receives into `tensor` the message with `tag` from `src` (-1: from any
// rank) and completes later, so that the receive never holds up those posted
// after it; the sender's rank goes to *ctx.source. What the receive needs
// outlives the op's body. UCX receives into a buffer of the op's own, copied
// into `tensor` once the whole message is there, unless the op failed first:
// a message UCX has matched keeps arriving after the receive gave up on it.
inline void receiveLater(const OpContext& ctx, at::Tensor& tensor, int src, int tag) {
  struct Pending {
    Pending(const OpContext& context, UcxComm& comm, at::Tensor host)
        : ctx(context), data(std::move(host)), waiting(comm.receivesWaiting), messages(ctx, comm) {
      ++waiting;
    }
    ~Pending() { --waiting; }
    const OpContext ctx;
    at::Tensor data;
    std::atomic<int>& waiting;
    UcxMessages messages;  // declared last: destroyed first, while ctx lives
  };
  auto pending = std::make_shared<Pending>(ctx, ucx(ctx), at::empty(tensor.sizes(), tensor.options().device(at::kCPU)));
  pending->messages.recvTagged(pending->data, src, tag);
  ctx.completeLater([pending, tensor, src]() mutable {
    const OpContext& ctx = pending->ctx;
    TORCH_CHECK(tensor.defined(), "the receive was given up on already");
    bool complete = false;
    try {
      const bool alone = pending->waiting.load(std::memory_order_relaxed) == 1;
      complete = pending->messages.waitFor(alone ? kReceiveSlice : std::chrono::milliseconds(0));
    } catch (...) {
      tensor = at::Tensor();  // given up on: never touched again
      if (pending->messages.cancelReceives()) {
        failMidMessage(ctx, src, "gave up (timed out or aborted) while its message, which UCX had matched, was arriving");
      }
      throw;
    }
    if (!complete) {
      return false;
    }
    if (ctx.cancelled.load() || ctx.group.aborted.load()) {
      tensor = at::Tensor();  // it failed meanwhile (its caller stopped waiting, or it was aborted)
      failMidMessage(ctx, src, "failed, and then its message arrived");
    }
    tensor.copy_(pending->data);
    *ctx.source = pending->messages.source();
    return true;
  });
}

// Sends `tensor` (contiguous, in host memory) to `dst` with the user's `tag`,
// and completes the op once UCX is done with the message, as gloo's and MPI's
// sends complete: a message UCX sends eagerly at once, one above its
// rendezvous threshold (UCX_RNDV_THRESH) once the receiver has taken it. So
// a completed send is delivered whatever this rank does next, destroying its
// group or exiting included, and its tensor may be reused.
inline void sendLater(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  struct Pending {
    Pending(const OpContext& context, UcxComm& comm) : ctx(context), messages(ctx, comm) {}
    const OpContext ctx;
    UcxMessages messages;  // declared last: destroyed first, while ctx lives
  };
  auto pending = std::make_shared<Pending>(ctx, ucx(ctx));
  pending->messages.sendTagged(tensor, dst, tag);
  if (!pending->messages.test()) {
    ctx.completeLater([pending] { return pending->messages.waitFor(std::chrono::milliseconds(0)); });
  }
}

// acc = acc (op) x, element by element.
inline void reduceInto(at::Tensor& acc, const at::Tensor& x, Reduction op) {
  switch (op) {
    case Reduction::kSum:
    case Reduction::kAvg:  // divided by the group size at the end
      acc.add_(x);
      break;
    case Reduction::kProduct:
      acc.mul_(x);
      break;
    case Reduction::kMin:
      at::minimum_out(acc, acc, x);
      break;
    case Reduction::kMax:
      at::maximum_out(acc, acc, x);
      break;
    case Reduction::kBand:
      acc.bitwise_and_(x);
      break;
    case Reduction::kBor:
      acc.bitwise_or_(x);
      break;
    case Reduction::kBxor:
      acc.bitwise_xor_(x);
      break;
  }
}

// The last step of an average: the sum divided by the number of ranks.
inline void finishAverage(at::Tensor& sum, Reduction op, int ranks) {
  if (op == Reduction::kAvg) {
    sum.div_(ranks);
  }
}

// Cuts a flat tensor into `n` consecutive pieces whose sizes differ by at
// most one element (views: writing a piece writes the tensor).
inline std::vector<at::Tensor> pieces(const at::Tensor& flat, int n) {
  std::vector<at::Tensor> result;
  const int64_t total = flat.numel();
  int64_t offset = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t count = total / n + (i < total % n ? 1 : 0);
    result.push_back(flat.narrow(0, offset, count));
    offset += count;
  }
  return result;
}

// Cuts `tensor`, flattened, into consecutive pieces of `counts` elements.
inline std::vector<at::Tensor> piecesOf(const at::Tensor& flat, const std::vector<int64_t>& counts) {
  std::vector<at::Tensor> result;
  int64_t offset = 0;
  for (int64_t count : counts) {
    result.push_back(flat.narrow(0, offset, count));
    offset += count;
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

// The tensors, one after the other, in one flat host buffer.
inline at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) {
    flat.push_back(t.reshape(-1).to(at::kCPU));
  }
  return at::cat(flat);
}

// Ring reduce-scatter. pieces[i] (made by pieces() from `count` elements) is
// this rank's contribution to piece i;
// afterwards pieces[rank] holds the reduction of every rank's pieces[rank].
//
// In step s (0 <= s < n-1) each rank passes one piece to its right neighbour
// and adds the piece coming from its left neighbour into its own copy of it.
// The piece a rank receives in step s is the one it sends in step s+1, so
// each piece travels once around the ring collecting every rank's values,
// and ends, complete, on the rank it belongs to. Every rank sends and
// receives (n-1)/n of the data: the least any algorithm can.
inline void ringReduceScatter(
    const OpContext& ctx,
    std::vector<at::Tensor>& pieces,
    Reduction op,
    int64_t count) {
  const int n = ctx.group.size;
  const int rank = ctx.group.rank;
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  at::Tensor incoming = at::empty_like(pieces[0]);  // the largest piece
  UcxMessages messages(ctx, ucx(ctx), count);
  for (int step = 0; step < n - 1; ++step) {
    const int sendPiece = (rank + 2 * n - step - 1) % n;
    const int recvPiece = (rank + 2 * n - step - 2) % n;
    at::Tensor received = incoming.narrow(0, 0, pieces[recvPiece].numel());
    messages.send(pieces[sendPiece], right);
    messages.recv(received, left);
    messages.wait();
    reduceInto(pieces[recvPiece], received, op);
  }
}

// Ring all-gather. pieces[rank] holds this rank's piece; afterwards every
// pieces[i] holds rank i's. In step s each rank passes on the piece it
// received in step s-1 (its own first). `count`: what every rank must agree
// on (its input's size, or the size of the tensor all-reduced).
inline void ringAllgather(const OpContext& ctx, std::vector<at::Tensor>& pieces, int64_t count) {
  const int n = ctx.group.size;
  const int rank = ctx.group.rank;
  const int right = (rank + 1) % n;
  const int left = (rank + n - 1) % n;
  UcxMessages messages(ctx, ucx(ctx), count);
  for (int step = 0; step < n - 1; ++step) {
    messages.send(pieces[(rank + n - step) % n], right);
    messages.recv(pieces[(rank + n - step - 1) % n], left);
    messages.wait();
  }
}

// All-gather of `input` into `output`, a flat host tensor of size * numel
// elements: rank r's input lands at r * numel.
inline void allgatherFlat(const OpContext& ctx, at::Tensor& output, const at::Tensor& input) {
  std::vector<at::Tensor> all = pieces(output, ctx.group.size);
  all[ctx.group.rank].copy_(input.reshape(-1));
  ringAllgather(ctx, all, input.numel());
}

// Reduce-scatter of a flat host tensor (overwritten as scratch): this rank's
// piece of the result goes to `output`.
inline void reduceScatterFlat(const OpContext& ctx, at::Tensor& output, at::Tensor& scratch, Reduction op) {
  std::vector<at::Tensor> all = pieces(scratch, ctx.group.size);
  ringReduceScatter(ctx, all, op, scratch.numel());
  at::Tensor mine = all[ctx.group.rank];
  finishAverage(mine, op, ctx.group.size);
  output.copy_(mine.view(output.sizes()));
}

// Binomial-tree broadcast from `root` of a contiguous host tensor.
//
// Number the ranks from the root (v = rank - root, mod n). A rank receives
// from v minus its lowest set bit, then sends to v + 2^k for every 2^k below
// that bit: the root reaches n ranks in log2(n) rounds.
inline void treeBroadcast(const OpContext& ctx, at::Tensor& data, int root) {
  const int n = ctx.group.size;
  const int v = (ctx.group.rank + n - root) % n;
  auto rankOf = [&](int vr) { return (vr + root) % n; };
  UcxMessages messages(ctx, ucx(ctx), data.numel());
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      messages.recv(data, rankOf(v - mask));
      messages.wait();
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) {
      messages.send(data, rankOf(v + mask));
    }
  }
  messages.wait();
}

// Binomial-tree reduce to `root`: the broadcast's tree, walked upwards. Each
// rank adds in what its children send, then sends the sum to its parent.
// `acc` (contiguous host) starts as this rank's values and ends, on the
// root, as the result.
inline void treeReduce(const OpContext& ctx, at::Tensor& acc, Reduction op, int root) {
  const int n = ctx.group.size;
  const int v = (ctx.group.rank + n - root) % n;
  auto rankOf = [&](int vr) { return (vr + root) % n; };
  at::Tensor incoming = at::empty_like(acc);
  UcxMessages messages(ctx, ucx(ctx), acc.numel());
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      messages.send(acc, rankOf(v - mask));
      messages.wait();
      return;
    }
    if (v + mask < n) {
      messages.recv(incoming, rankOf(v + mask));
      messages.wait();
      reduceInto(acc, incoming, op);
    }
  }
  finishAverage(acc, op, n);  // only the root gets here
}

// Pairwise all-to-all: in step s each rank sends to rank + s and receives
// from rank - s, so every pair exchanges exactly once and no rank is
// flooded. toSend[r] goes to rank r; received[r] is filled from rank r.
inline void pairwiseAlltoall(
    const OpContext& ctx,
    const std::vector<at::Tensor>& toSend,
    std::vector<at::Tensor>& received) {
  const int n = ctx.group.size;
  const int rank = ctx.group.rank;
  received[rank].copy_(toSend[rank]);
  UcxMessages messages(ctx, ucx(ctx));
  for (int step = 1; step < n; ++step) {
    const int dst = (rank + step) % n;
    const int src = (rank + n - step) % n;
    messages.send(toSend[dst], dst);
    messages.recv(received[src], src);
    messages.wait();
  }
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
  comm->exchange = std::make_shared<StoreExchange>(group.store, group.backend, group.name);
{%- elif p.impl == "mpi" %}
  // Collective over the group's processes: a communicator of MPI_COMM_WORLD.
  comm->mpi = std::make_shared<MpiComm>(group.backend, group.globalRanks, group.rank, group.world);
{%- elif p.impl == "ucx" %}
  // A UCX worker, connected to every rank's through addresses in the store.
  comm->ucx = std::make_shared<UcxComm>(group.store, group.rank, group.size);
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
  return nullptr;  // {{ "each group's exchange is its own store: init() makes it" if p.impl == "store" else "each group has a UCX worker of its own: init() makes it" if p.impl == "ucx" else "init() makes the child's communicator" }}
{%- endif %}
}

void finalize(Communicator& comm) {
{%- if p.impl == "dummy" %}
  (void)comm;  // your library's communicator is destroyed here
{%- elif p.impl == "store" %}
  comm.exchange->close();  // deletes what failed collectives left in the store
{%- elif p.impl == "mpi" %}
  comm.mpi.reset();  // MPI_Comm_free, once ops in flight (which share it) let go
{%- elif p.impl == "ucx" %}
  comm.ucx.reset();  // closes the endpoints, frees the worker and the context
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
{%- elif p.impl == "ucx" %}
  if (comm.ucx) {
    comm.ucx->abort();  // waiting bodies give up on their next round
  }
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

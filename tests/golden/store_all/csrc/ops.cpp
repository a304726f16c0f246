// The collectives of the "store_all" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the runtime in
// runtime/ (vendored) does the rest: queueing, futures, timeouts and errors.
//
// As generated, this is a reference implementation that works everywhere
// torch.distributed does: every collective is built from a few exchanges
// through the group's c10d Store (see store_exchange.hpp). It is correct for
// every op, dtype and reduction, and slow: all data passes through the
// store's server. Use it as the expected behaviour while you write your own.
#include "ops.hpp"

#include <iostream>

namespace store_all_collectives {

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

namespace ops {

// The lifecycle of a group (see ops.hpp).

std::shared_ptr<Communicator> init(const GroupInfo& group) {
  if (group.options.verbose) {
    std::cerr << group.backend << ": rank " << group.rank << " of " << group.size << " creates group "
              << group.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = group.options;
  comm->exchange = std::make_shared<StoreExchange>(group.store, group.backend, group.name);
  return comm;
}

std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child) {
  (void)parent;
  (void)child;
  return nullptr;  // each group's exchange is its own store: init() makes it
}

void finalize(Communicator& comm) {
  comm.exchange->close();  // deletes what failed collectives left in the store
}

void abort(Communicator& comm) {
  comm.exchange->abort();  // wakes the threads blocked on the store
}

// Copies the root's tensor into the tensor of every rank.
void broadcast(const OpContext& ctx, at::Tensor& tensor, int root) {
  exchange(ctx).broadcast(ctx, tensor, root);
}

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op) {
  // Every rank fetches every rank's tensor and reduces them itself.
  tensor.copy_(reduceAll(exchange(ctx).allgather(ctx, tensor), op));
}

// All-reduces several tensors as one operation.
void allreduce_coalesced(const OpContext& ctx, std::vector<at::Tensor>& tensors, Reduction op) {
  // One exchange for all the tensors: reduce them as one flat buffer.
  at::Tensor flat = flatten(tensors);
  flat.copy_(reduceAll(exchange(ctx).allgather(ctx, flat), op));
  unflatten(flat, tensors);
}

// Reduces the tensor of every rank into the root's tensor.
void reduce(const OpContext& ctx, at::Tensor& tensor, Reduction op, int root) {
  std::vector<at::Tensor> all = exchange(ctx).gather(ctx, tensor, root);
  if (ctx.group.rank == root) {
    tensor.copy_(reduceAll(all, op));
  }
}

// Gathers the tensor of every rank into a list on every rank.
void allgather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  std::vector<at::Tensor> all = exchange(ctx).allgather(ctx, input);
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(all[r].reshape(outputs[r].sizes()));
  }
}

// Gathers the tensor of every rank into one flat tensor on every rank.
void _allgather_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input) {
  copyPieces(output, exchange(ctx).allgather(ctx, input));
}

// All-gathers several tensors as one operation.
void allgather_coalesced(const OpContext& ctx, std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> all = exchange(ctx).allgather(ctx, inputs[i]);
    for (size_t r = 0; r < outputs.size(); ++r) {
      outputs[r][i].copy_(all[r].reshape(outputs[r][i].sizes()));
    }
  }
}

// Runs several flat all-gathers as one operation.
void allgather_into_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    copyPieces(outputs[i], exchange(ctx).allgather(ctx, inputs[i]));
  }
}

// Gathers the tensor of every rank into a list on the root.
void gather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  std::vector<at::Tensor> all = exchange(ctx).gather(ctx, input, root);
  for (size_t r = 0; r < outputs.size(); ++r) {  // outputs is empty except on the root
    outputs[r].copy_(all[r].reshape(outputs[r].sizes()));
  }
}

// Gathers the tensor of every rank into one flat tensor on the root.
void gather_single(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, int root) {
  std::vector<at::Tensor> all = exchange(ctx).gather(ctx, input, root);
  if (ctx.group.rank == root) {
    copyPieces(output, all);
  }
}

// Sends the root's i-th tensor to rank i.
void scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  output.copy_(exchange(ctx).scatter(ctx, inputs, root, output));
}

// Reduces the i-th tensor of every rank into the output of rank i.
void reduce_scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, Reduction op) {
  // Rank r receives everyone's inputs[r] and reduces them.
  const std::vector<int64_t> counts(ctx.group.size, output.numel());
  output.copy_(reduceAll(exchange(ctx).alltoall(ctx, inputs, counts), op).view(output.sizes()));
}

// Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
void _reduce_scatter_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, Reduction op) {
  reduceScatterFlat(ctx, output, input, op);
}

// Runs several flat reduce-scatters as one operation.
void reduce_scatter_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, Reduction op) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    reduceScatterFlat(ctx, outputs[i], inputs[i], op);
  }
}

// Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
void alltoall_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits) {
  // Splits count rows of dimension 0; the store moves flat elements.
  std::vector<int64_t> sendCounts;
  std::vector<int64_t> recvCounts;
  for (int r = 0; r < ctx.group.size; ++r) {
    sendCounts.push_back(inputSplits[r] * rowNumel(input));
    recvCounts.push_back(outputSplits[r] * rowNumel(output));
  }
  copyPieces(output, exchange(ctx).alltoall(ctx, splitPieces(input, sendCounts), recvCounts));
}

// Every rank sends its i-th tensor to rank i.
void alltoall(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  std::vector<int64_t> counts;
  for (const at::Tensor& output : outputs) {
    counts.push_back(output.numel());
  }
  std::vector<at::Tensor> received = exchange(ctx).alltoall(ctx, inputs, counts);
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(received[r].reshape(outputs[r].sizes()));
  }
}

// Sends the tensor to one peer, matched by tag.
void send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  exchange(ctx).send(ctx, tensor, dst, tag);
}

// Receives a tensor from one peer, matched by tag.
void recv(const OpContext& ctx, at::Tensor& tensor, int src, int tag) {
  // Completes later, so that it never holds up the receives posted after it:
  // the receive thread polls for its message between them.
  StoreExchange& store = exchange(ctx);
  const uint64_t ticket = store.postRecv(src, tag);
  ctx.completeLater([&store, ctx, tensor, src, tag, ticket]() mutable {
    return store.tryRecv(ctx, tensor, src, tag, ticket).has_value();
  });
}

// Receives a tensor from whichever peer sends first with the tag.
int recvAnysource(const OpContext& ctx, at::Tensor& tensor, int tag) {
  // Completes later, so that it never holds up the receives posted after it:
  // the receive thread polls for a message between them.
  StoreExchange& store = exchange(ctx);
  const uint64_t ticket = store.postRecv(StoreExchange::kAnySource, tag);
  ctx.completeLater([&store, ctx, tensor, tag, ticket]() mutable {
    const std::optional<int> source = store.tryRecv(ctx, tensor, StoreExchange::kAnySource, tag, ticket);
    if (source) {
      *ctx.source = *source;
    }
    return source.has_value();
  });
  return -1;  // the sender, once known, goes to *ctx.source
}

// Returns once every rank has entered it.
void barrier(const OpContext& ctx) {
  exchange(ctx).barrier(ctx);
}

} // namespace ops
} // namespace store_all_collectives

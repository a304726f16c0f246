// The collectives of the "ucx_all" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the runtime in
// runtime/ (vendored) does the rest: queueing, futures, timeouts and errors.
//
// As generated, every collective is a classic algorithm written out over
// UCX's tagged messages (see UcxMessages in ucx_comm.hpp): ring reduce-scatter
// and all-gather (together, all_reduce), binomial trees for broadcast and
// reduce, pairwise exchange for all_to_all, dissemination for barrier. They
// work on host memory: CUDA tensors are staged through a host copy.
#include "ops.hpp"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>

#include <iostream>

namespace ucx_all_collectives {

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

namespace ops {

// The lifecycle of a group (see ops.hpp).

std::shared_ptr<Communicator> init(const GroupInfo& group) {
  if (group.options.verbose) {
    std::cerr << group.backend << ": rank " << group.rank << " of " << group.size << " creates group "
              << group.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = group.options;
  // A UCX worker, connected to every rank's through addresses in the store.
  comm->ucx = std::make_shared<UcxComm>(group.store, group.rank, group.size);
  return comm;
}

std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child) {
  (void)parent;
  (void)child;
  return nullptr;  // each group has a UCX worker of its own: init() makes it
}

void finalize(Communicator& comm) {
  comm.ucx.reset();  // closes the endpoints, frees the worker and the context
}

void abort(Communicator& comm) {
  if (comm.ucx) {
    comm.ucx->abort();  // waiting bodies give up on their next round
  }
}

// Copies the root's tensor into the tensor of every rank.
void broadcast(const OpContext& ctx, at::Tensor& tensor, int root) {
  at::Tensor data = onHost(tensor);
  treeBroadcast(ctx, data, root);
  writeBack(tensor, data);
}

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op) {
  // Ring reduce-scatter, then ring all-gather of the reduced pieces: each rank
  // sends and receives 2(n-1)/n of the tensor, whatever the number of ranks.
  at::Tensor data = onHost(tensor);
  std::vector<at::Tensor> all = pieces(data.view(-1), ctx.group.size);
  ringReduceScatter(ctx, all, op, data.numel());
  finishAverage(all[ctx.group.rank], op, ctx.group.size);
  ringAllgather(ctx, all, data.numel());
  writeBack(tensor, data);
}

// All-reduces several tensors as one operation.
void allreduce_coalesced(const OpContext& ctx, std::vector<at::Tensor>& tensors, Reduction op) {
  // One ring all-reduce of all the tensors, one after the other in one buffer.
  at::Tensor flat = flatten(tensors);
  std::vector<at::Tensor> all = pieces(flat, ctx.group.size);
  ringReduceScatter(ctx, all, op, flat.numel());
  finishAverage(all[ctx.group.rank], op, ctx.group.size);
  ringAllgather(ctx, all, flat.numel());
  int64_t offset = 0;
  for (at::Tensor& tensor : tensors) {
    tensor.copy_(flat.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
    offset += tensor.numel();
  }
}

// Reduces the tensor of every rank into the root's tensor.
void reduce(const OpContext& ctx, at::Tensor& tensor, Reduction op, int root) {
  // Only the root's tensor changes: the others reduce into a copy.
  const bool isRoot = ctx.group.rank == root;
  at::Tensor acc = isRoot ? onHost(tensor) : hostCopy(tensor);
  treeReduce(ctx, acc, op, root);
  if (isRoot) {
    writeBack(tensor, acc);
  }
}

// Gathers the tensor of every rank into a list on every rank.
void allgather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  at::Tensor flat = at::empty({ctx.group.size * input.numel()}, input.options().device(at::kCPU));
  allgatherFlat(ctx, flat, onHost(input));
  std::vector<at::Tensor> all = pieces(flat, ctx.group.size);
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(all[r].view(outputs[r].sizes()));
  }
}

// Gathers the tensor of every rank into one flat tensor on every rank.
void _allgather_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input) {
  at::Tensor flat = onHost(output).view(-1);
  allgatherFlat(ctx, flat, onHost(input));
  writeBack(output, flat);
}

// All-gathers several tensors as one operation.
void allgather_coalesced(const OpContext& ctx, std::vector<std::vector<at::Tensor>>& outputs, const std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor flat = at::empty({ctx.group.size * inputs[i].numel()}, inputs[i].options().device(at::kCPU));
    allgatherFlat(ctx, flat, onHost(inputs[i]));
    std::vector<at::Tensor> all = pieces(flat, ctx.group.size);
    for (size_t r = 0; r < outputs.size(); ++r) {
      outputs[r][i].copy_(all[r].view(outputs[r][i].sizes()));
    }
  }
}

// Runs several flat all-gathers as one operation.
void allgather_into_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor flat = onHost(outputs[i]).view(-1);
    allgatherFlat(ctx, flat, onHost(inputs[i]));
    writeBack(outputs[i], flat);
  }
}

// Gathers the tensor of every rank into a list on the root.
void gather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
  // Every rank sends straight to the root, which receives from all at once.
  at::Tensor mine = onHost(input);
  UcxMessages messages(ctx, ucx(ctx));
  if (ctx.group.rank != root) {
    messages.send(mine, root);
    messages.wait();
    return;
  }
  std::vector<at::Tensor> received;
  for (int r = 0; r < ctx.group.size; ++r) {
    received.push_back(r == root ? mine : at::empty_like(mine));
    if (r != root) {
      messages.recv(received[r], r);
    }
  }
  messages.wait();
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(received[r].view(outputs[r].sizes()));
  }
}

// Gathers the tensor of every rank into one flat tensor on the root.
void gather_single(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, int root) {
  // Every rank sends straight to the root, which receives into its output.
  at::Tensor mine = onHost(input);
  UcxMessages messages(ctx, ucx(ctx));
  if (ctx.group.rank != root) {
    messages.send(mine, root);
    messages.wait();
    return;
  }
  at::Tensor flat = onHost(output).view(-1);
  std::vector<at::Tensor> all = pieces(flat, ctx.group.size);
  all[root].copy_(mine.view(-1));
  for (int r = 0; r < ctx.group.size; ++r) {
    if (r != root) {
      messages.recv(all[r], r);
    }
  }
  messages.wait();
  writeBack(output, flat);
}

// Sends the root's i-th tensor to rank i.
void scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
  // The root sends each rank its piece directly.
  at::Tensor mine = onHost(output);
  UcxMessages messages(ctx, ucx(ctx));
  if (ctx.group.rank == root) {
    for (int r = 0; r < ctx.group.size; ++r) {
      if (r == root) {
        mine.copy_(inputs[r].view(mine.sizes()));
      } else {
        messages.send(onHost(inputs[r]), r);
      }
    }
  } else {
    messages.recv(mine, root);
  }
  messages.wait();
  writeBack(output, mine);
}

// Reduces the i-th tensor of every rank into the output of rank i.
void reduce_scatter(const OpContext& ctx, at::Tensor& output, const std::vector<at::Tensor>& inputs, Reduction op) {
  // Ring reduce-scatter of the inputs laid end to end.
  at::Tensor scratch = flatten(inputs);
  reduceScatterFlat(ctx, output, scratch, op);
}

// Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
void _reduce_scatter_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, Reduction op) {
  at::Tensor scratch = hostCopy(input).view(-1);
  reduceScatterFlat(ctx, output, scratch, op);
}

// Runs several flat reduce-scatters as one operation.
void reduce_scatter_tensor_coalesced(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs, Reduction op) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor scratch = hostCopy(inputs[i]).view(-1);
    reduceScatterFlat(ctx, outputs[i], scratch, op);
  }
}

// Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
void alltoall_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits) {
  // Splits count rows of dimension 0.
  std::vector<int64_t> sendCounts;
  std::vector<int64_t> recvCounts;
  for (int r = 0; r < ctx.group.size; ++r) {
    sendCounts.push_back(inputSplits[r] * rowNumel(input));
    recvCounts.push_back(outputSplits[r] * rowNumel(output));
  }
  at::Tensor source = onHost(input).view(-1);
  at::Tensor target = onHost(output).view(-1);
  std::vector<at::Tensor> received = piecesOf(target, recvCounts);
  pairwiseAlltoall(ctx, piecesOf(source, sendCounts), received);
  writeBack(output, target);
}

// Every rank sends its i-th tensor to rank i.
void alltoall(const OpContext& ctx, std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> toSend;
  std::vector<at::Tensor> received;
  for (int r = 0; r < ctx.group.size; ++r) {
    toSend.push_back(onHost(inputs[r]));
    received.push_back(onHost(outputs[r]));
  }
  pairwiseAlltoall(ctx, toSend, received);
  for (int r = 0; r < ctx.group.size; ++r) {
    writeBack(outputs[r], received[r]);
  }
}

// Sends the tensor to one peer, matched by tag.
void send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  // Completes once UCX is done with the message (sendLater): a completed send
  // is delivered, and the caller may reuse the tensor.
  sendLater(ctx, onHost(tensor), dst, tag);
}

// Receives a tensor from one peer, matched by tag.
void recv(const OpContext& ctx, at::Tensor& tensor, int src, int tag) {
  receiveLater(ctx, tensor, src, tag);
}

// Receives a tensor from whichever peer sends first with the tag.
int recvAnysource(const OpContext& ctx, at::Tensor& tensor, int tag) {
  receiveLater(ctx, tensor, /*src=*/-1, tag);
  return -1;  // the sender, once known, goes to *ctx.source
}

// Returns once every rank has entered it.
void barrier(const OpContext& ctx) {
  // Dissemination: in round k every rank signals rank + 2^k and waits for
  // rank - 2^k. After log2(n) rounds every rank has heard, indirectly, from all.
  const int n = ctx.group.size;
  const int rank = ctx.group.rank;
  at::Tensor nothing = at::empty({0}, at::kByte);
  UcxMessages messages(ctx, ucx(ctx));
  for (int distance = 1; distance < n; distance *= 2) {
    messages.send(nothing, (rank + distance) % n);
    messages.recv(nothing, (rank + n - distance) % n);
    messages.wait();
  }
}

} // namespace ops
} // namespace ucx_all_collectives

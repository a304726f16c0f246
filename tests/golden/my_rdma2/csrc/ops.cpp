// The collectives of the "my_rdma2" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the runtime in
// runtime/ (vendored) does the rest: queueing, futures, timeouts and errors.
//
// As generated, this is the dummy backend of PyTorch's tutorial: every output
// is zeroed and nothing is sent.
#include "ops.hpp"

#include <iostream>

namespace my_rdma2_collectives {

bool supportsDtype(c10::ScalarType /* dtype */) {
  return true;  // The dummy only zeroes tensors, which works for every dtype.
}

bool supportsReduction(Reduction /* op */, c10::ScalarType /* dtype */) {
  return true;  // The dummy reduces nothing.
}

namespace ops {

// The lifecycle of a group (see ops.hpp).

std::shared_ptr<Communicator> init(const GroupInfo& group) {
  if (group.options.verbose) {
    std::cerr << group.backend << ": rank " << group.rank << " of " << group.size << " creates group "
              << group.name << "\n";
  }
  auto comm = std::make_shared<Communicator>();
  comm->options = group.options;
  // Your library's communicator is created here: rank 0 makes a unique id,
  // group.store.set("id", ...) publishes it, the others group.store.get("id").
  return comm;
}

std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child) {
  (void)parent;
  (void)child;
  return nullptr;  // init() makes the child's communicator
}

void finalize(Communicator& comm) {
  (void)comm;  // your library's communicator is destroyed here
}

void abort(Communicator& comm) {
  (void)comm;  // your library's abort goes here: it makes stuck calls return
}

// Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
void _reduce_scatter_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, Reduction op) {
  // Your library's _reduce_scatter_base goes here.
  output.zero_();
}

// Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
void alltoall_base(const OpContext& ctx, at::Tensor& output, const at::Tensor& input, const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits) {
  // Your library's alltoall_base goes here.
  output.zero_();
}

// Sends the tensor to one peer, matched by tag.
void send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  // Your library's send goes here.
  // The dummy sends nothing: the send completes at once.
}

// Receives a tensor from one peer, matched by tag.
void recv(const OpContext& ctx, at::Tensor& tensor, int src, int tag) {
  // Your library's recv goes here.
  tensor.zero_();
}

// Receives a tensor from whichever peer sends first with the tag.
int recvAnysource(const OpContext& ctx, at::Tensor& tensor, int tag) {
  // Your library's recvAnysource goes here.
  tensor.zero_();
  // The dummy pretends the message came from the next rank.
  return (ctx.group.rank + 1) % ctx.group.size;
}

// Returns once every rank has entered it.
void barrier(const OpContext& ctx) {
  // Your library's barrier goes here.
  // The dummy synchronises nothing: the barrier completes at once.
}

} // namespace ops
} // namespace my_rdma2_collectives

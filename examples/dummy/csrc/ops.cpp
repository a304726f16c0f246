// The collectives of the "dummy" backend: the file you edit.
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

namespace dummy_collectives {

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

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op) {
  // Your library's allreduce goes here.
  tensor.zero_();
}

// Gathers the tensor of every rank into a list on every rank.
void allgather(const OpContext& ctx, std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  // Your library's allgather goes here.
  for (at::Tensor& output : outputs) {
    output.zero_();
  }
}

} // namespace ops
} // namespace dummy_collectives

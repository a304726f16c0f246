// The collectives of the "single" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the plumbing in
// backend.cpp does the rest: queueing, futures, timeouts and errors.
//
// As generated, this is the dummy backend of PyTorch's tutorial: every output
// is zeroed and nothing is sent.
#include "ops.hpp"

namespace single_collectives {

bool supportsDtype(c10::ScalarType /* dtype */) {
  return true;  // The dummy only zeroes tensors, which works for every dtype.
}

bool supportsReduction(Reduction /* op */, c10::ScalarType /* dtype */) {
  return true;  // The dummy reduces nothing.
}

namespace ops {

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op) {
  // Your library's allreduce goes here.
  tensor.zero_();
}

} // namespace ops
} // namespace single_collectives

// The collectives this backend offers, one override of c10d::Backend each:
// it checks the call on the caller's thread, then queues the body, ops::<op>
// in ops.cpp. Rendered from the catalogue for the ops this project chose; the
// runtime (runtime/, whose backend.cpp includes this header) does the rest.
// torch.distributed raises "Backend <name> does not support <op>" for every
// other collective.
#pragma once

#include "runtime/backend.hpp"
#include "runtime/checks.hpp"

namespace NEW_BACKEND_NAMESPACE {

class Collectives final : public Backend {
 public:
  using Backend::Backend;

  // Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
#else
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
#endif
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::ReduceScatterOptions& opts) override {
    const Check check(*group_, __func__);
    check.tensor(outputBuffer, "outputBuffer");
    check.scaled(inputBuffer, outputBuffer, check.size(), "inputBuffer");
    const Reduction op = check.reduction(opts.reduceOp, outputBuffer);
    return enqueue(Runs::kOnQueue, c10d::OpType::_REDUCE_SCATTER_BASE, __func__, opts.timeout,
        std::vector<at::Tensor>{outputBuffer}, std::vector<at::Tensor>{inputBuffer},
        [=](const OpContext& ctx, Work&) mutable { ops::_reduce_scatter_base(ctx, outputBuffer, inputBuffer, op); });
  }

  // Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> all_to_all_single(
#else
  c10::intrusive_ptr<c10d::Work> alltoall_base(
#endif
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) override {
    const Check check(*group_, __func__);
    check.tensor(inputBuffer, "inputBuffer");
    check.tensor(outputBuffer, "outputBuffer");
    check.sameDtype(outputBuffer, inputBuffer, "outputBuffer");
    const std::vector<int64_t> outputSplits = check.splits(outputSplitSizes, outputBuffer, "outputSplitSizes");
    const std::vector<int64_t> inputSplits = check.splits(inputSplitSizes, inputBuffer, "inputSplitSizes");
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLTOALL_BASE, __func__, opts.timeout,
        std::vector<at::Tensor>{outputBuffer}, std::vector<at::Tensor>{inputBuffer},
        [=](const OpContext& ctx, Work&) mutable { ops::alltoall_base(ctx, outputBuffer, inputBuffer, outputSplits, inputSplits); });
  }

  // Sends the tensor to one peer, matched by tag.
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dstRank, int tag) override {
    const Check check(*group_, __func__);
    const at::Tensor& tensor = check.one(tensors, "tensors");
    const int dst = check.peer(dstRank, "dstRank");
    return enqueue(Runs::kHere, c10d::OpType::SEND, __func__, c10d::kUnsetTimeout, tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::send(ctx, tensor, dst, tag); }, dstRank);
  }

  // Receives a tensor from one peer, matched by tag.
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int srcRank, int tag) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    const int src = check.peer(srcRank, "srcRank");
    return enqueue(Runs::kOnReceives, c10d::OpType::RECV, __func__, c10d::kUnsetTimeout,
        tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::recv(ctx, tensor, src, tag); }, srcRank);
  }

  // Receives a tensor from whichever peer sends first with the tag.
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors, int tag) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    return enqueue(Runs::kOnReceives, c10d::OpType::RECVANYSOURCE, __func__, c10d::kUnsetTimeout,
        tensors, {},
        [=](const OpContext& ctx, Work& work) mutable { work.sourceRank_ = ops::recvAnysource(ctx, tensor, tag); });
  }

  // Returns once every rank has entered it.
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override {
    return enqueue(Runs::kOnQueue, c10d::OpType::BARRIER, __func__, opts.timeout,
        std::vector<at::Tensor>{}, {},
        [=](const OpContext& ctx, Work&) mutable { ops::barrier(ctx); });
  }

};

} // namespace NEW_BACKEND_NAMESPACE

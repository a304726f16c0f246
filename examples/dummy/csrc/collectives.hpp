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

  // Reduces the tensor of every rank; every rank gets the result.
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    const Reduction op = check.reduction(opts.reduceOp, tensor);
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLREDUCE, __func__, opts.timeout, tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::allreduce(ctx, tensor, op); });
  }

  // Gathers the tensor of every rank into a list on every rank.
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override {
    const Check check(*group_, __func__);
    const at::Tensor& input = check.one(inputTensors, "inputTensors");
    std::vector<at::Tensor>& outputs = check.oneList(outputTensors, "outputTensors");
    check.perRank(outputs, input, "outputTensors[0]");
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLGATHER, __func__, opts.timeout,
        outputTensors, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::allgather(ctx, outputs, input); });
  }

};

} // namespace NEW_BACKEND_NAMESPACE

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

  // Copies the root's tensor into the tensor of every rank.
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    const int root = check.root(opts.rootRank, opts.rootTensor);
    return enqueue(Runs::kOnQueue, c10d::OpType::BROADCAST, __func__, opts.timeout, tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::broadcast(ctx, tensor, root); });
  }

  // Reduces the tensor of every rank; every rank gets the result.
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    const Reduction op = check.reduction(opts.reduceOp, tensor);
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLREDUCE, __func__, opts.timeout, tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::allreduce(ctx, tensor, op); });
  }

  // All-reduces several tensors as one operation.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    const Check check(*group_, __func__);
    check.many(tensors, "tensors");
    const Reduction op = check.reduction(opts.reduceOp, tensors.front());
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLREDUCE_COALESCED, __func__, opts.timeout,
        tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::allreduce_coalesced(ctx, tensors, op); });
  }

  // Reduces the tensor of every rank into the root's tensor.
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    const Check check(*group_, __func__);
    at::Tensor& tensor = check.one(tensors, "tensors");
    const int root = check.root(opts.rootRank, opts.rootTensor);
    const Reduction op = check.reduction(opts.reduceOp, tensor);
    return enqueue(Runs::kOnQueue, c10d::OpType::REDUCE, __func__, opts.timeout, tensors, {},
        [=](const OpContext& ctx, Work&) mutable { ops::reduce(ctx, tensor, op, root); });
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

  // Gathers the tensor of every rank into one flat tensor on every rank.
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> all_gather_single(
#else
  c10::intrusive_ptr<c10d::Work> _allgather_base(
#endif
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::AllgatherOptions& opts) override {
    const Check check(*group_, __func__);
    check.tensor(inputBuffer, "inputBuffer");
    check.scaled(outputBuffer, inputBuffer, check.size(), "outputBuffer");
    return enqueue(Runs::kOnQueue, c10d::OpType::_ALLGATHER_BASE, __func__, opts.timeout,
        std::vector<at::Tensor>{outputBuffer}, std::vector<at::Tensor>{inputBuffer},
        [=](const OpContext& ctx, Work&) mutable { ops::_allgather_base(ctx, outputBuffer, inputBuffer); });
  }

  // All-gathers several tensors as one operation.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors, const c10d::AllgatherOptions& opts) override {
    const Check check(*group_, __func__);
    check.many(inputTensors, "inputTensors");
    check.coalescedPerRank(outputTensorLists, inputTensors, "outputTensorLists");
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLGATHER_COALESCED, __func__, opts.timeout,
        outputTensorLists, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::allgather_coalesced(ctx, outputTensorLists, inputTensors); });
  }

  // Runs several flat all-gathers as one operation.
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
#else
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
#endif
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    const Check check(*group_, __func__);
    check.many(inputs, "inputs");
    check.scaledPairs(outputs, inputs, check.size(), "outputs");
#if NEW_BACKEND_TORCH_2_14
    const auto type = c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED;
#else
    const auto type = c10d::OpType::COALESCED;
#endif
    return enqueue(Runs::kOnQueue, type, __func__, opts.timeout, outputs, inputs,
        [=](const OpContext& ctx, Work&) mutable { ops::allgather_into_tensor_coalesced(ctx, outputs, inputs); });
  }

  // Gathers the tensor of every rank into a list on the root.
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts) override {
    const Check check(*group_, __func__);
    const int root = check.root(opts.rootRank);
    const at::Tensor& input = check.one(inputTensors, "inputTensors");
    std::vector<at::Tensor> outputs = check.rootList(outputTensors, root, input, "outputTensors");
    return enqueue(Runs::kOnQueue, c10d::OpType::GATHER, __func__, opts.timeout,
        outputTensors, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::gather(ctx, outputs, input, root); });
  }

  // Gathers the tensor of every rank into one flat tensor on the root.
#if NEW_BACKEND_TORCH_2_14  // added in torch 2.14
  c10::intrusive_ptr<c10d::Work> gather_single(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::GatherOptions& opts) override {
    const Check check(*group_, __func__);
    const int root = check.root(opts.rootRank);
    check.tensor(inputBuffer, "inputBuffer");
    check.scaledOnRoot(outputBuffer, inputBuffer, root, "outputBuffer");
    return enqueue(Runs::kOnQueue, c10d::OpType::GATHER, __func__, opts.timeout,
        std::vector<at::Tensor>{outputBuffer}, std::vector<at::Tensor>{inputBuffer},
        [=](const OpContext& ctx, Work&) mutable { ops::gather_single(ctx, outputBuffer, inputBuffer, root); });
  }
#endif

  // Sends the root's i-th tensor to rank i.
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts) override {
    const Check check(*group_, __func__);
    const int root = check.root(opts.rootRank);
    at::Tensor& output = check.one(outputTensors, "outputTensors");
    const std::vector<at::Tensor> inputs = check.rootList(inputTensors, root, output, "inputTensors");
    return enqueue(Runs::kOnQueue, c10d::OpType::SCATTER, __func__, opts.timeout,
        outputTensors, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::scatter(ctx, output, inputs, root); });
  }

  // Reduces the i-th tensor of every rank into the output of rank i.
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts) override {
    const Check check(*group_, __func__);
    at::Tensor& output = check.one(outputTensors, "outputTensors");
    const std::vector<at::Tensor>& inputs = check.oneList(inputTensors, "inputTensors");
    check.perRank(inputs, output, "inputTensors[0]");
    const Reduction op = check.reduction(opts.reduceOp, output);
    return enqueue(Runs::kOnQueue, c10d::OpType::REDUCE_SCATTER, __func__, opts.timeout,
        outputTensors, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::reduce_scatter(ctx, output, inputs, op); });
  }

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

  // Runs several flat reduce-scatters as one operation.
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
#else
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
#endif
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override {
    const Check check(*group_, __func__);
    check.many(outputs, "outputs");
    check.scaledPairs(inputs, outputs, check.size(), "inputs");
    const Reduction op = check.reduction(opts.reduceOp, outputs.front());
    return enqueue(Runs::kOnQueue, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, __func__, opts.timeout,
        outputs, inputs,
        [=](const OpContext& ctx, Work&) mutable { ops::reduce_scatter_tensor_coalesced(ctx, outputs, inputs, op); });
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

  // Every rank sends its i-th tensor to rank i.
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts) override {
    const Check check(*group_, __func__);
    check.perRankAnyShape(inputTensors, "inputTensors");
    check.perRankAnyShape(outputTensors, "outputTensors");
    check.sameDtype(outputTensors.front(), inputTensors.front(), "outputTensors");
    return enqueue(Runs::kOnQueue, c10d::OpType::ALLTOALL, __func__, opts.timeout,
        outputTensors, inputTensors,
        [=](const OpContext& ctx, Work&) mutable { ops::alltoall(ctx, outputTensors, inputTensors); });
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

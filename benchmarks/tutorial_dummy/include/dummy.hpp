// The tutorial's dummy backend ("Customize Process Group Backends Using Cpp
// Extensions"), as printed, with only the fixes it needs to build:
//   * the registration called createProcessGroupDummy, which does not exist;
//   * the constructor and the WorkDummy methods were declared but not defined.
// It is the baseline that benchmarks/ compares generated projects against.
#pragma once

#include <torch/python.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Utils.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

namespace c10d {

class BackendDummy : public Backend {
 public:
  BackendDummy(int rank, int size);

  c10::intrusive_ptr<Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const AllgatherOptions& opts = AllgatherOptions()) override;

  c10::intrusive_ptr<Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const AllreduceOptions& opts = AllreduceOptions()) override;

  static c10::intrusive_ptr<Backend> createBackendDummy(
      const c10::intrusive_ptr<::c10d::Store>& store,
      int rank,
      int size,
      const std::chrono::duration<float>& timeout);

  static void BackendDummyConstructor() __attribute__((constructor)) {
    py::object module = py::module::import("torch.distributed");
    py::object register_backend =
        module.attr("Backend").attr("register_backend");
    register_backend("dummy", py::cpp_function(createBackendDummy));
  }
};

class WorkDummy : public Work {
 public:
  WorkDummy(OpType opType, c10::intrusive_ptr<c10::ivalue::Future> future)
      : Work(-1, opType), future_(std::move(future)) {}
  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout = kUnsetTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace c10d

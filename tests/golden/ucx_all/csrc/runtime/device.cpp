// How an op on accelerator tensors meets the streams around it (see DeviceOp
// in backend.hpp), through c10's device-generic interfaces: the registered
// DeviceGuardImpl of the tensors' device type gives the streams and events,
// so cuda, xpu and PrivateUse1 devices take the same path.
#include "backend.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace NEW_BACKEND_NAMESPACE {

std::shared_ptr<DeviceOp> Backend::deviceOp(const c10::IValue& outputs, const c10::IValue& inputs) {
  std::vector<at::Tensor> tensors;
  collectTensors(outputs, tensors);
  collectTensors(inputs, tensors);
  if (tensors.empty() || tensors.front().is_cpu()) {
    return nullptr;
  }
  const c10::Device device = tensors.front().device();
  const c10::impl::VirtualGuardImpl guard(device.type());
  const c10::Stream stream = [&] {
    std::lock_guard<std::mutex> lock(streamsMutex_);
    for (const c10::Stream& s : streams_) {
      if (s.device() == device) {
        return s;
      }
    }
    return streams_.emplace_back(guard.getStreamFromGlobalPool(device));
  }();
  auto op = std::make_shared<DeviceOp>(stream);
  op->ready.record(guard.getStream(device));  // the op starts where the caller's stream is now
  // The caching allocator must not hand these tensors' memory to anyone else
  // before the backend's stream is done with them.
  for (const at::Tensor& t : tensors) {
    guard.recordDataPtrOnStream(t.storage().data_ptr(), stream);
  }
  return op;
}

} // namespace NEW_BACKEND_NAMESPACE

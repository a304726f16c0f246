// What the runtime (runtime/, the same in every project) needs to know of this
// one: its name, its Python package, its settings' prefix and its devices.
#pragma once

#include <c10/core/DeviceType.h>

// The runtime's namespace: each generated backend has its own, so that two of
// them load into one process side by side.
#define NEW_BACKEND_NAMESPACE dummy_collectives
// The name torch.distributed knows the backend by, and its Python package.
#define NEW_BACKEND_NAME "dummy"
#define NEW_BACKEND_PACKAGE "dummy_collectives"
// Settings come from the environment variables DUMMY_<FIELD>.
#define NEW_BACKEND_ENV_PREFIX "DUMMY_"
// Whether the runtime carries the MPI layer (runtime/mpi_comm.*).
#define NEW_BACKEND_WITH_MPI 0
// The devices it is registered for, as its errors name them.
#define NEW_BACKEND_DEVICES "cpu and cuda"

namespace NEW_BACKEND_NAMESPACE {

// The device types the backend serves: torch's own it was made for, and
// PrivateUse1 (an out-of-tree accelerator, once the package registers for it).
inline constexpr c10::DeviceType kDevices[] = {c10::DeviceType::CPU, c10::DeviceType::CUDA, c10::DeviceType::PrivateUse1};

} // namespace NEW_BACKEND_NAMESPACE

{%- set p = project() -%}
// What the runtime (runtime/, the same in every project) needs to know of this
// one: its name, its Python package, its settings' prefix and its devices.
#pragma once

#include <c10/core/DeviceType.h>

// The runtime's namespace: each generated backend has its own, so that two of
// them load into one process side by side.
#define NEW_BACKEND_NAMESPACE {{ p.package }}
// The name torch.distributed knows the backend by, and its Python package.
#define NEW_BACKEND_NAME "{{ p.name }}"
#define NEW_BACKEND_PACKAGE "{{ p.package }}"
// Settings come from the environment variables {{ p.macro }}_<FIELD>.
#define NEW_BACKEND_ENV_PREFIX "{{ p.macro }}_"
// Whether the runtime carries the MPI layer (runtime/mpi_comm.*).
#define NEW_BACKEND_WITH_MPI {{ 1 if p.impl == "mpi" else 0 }}
// The devices it is registered for, as its errors name them.
#define NEW_BACKEND_DEVICES "{{ p.devices | join(' and ') }}"

namespace NEW_BACKEND_NAMESPACE {

// The device types the backend serves: torch's own it was made for, and
// PrivateUse1 (an out-of-tree accelerator, once the package registers for it).
inline constexpr c10::DeviceType kDevices[] = {
{%- for d in p.torch_devices %}c10::DeviceType::{{ d | upper }}, {% endfor -%}
c10::DeviceType::PrivateUse1};

} // namespace NEW_BACKEND_NAMESPACE

// The Python module store_all_collectives._C: the creator torch.distributed calls.
//
// This is the only file that includes pybind11 (through torch's pybind.h,
// which also teaches it c10::intrusive_ptr); it is the slowest file to
// compile, so it holds nothing else. Registration happens in Python, in
// store_all_collectives/__init__.py.
#include <torch/csrc/utils/pybind.h>

#include "backend.hpp"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "C++ core of the \"store_all\" torch.distributed backend.";

  module.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& options,
         const py::object& /* backend_options */) {
        return store_all_collectives::BackendStoreAll::create(options);
      },
      py::arg("options"),
      py::arg("backend_options") = py::none(),
      py::call_guard<py::gil_scoped_release>(),
      "Creates the backend of one process group (torch.distributed's extended API).");

#ifdef WITH_CUDA
  module.attr("WITH_CUDA") = true;
#else
  module.attr("WITH_CUDA") = false;
#endif
}

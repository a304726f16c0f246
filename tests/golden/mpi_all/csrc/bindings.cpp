// The Python module mpi_all_collectives._C: the creator torch.distributed calls.
//
// This is the only file that includes pybind11 (through torch's pybind.h,
// which also teaches it c10::intrusive_ptr); it is the slowest file to
// compile, so it holds nothing else. Registration happens in Python, in
// mpi_all_collectives/__init__.py.
#include <torch/csrc/utils/pybind.h>

#include "backend.hpp"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "C++ core of the \"mpi_all\" torch.distributed backend.";

  module.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& options,
         const py::object& /* backend_options */) {
        return mpi_all_collectives::BackendMpiAll::create(options);
      },
      py::arg("options"),
      py::arg("backend_options") = py::none(),
      py::call_guard<py::gil_scoped_release>(),
      "Creates the backend of one process group (torch.distributed's extended API).");

  module.def(
      "mpi_world",
      [] { return mpi_all_collectives::mpiWorld(); },
      py::call_guard<py::gil_scoped_release>(),
      "(rank, size) of this process in MPI_COMM_WORLD; initialises MPI if needed.");
  module.def(
      "mpi_broadcast",
      [](const std::string& value) {
        std::string result;
        {
          py::gil_scoped_release release;
          result = mpi_all_collectives::mpiBroadcast(value);
        }
        return py::bytes(result);
      },
      py::arg("value"),
      "Rank 0's value on every rank of MPI_COMM_WORLD (MPI_Bcast); initialises MPI if needed.");
  module.def(
      "mpi_initialized",
      &mpi_all_collectives::mpiInitialized,
      "Whether MPI is initialised (by anyone) and not finalised.");
  module.def(
      "mpi_finalize",
      &mpi_all_collectives::finalizeMpi,
      py::call_guard<py::gil_scoped_release>(),
      "Finalises MPI if this backend initialised it (registered with atexit).");

#ifdef WITH_CUDA
  module.attr("WITH_CUDA") = true;
#else
  module.attr("WITH_CUDA") = false;
#endif
}

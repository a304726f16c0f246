// The Python module mpi_all_collectives._C: the creator torch.distributed calls.
//
// This is the only file that includes pybind11 (through torch's pybind.h,
// which also teaches it c10::intrusive_ptr); it is the slowest file to
// compile, so it holds nothing else. Registration happens in Python, in
// mpi_all_collectives/__init__.py.
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <type_traits>
#include <utility>

#include "backend.hpp"

namespace torch {
// libtorch_python's (torch/csrc/profiler/python/combined_traceback.h, which
// would bring nlohmann/json along): lets CapturedTraceback read Python
// frames, which the flight recorder keeps for each op. Torch calls it only
// once its profiler or memory history is used; each call adds an unwinder,
// so this module calls it once, at import.
void installCapturedTracebackPython();
} // namespace torch

namespace {

// The Python type a field of Options takes, as a user would write it.
template <typename Field>
const char* pythonTypeName() {
  if constexpr (std::is_same_v<Field, bool>) {
    return "a bool";
  } else if constexpr (std::is_integral_v<Field>) {
    return "an int";
  } else if constexpr (std::is_floating_point_v<Field>) {
    return "a float";
  } else if constexpr (std::is_same_v<Field, std::string>) {
    return "a str";
  } else {
    return "another type";
  }
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "C++ core of the \"mpi_all\" torch.distributed backend.";
  torch::installCapturedTracebackPython();
  // Before the interpreter finalizes, dumps stop reading Python frames and groups stop
  // talking to their stores (recorder.cpp).
  py::module_::import("atexit").attr("register")(
      py::cpp_function(&mpi_all_collectives::atInterpreterExit, py::call_guard<py::gil_scoped_release>()));

  // Options: the C++ struct of ops.hpp, one attribute per field listed in
  // describeOptions(). A new object starts from the MPI_ALL_* environment
  // variables; keywords override them.
  py::class_<mpi_all_collectives::Options> options(
      module, "Options", "Options of a \"mpi_all\" process group (pg_options=...).");
  options.def(
      py::init([](const py::kwargs& fields) {
        mpi_all_collectives::Options result = mpi_all_collectives::optionsFromEnvironment();
        py::object self = py::cast(result);
        for (const auto& [name, value] : fields) {
          if (!py::hasattr(self, name)) {
            throw py::type_error(
                "mpi_all: Options has no field " + py::str(name).cast<std::string>());
          }
          self.attr(name) = value;
        }
        return self.cast<mpi_all_collectives::Options>();
      }),
      "Options(**fields): the environment's values, then these fields.");
  // A value of the wrong type is a TypeError naming the field and the type it takes.
  mpi_all_collectives::describeOptions([&options](const char* name, auto member, const char* doc) {
    using Field = std::remove_reference_t<decltype(std::declval<mpi_all_collectives::Options&>().*member)>;
    options.def_property(
        name,
        [member](const mpi_all_collectives::Options& self) { return self.*member; },
        [member, name](
            mpi_all_collectives::Options& self, const py::object& value) {
          try {
            self.*member = value.cast<Field>();
          } catch (const py::cast_error&) {
            throw py::type_error(
                std::string("mpi_all: Options.") + name + " takes " + pythonTypeName<Field>() + ", not " +
                py::repr(value).cast<std::string>());
          }
        },
        doc);
  });
  options.def("__repr__", [](const py::object& self) {
    std::string text = "Options(";
    const char* separator = "";
    mpi_all_collectives::describeOptions([&](const char* name, auto /* member */, const char* /* doc */) {
      text += separator + std::string(name) + "=" + py::repr(self.attr(name)).cast<std::string>();
      separator = ", ";
    });
    return text + ")";
  });

  module.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& dist, const py::object& pgOptions) {
        mpi_all_collectives::Options options;
        if (pgOptions.is_none()) {
          options = mpi_all_collectives::optionsFromEnvironment();
        } else if (py::isinstance<mpi_all_collectives::Options>(pgOptions)) {
          options = pgOptions.cast<mpi_all_collectives::Options>();
        } else {
          throw py::type_error(
              "Backend mpi_all: pg_options must be mpi_all_collectives.Options, not " +
              py::str(py::type::of(pgOptions).attr("__name__")).cast<std::string>());
        }
        py::gil_scoped_release release;
        return mpi_all_collectives::BackendMpiAll::create(dist, options);
      },
      py::arg("options"),
      py::arg("backend_options") = py::none(),
      "Creates the backend of one process group (torch.distributed's extended API).");

  module.def(
      "group_options",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        auto* ours = dynamic_cast<mpi_all_collectives::BackendMpiAll*>(backend.get());
        if (ours == nullptr) {
          throw py::type_error("mpi_all: not a backend of mpi_all_collectives");
        }
        return ours->options();
      },
      py::arg("backend"),
      "The Options a backend of this package was created with.");


  module.def(
      "flight_record",
      [] {
        std::string record;
        {
          py::gil_scoped_release release;
          record = mpi_all_collectives::pickledRecord();
        }
        return py::bytes(record);
      },
      "This process's flight recorder, pickled as c10d's FlightRecorder dumps it.");
  module.def(
      "dump_flight_record",
      &mpi_all_collectives::dumpRecord,
      py::arg("global_rank"),
      py::call_guard<py::gil_scoped_release>(),
      "Writes the flight recorder to TORCH_FR_DUMP_TEMP_FILE<global_rank>; returns the path.");

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

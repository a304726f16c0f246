// The Python module <package>._C: the creator torch.distributed calls.
//
// This is the only file that includes pybind11 (through torch's pybind.h,
// which also teaches it c10::intrusive_ptr); it is the slowest file to
// compile, so it holds nothing else. Registration happens in Python, in
// the package's __init__.py.
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
  module.doc() = "C++ core of the \"" NEW_BACKEND_NAME "\" torch.distributed backend.";
  torch::installCapturedTracebackPython();
  // Before the interpreter finalizes, dumps stop reading Python frames and groups stop
  // talking to their stores (recorder.cpp).
  py::module_::import("atexit").attr("register")(
      py::cpp_function(&NEW_BACKEND_NAMESPACE::atInterpreterExit, py::call_guard<py::gil_scoped_release>()));

  // Options: the C++ struct of ops.hpp, one attribute per field listed in
  // describeOptions(). A new object starts from the <NAME>_* environment
  // variables; keywords override them.
  py::class_<NEW_BACKEND_NAMESPACE::Options> options(
      module, "Options", "Options of a \"" NEW_BACKEND_NAME "\" process group (pg_options=...).");
  options.def(
      py::init([](const py::kwargs& fields) {
        NEW_BACKEND_NAMESPACE::Options result = NEW_BACKEND_NAMESPACE::optionsFromEnvironment();
        py::object self = py::cast(result);
        for (const auto& [name, value] : fields) {
          if (!py::hasattr(self, name)) {
            throw py::type_error(
                NEW_BACKEND_NAME ": Options has no field " + py::str(name).cast<std::string>());
          }
          self.attr(name) = value;
        }
        return self.cast<NEW_BACKEND_NAMESPACE::Options>();
      }),
      "Options(**fields): the environment's values, then these fields.");
  // A value of the wrong type is a TypeError naming the field and the type it takes.
  NEW_BACKEND_NAMESPACE::describeOptions([&options](const char* name, auto member, const char* doc) {
    using Field = std::remove_reference_t<decltype(std::declval<NEW_BACKEND_NAMESPACE::Options&>().*member)>;
    options.def_property(
        name,
        [member](const NEW_BACKEND_NAMESPACE::Options& self) { return self.*member; },
        [member, name](
            NEW_BACKEND_NAMESPACE::Options& self, const py::object& value) {
          try {
            self.*member = value.cast<Field>();
          } catch (const py::cast_error&) {
            throw py::type_error(
                std::string(NEW_BACKEND_NAME ": Options.") + name + " takes " + pythonTypeName<Field>() + ", not " +
                py::repr(value).cast<std::string>());
          }
        },
        doc);
  });
  options.def("__repr__", [](const py::object& self) {
    std::string text = "Options(";
    const char* separator = "";
    NEW_BACKEND_NAMESPACE::describeOptions([&](const char* name, auto /* member */, const char* /* doc */) {
      text += separator + std::string(name) + "=" + py::repr(self.attr(name)).cast<std::string>();
      separator = ", ";
    });
    return text + ")";
  });

  module.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& dist, const py::object& pgOptions) {
        NEW_BACKEND_NAMESPACE::Options options;
        if (pgOptions.is_none()) {
          options = NEW_BACKEND_NAMESPACE::optionsFromEnvironment();
        } else if (py::isinstance<NEW_BACKEND_NAMESPACE::Options>(pgOptions)) {
          options = pgOptions.cast<NEW_BACKEND_NAMESPACE::Options>();
        } else {
          throw py::type_error(
              "Backend " NEW_BACKEND_NAME ": pg_options must be " NEW_BACKEND_PACKAGE ".Options, not " +
              py::str(py::type::of(pgOptions).attr("__name__")).cast<std::string>());
        }
        py::gil_scoped_release release;
        return NEW_BACKEND_NAMESPACE::Backend::create(dist, options);
      },
      py::arg("options"),
      py::arg("backend_options") = py::none(),
      "Creates the backend of one process group (torch.distributed's extended API).");

  module.def(
      "group_options",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        auto* ours = dynamic_cast<NEW_BACKEND_NAMESPACE::Backend*>(backend.get());
        if (ours == nullptr) {
          throw py::type_error(NEW_BACKEND_NAME ": not a backend of " NEW_BACKEND_PACKAGE);
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
          record = NEW_BACKEND_NAMESPACE::pickledRecord();
        }
        return py::bytes(record);
      },
      "This process's flight recorder, pickled as c10d's FlightRecorder dumps it.");
  module.def(
      "dump_flight_record",
      &NEW_BACKEND_NAMESPACE::dumpRecord,
      py::arg("global_rank"),
      py::call_guard<py::gil_scoped_release>(),
      "Writes the flight recorder to TORCH_FR_DUMP_TEMP_FILE<global_rank>; returns the path.");

#if NEW_BACKEND_WITH_MPI

  module.def(
      "mpi_world",
      [] { return NEW_BACKEND_NAMESPACE::mpiWorld(); },
      py::call_guard<py::gil_scoped_release>(),
      "(rank, size) of this process in MPI_COMM_WORLD; initialises MPI if needed.");
  module.def(
      "mpi_broadcast",
      [](const std::string& value) {
        std::string result;
        {
          py::gil_scoped_release release;
          result = NEW_BACKEND_NAMESPACE::mpiBroadcast(value);
        }
        return py::bytes(result);
      },
      py::arg("value"),
      "Rank 0's value on every rank of MPI_COMM_WORLD (MPI_Bcast); initialises MPI if needed.");
  module.def(
      "mpi_initialized",
      &NEW_BACKEND_NAMESPACE::mpiInitialized,
      "Whether MPI is initialised (by anyone) and not finalised.");
  module.def(
      "mpi_finalize",
      &NEW_BACKEND_NAMESPACE::finalizeMpi,
      py::call_guard<py::gil_scoped_release>(),
      "Finalises MPI if this backend initialised it (registered with atexit).");
#endif

#ifdef WITH_CUDA
  module.attr("WITH_CUDA") = true;
#else
  module.attr("WITH_CUDA") = false;
#endif
}

// The Python module dummy_collectives._C: the creator torch.distributed calls.
//
// This is the only file that includes pybind11 (through torch's pybind.h,
// which also teaches it c10::intrusive_ptr); it is the slowest file to
// compile, so it holds nothing else. Registration happens in Python, in
// dummy_collectives/__init__.py.
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
  module.doc() = "C++ core of the \"dummy\" torch.distributed backend.";
  torch::installCapturedTracebackPython();
  // Before the interpreter finalizes, dumps stop reading Python frames and groups stop
  // talking to their stores (recorder.cpp).
  py::module_::import("atexit").attr("register")(
      py::cpp_function(&dummy_collectives::atInterpreterExit, py::call_guard<py::gil_scoped_release>()));

  // Options: the C++ struct of ops.hpp, one attribute per field listed in
  // describeOptions(). A new object starts from the DUMMY_* environment
  // variables; keywords override them.
  py::class_<dummy_collectives::Options> options(
      module, "Options", "Options of a \"dummy\" process group (pg_options=...).");
  options.def(
      py::init([](const py::kwargs& fields) {
        dummy_collectives::Options result = dummy_collectives::optionsFromEnvironment();
        py::object self = py::cast(result);
        for (const auto& [name, value] : fields) {
          if (!py::hasattr(self, name)) {
            throw py::type_error(
                "dummy: Options has no field " + py::str(name).cast<std::string>());
          }
          self.attr(name) = value;
        }
        return self.cast<dummy_collectives::Options>();
      }),
      "Options(**fields): the environment's values, then these fields.");
  // A value of the wrong type is a TypeError naming the field and the type it takes.
  dummy_collectives::describeOptions([&options](const char* name, auto member, const char* doc) {
    using Field = std::remove_reference_t<decltype(std::declval<dummy_collectives::Options&>().*member)>;
    options.def_property(
        name,
        [member](const dummy_collectives::Options& self) { return self.*member; },
        [member, name](
            dummy_collectives::Options& self, const py::object& value) {
          try {
            self.*member = value.cast<Field>();
          } catch (const py::cast_error&) {
            throw py::type_error(
                std::string("dummy: Options.") + name + " takes " + pythonTypeName<Field>() + ", not " +
                py::repr(value).cast<std::string>());
          }
        },
        doc);
  });
  options.def("__repr__", [](const py::object& self) {
    std::string text = "Options(";
    const char* separator = "";
    dummy_collectives::describeOptions([&](const char* name, auto /* member */, const char* /* doc */) {
      text += separator + std::string(name) + "=" + py::repr(self.attr(name)).cast<std::string>();
      separator = ", ";
    });
    return text + ")";
  });

  module.def(
      "create_backend",
      [](const c10d::DistributedBackendOptions& dist, const py::object& pgOptions) {
        dummy_collectives::Options options;
        if (pgOptions.is_none()) {
          options = dummy_collectives::optionsFromEnvironment();
        } else if (py::isinstance<dummy_collectives::Options>(pgOptions)) {
          options = pgOptions.cast<dummy_collectives::Options>();
        } else {
          throw py::type_error(
              "Backend dummy: pg_options must be dummy_collectives.Options, not " +
              py::str(py::type::of(pgOptions).attr("__name__")).cast<std::string>());
        }
        py::gil_scoped_release release;
        return dummy_collectives::BackendDummy::create(dist, options);
      },
      py::arg("options"),
      py::arg("backend_options") = py::none(),
      "Creates the backend of one process group (torch.distributed's extended API).");

  module.def(
      "group_options",
      [](const c10::intrusive_ptr<c10d::Backend>& backend) {
        auto* ours = dynamic_cast<dummy_collectives::BackendDummy*>(backend.get());
        if (ours == nullptr) {
          throw py::type_error("dummy: not a backend of dummy_collectives");
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
          record = dummy_collectives::pickledRecord();
        }
        return py::bytes(record);
      },
      "This process's flight recorder, pickled as c10d's FlightRecorder dumps it.");
  module.def(
      "dump_flight_record",
      &dummy_collectives::dumpRecord,
      py::arg("global_rank"),
      py::call_guard<py::gil_scoped_release>(),
      "Writes the flight recorder to TORCH_FR_DUMP_TEMP_FILE<global_rank>; returns the path.");

#ifdef WITH_CUDA
  module.attr("WITH_CUDA") = true;
#else
  module.attr("WITH_CUDA") = false;
#endif
}

// The runtime, compiled as one translation unit. Each unit pays for torch's
// headers (about 17 s here) far more than for its own code, so the runtime's
// files and this project's transport compile together, and bindings.cpp,
// which adds pybind11's, compiles beside them (setup.py).
#include "backend.cpp"
#include "device.cpp"
#include "group.cpp"
#include "recorder.cpp"

#if __has_include("store_exchange.cpp")
#include "store_exchange.cpp"
#endif
#if __has_include("mpi_comm.cpp")
#include "mpi_comm.cpp"
#endif
#if __has_include("ucx_comm.cpp")
#include "ucx_comm.cpp"
#endif

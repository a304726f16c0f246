// The MPI layer of the backend: see mpi_comm.hpp.
#include "mpi_comm.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <shared_mutex>
#include <thread>

#include <pthread.h>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support
#endif
#endif

#include "context.hpp"

namespace NEW_BACKEND_NAMESPACE {

// Everything an op needs until its requests complete.
struct MpiOp::State {
  enum class Kind { kCollective, kSend, kRecv };

  std::shared_ptr<MpiComm> comm;
  std::vector<MPI_Request> requests;
  std::vector<Kind> kinds;
  std::vector<Buffer> receivedInto;  // for kRecv: the buffer the message must fill
  std::vector<MPI_Status> statuses;
  std::vector<at::Tensor> tensors;  // the memory MPI reads or writes: kept alive
  std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> writeBacks;  // staging -> tensors
  std::vector<std::function<void()>> then;  // run after the write-backs
  std::deque<std::vector<int>> arrays;      // counts and offsets MPI reads meanwhile
  bool streamSynced = false;  // the op's CUDA stream was synchronised (CUDA-aware MPI)
  bool counted = false;    // counted in MpiLibrary::pending
  bool complete = false;   // every request completed
  bool abandoned = false;  // given up on (see abandon())

  bool hasCollective() const {
    return std::find(kinds.begin(), kinds.end(), Kind::kCollective) != kinds.end();
  }
  bool hasReceive() const {
    return std::find(kinds.begin(), kinds.end(), Kind::kRecv) != kinds.end();
  }
};

namespace {

using Clock = std::chrono::steady_clock;

// The longest a receive marked for cancellation is waited for (MPI makes that
// wait local: it takes microseconds).
constexpr auto kCancelGrace = std::chrono::seconds(1);
// The longest MPI_Finalize may take at exit while ops are still pending.
constexpr auto kFinalizeGrace = std::chrono::seconds(30);

// MPI's lifetime in this process.
struct MpiLibrary {
  std::mutex mutex;             // initialisation and finalisation
  std::shared_mutex inUse;      // shared while this backend calls MPI, exclusive to finalise
  bool initialized = false;     // initialised (by us or by the program) and checked
  bool ours = false;            // we called MPI_Init_thread, so we finalise
  bool finalized = false;       // finalizeMpi ran: no more MPI calls
  std::atomic<int64_t> pending{0};  // ops whose requests have not all completed
  std::vector<std::shared_ptr<MpiOp::State>> abandoned;  // given up on; MPI may still use them
  MPI_Op halfOps[2][4] = {};    // [float16, bfloat16][sum, product, min, max]
  bool cudaAware = false;       // MPI reads and writes CUDA memory itself
  std::atomic<bool> forked{false};  // this is a child forked after that (pthread_atfork)
};

MpiLibrary& mpiLibrary() {
  static MpiLibrary* instance = new MpiLibrary();  // never destroyed: MPI may outlive static destructors
  return *instance;
}

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, length);
}

// float16 and bfloat16 reductions, computed in float: MPI has no such types.
template <typename T, typename Combine>
void combine(void* in, void* inout, int* length, MPI_Datatype* /* type */) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    b[i] = static_cast<T>(Combine()(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}

struct Min {
  float operator()(float a, float b) const {
    return std::min(a, b);
  }
};

struct Max {
  float operator()(float a, float b) const {
    return std::max(a, b);
  }
};

template <typename T>
void createHalfOps(MPI_Op (&ops)[4]) {
  CHECK_MPI(MPI_Op_create(&combine<T, std::plus<float>>, /*commute=*/1, &ops[0]));
  CHECK_MPI(MPI_Op_create(&combine<T, std::multiplies<float>>, /*commute=*/1, &ops[1]));
  CHECK_MPI(MPI_Op_create(&combine<T, Min>, /*commute=*/1, &ops[2]));
  CHECK_MPI(MPI_Op_create(&combine<T, Max>, /*commute=*/1, &ops[3]));
}

// Whether this MPI library reads and writes CUDA memory itself (a CUDA-aware
// build), asked at run time: MPICH 4 and later, and Open MPI, can tell.
// <NAME>_MPI_CUDA_AWARE=0 stages CUDA tensors through host memory anyway.
bool queryCudaAware() {
#ifdef WITH_CUDA
  const char* setting = std::getenv(NEW_BACKEND_ENV_PREFIX "MPI_CUDA_AWARE");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) {
    return false;
  }
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  return MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS &&
      supported != 0;
#elif defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
#else
  return false;
#endif
}

// Initialises MPI once per process, at MPI_THREAD_MULTIPLE; or checks the
// level the program initialised it with.
void ensureInitialized() {
  MpiLibrary& rt = mpiLibrary();
  std::lock_guard<std::mutex> lock(rt.mutex);
  TORCH_CHECK(
      !rt.finalized, "Backend " NEW_BACKEND_NAME ": MPI was finalized; it cannot be initialized again");
  if (rt.initialized) {
    return;
  }
  int initialized = 0;
  int finalized = 0;
  CHECK_MPI(MPI_Initialized(&initialized));
  CHECK_MPI(MPI_Finalized(&finalized));
  TORCH_CHECK(
      !finalized,
      "Backend " NEW_BACKEND_NAME ": the program finalized MPI; it cannot be initialized again");
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    CHECK_MPI(MPI_Query_thread(&provided));
  } else {
    CHECK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    rt.ours = true;
    // Errors become exceptions on MPI_COMM_WORLD too: Intel MPI raises the
    // error of MPI_Test on a request (a truncated receive) there, not on the
    // request's communicator, and its default handler aborts the job.
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
  TORCH_CHECK(
      provided >= MPI_THREAD_MULTIPLE,
      "Backend " NEW_BACKEND_NAME " needs MPI_THREAD_MULTIPLE (every process group calls MPI from a "
      "worker thread of its own), but MPI provides ",
      threadLevelName(provided),
      rt.ours ? ": use an MPI library built with thread support (MPICH: "
                "--enable-threads=multiple; Open MPI: --enable-mpi-thread-multiple)"
              : ": initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE), or let the backend "
                "initialize it (mpi4py: mpi4py.rc.thread_level = \"multiple\")");
  createHalfOps<c10::Half>(rt.halfOps[0]);
  createHalfOps<c10::BFloat16>(rt.halfOps[1]);
  rt.cudaAware = queryCudaAware();
  // Known without a getpid() call per MPI call: set in the child of a fork.
  pthread_atfork(nullptr, nullptr, [] { mpiLibrary().forked.store(true); });
  rt.initialized = true;
}

// Whether this process is a child forked (os.fork()) after MPI was
// initialised: MPI's state is its parent's, so it must not call MPI at all.
bool forked() {
  return mpiLibrary().forked.load(std::memory_order_relaxed);
}

// Registers `state` with MPI's lifetime once it holds requests.
void countPending(MpiOp::State& state) {
  if (!state.counted) {
    state.counted = true;
    mpiLibrary().pending.fetch_add(1);
  }
}

void markComplete(MpiOp::State& state) {
  if (!state.complete) {
    state.complete = true;
    if (state.counted) {
      mpiLibrary().pending.fetch_sub(1);
    }
  }
}

// The status of a request not completed yet: no source.
MPI_Status pendingStatus() {
  MPI_Status status{};
  status.MPI_SOURCE = MPI_ANY_SOURCE;
  return status;
}

// Completes a receive marked for cancellation. MPI makes this local, but it
// is bounded all the same. True if the receive was cancelled; false if it had
// matched its message first, which then went into its buffer (or is still on
// its way there): the message was consumed.
bool completeCancelled(MPI_Request& request, MPI_Status& status) {
  const auto until = Clock::now() + kCancelGrace;
  int completed = 0;
  int code = MPI_SUCCESS;
  while ((code = MPI_Test(&request, &completed, &status)) == MPI_SUCCESS && !completed &&
         Clock::now() < until) {
    std::this_thread::yield();
  }
  if (code != MPI_SUCCESS) {
    request = MPI_REQUEST_NULL;  // it completed, with an error: it had matched
    return false;
  }
  int cancelled = 0;
  return completed && MPI_Test_cancelled(&status, &cancelled) == MPI_SUCCESS && cancelled;
}

// Gives up on an op whose requests have not completed. Its receives are
// cancelled; returns true when one had matched its message before (MPI
// cannot take a message back). What MPI may still use (a collective it cannot
// cancel, a send no peer received) stays alive in mpiLibrary().abandoned.
bool abandon(const std::shared_ptr<MpiOp::State>& state) {
  if (state->complete || state->abandoned || state->requests.empty()) {
    return false;
  }
  bool consumed = false;
  {
    std::shared_lock<std::shared_mutex> use(mpiLibrary().inUse);
    if (!mpiLibrary().finalized) {
      state->statuses.resize(state->requests.size(), pendingStatus());
      for (size_t i = 0; i < state->requests.size(); ++i) {
        MPI_Request& request = state->requests[i];
        if (state->kinds[i] != MpiOp::State::Kind::kRecv || request == MPI_REQUEST_NULL) {
          continue;
        }
        MPI_Cancel(&request);
        consumed = !completeCancelled(request, state->statuses[i]) || consumed;
      }
    }
  }
  const bool done = std::all_of(
      state->requests.begin(), state->requests.end(),
      [](MPI_Request request) { return request == MPI_REQUEST_NULL; });
  if (done) {
    markComplete(*state);
  } else {
    state->abandoned = true;
    std::lock_guard<std::mutex> lock(mpiLibrary().mutex);
    mpiLibrary().abandoned.push_back(state);
  }
  return consumed;
}

// Whether MPI can use the tensor's own memory: a contiguous CPU tensor; or a
// contiguous CUDA tensor when MPI is CUDA-aware, except float16 and bfloat16,
// whose reductions are functions run on the host.
bool canUseInPlace(const at::Tensor& tensor) {
  if (!tensor.is_contiguous()) {
    return false;
  }
  if (tensor.is_cuda()) {
    return mpiLibrary().cudaAware && tensor.scalar_type() != at::kHalf &&
        tensor.scalar_type() != at::kBFloat16;
  }
  return tensor.is_cpu();
}

// Whether `tensors` lie one after the other, in order, in one storage that
// MPI can use directly.
bool backToBack(const std::vector<at::Tensor>& tensors) {
  const at::Tensor& first = tensors.front();
  const char* next = static_cast<const char*>(first.data_ptr());
  for (const at::Tensor& tensor : tensors) {
    if (!canUseInPlace(tensor) || tensor.scalar_type() != first.scalar_type() ||
        !tensor.storage().is_alias_of(first.storage()) ||
        static_cast<const char*>(tensor.data_ptr()) != next) {
      return false;
    }
    next += tensor.nbytes();
  }
  return true;
}

int64_t totalNumel(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const at::Tensor& tensor : tensors) {
    total += tensor.numel();
  }
  return total;
}

int checkedCount(int64_t numel) {
  TORCH_CHECK(
      numel <= INT_MAX,
      "a buffer of ", numel, " elements is more than one MPI call can count (2^31 - 1)");
  return static_cast<int>(numel);
}

// Keeps `tensor` alive for MPI, which uses its memory directly. MPI knows
// nothing of CUDA streams: before it touches a CUDA tensor, the work queued on
// the op's stream (the current stream here) must have finished.
void useDirectly(MpiOp::State& state, const at::Tensor& tensor) {
#ifdef WITH_CUDA
  if (tensor.is_cuda() && !state.streamSynced) {
    c10::cuda::getCurrentCUDAStream(tensor.device().index()).synchronize();
    state.streamSynced = true;
  }
#endif
  state.tensors.push_back(tensor);
}

Buffer bufferOver(const at::Tensor& memory, int64_t numel, c10::ScalarType dtype) {
  Buffer buffer;
  buffer.ptr = memory.data_ptr();
  buffer.count = checkedCount(numel);
  buffer.type = mpiDatatype(dtype);
  buffer.itemsize = c10::elementSize(dtype);
  TORCH_CHECK(buffer.type != MPI_DATATYPE_NULL, "MPI cannot carry dtype ", dtype);
  return buffer;
}

} // namespace

// Held (shared) around this backend's MPI calls, so that finalizeMpi() never
// runs while another thread is inside MPI.
class MpiUse {
 public:
  MpiUse() : lock_(mpiLibrary().inUse) {
    TORCH_CHECK(!mpiLibrary().finalized, "MPI was finalized (the process is exiting)");
    TORCH_CHECK(
        !forked(), "MPI cannot be used in a process forked (os.fork()) after it was initialized");
  }

 private:
  std::shared_lock<std::shared_mutex> lock_;
};

namespace {

// Tests every request once (MPI_Test: unlike MPI_Testall, its errors go to
// the communicator's handler, which returns them). True once all completed;
// throws on an MPI error.
bool testAll(MpiOp::State& state) {
  MpiUse use;
  const size_t n = state.requests.size();
  state.statuses.resize(n, pendingStatus());
  bool done = true;
  for (size_t i = 0; i < n; ++i) {
    if (state.requests[i] == MPI_REQUEST_NULL) {
      continue;  // completed earlier (MPI_Test resets it)
    }
    int completed = 0;
    const int code = MPI_Test(&state.requests[i], &completed, &state.statuses[i]);
    if (code == MPI_SUCCESS) {
      done = done && completed;
      continue;
    }
    state.requests[i] = MPI_REQUEST_NULL;  // it completed, with an error
    int errorClass = MPI_SUCCESS;
    MPI_Error_class(code, &errorClass);
    if (errorClass == MPI_ERR_TRUNCATE && state.kinds[i] == MpiOp::State::Kind::kRecv) {
      TORCH_CHECK(
          false,
          "a rank sent more than the ", state.receivedInto[i].count,
          " elements this rank expects (", mpiErrorText(code), ")");
    }
    TORCH_CHECK(false, "MPI_Test failed: ", mpiErrorText(code));
  }
  if (done) {
    markComplete(state);
  }
  return done;
}

// After completion: checks what was received, writes staging copies back,
// runs the op's last steps.
void finish(MpiOp::State& state) {
  for (size_t i = 0; i < state.requests.size(); ++i) {
    if (state.kinds[i] != MpiOp::State::Kind::kRecv) {
      continue;
    }
    const Buffer& into = state.receivedInto[i];
    int count = 0;
    CHECK_MPI(MPI_Get_count(&state.statuses[i], into.type, &count));
    TORCH_CHECK(
        count == into.count,
        "rank ", state.statuses[i].MPI_SOURCE, " sent ", count,
        " elements, but this rank expects ", into.count);
  }
  for (auto& [staged, tensors] : state.writeBacks) {
    const at::Tensor flat = staged.view(-1);
    int64_t offset = 0;
    for (const at::Tensor& tensor : tensors) {
      tensor.copy_(flat.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
      offset += tensor.numel();
    }
  }
  for (const std::function<void()>& step : state.then) {
    step();
  }
}

// "recv #3 from rank 1": the op, for messages.
std::string describeOp(const OpContext& ctx, const MpiOp::State& state) {
  std::string what = std::string(ctx.op) + " #" + std::to_string(ctx.seq);
  for (size_t i = 0; i < state.kinds.size(); ++i) {
    if (state.kinds[i] == MpiOp::State::Kind::kRecv && state.statuses.size() > i &&
        state.statuses[i].MPI_SOURCE >= 0) {
      what += " from rank " + std::to_string(state.statuses[i].MPI_SOURCE);
    }
  }
  return what;
}

// After abandon(): a receive that had matched its message consumed it. The op
// is delivered when it can be (`canDeliver`: it is not failing for another
// reason) and is still waited for. Otherwise the message is lost, and the
// next receive from that rank would take the message after it: the group
// becomes unusable instead. True when the op can be delivered.
bool deliverOrFailGroup(const MpiOp::State& state, const OpContext& ctx, bool canDeliver) {
  if (canDeliver && state.complete && !ctx.cancelled.load() && !ctx.group.aborted.load()) {
    return true;
  }
  ctx.failGroup(
      describeOp(ctx, state) +
      " was given up on after MPI had matched its message (MPI_Test_cancelled), so a later "
      "receive would take the message after it");
  return false;
}

// One poll of an op in flight: true once it completed; throws when it
// failed, timed out, was aborted or its group was destroyed (and then gives
// up on it).
bool poll(const std::shared_ptr<MpiOp::State>& state, const OpContext& ctx) {
  try {
    if (testAll(*state)) {
      if (ctx.cancelled.load() && state->hasReceive()) {
        deliverOrFailGroup(*state, ctx, /*canDeliver=*/false);  // failed meanwhile: nobody gets it
      }
      finish(*state);
      return true;
    }
  } catch (...) {
    if (abandon(state)) {
      deliverOrFailGroup(*state, ctx, /*canDeliver=*/false);
    }
    throw;
  }
  if (!ctx.expired()) {
    return false;
  }
  if (abandon(state) && deliverOrFailGroup(*state, ctx, /*canDeliver=*/true)) {
    finish(*state);  // matched while it was being cancelled: the message is here
    return true;
  }
  TORCH_CHECK(
      !ctx.group.aborted.load(), "the process group was destroyed while the op was in flight");
  TORCH_CHECK(!ctx.cancelled.load(), "the op was aborted");
  TORCH_CHECK(
      !state->hasCollective(),
      "the other ranks did not all join within the op's ", ctx.timeout.count(),
      " ms timeout (a rank that never calls ", ctx.op, ", or that died, blocks the others)");
  TORCH_CHECK(
      false,
      "the message did not complete within the op's ", ctx.timeout.count(),
      " ms timeout (is a matching ", ctx.op == std::string("send") ? "receive" : "send",
      " missing, or did the peer die?)");
}

} // namespace

void checkMpi(int code, const char* call) {
  if (code == MPI_SUCCESS) {
    return;
  }
  const char* paren = std::strchr(call, '(');
  const std::string name = paren ? std::string(call, paren - call) : std::string(call);
  TORCH_CHECK(false, name, " failed: ", mpiErrorText(code));
}

MPI_Datatype mpiDatatype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return MPI_FLOAT;
    case c10::kDouble: return MPI_DOUBLE;
    case c10::kChar: return MPI_INT8_T;
    case c10::kByte: return MPI_UINT8_T;
    case c10::kShort: return MPI_INT16_T;
    case c10::kInt: return MPI_INT32_T;
    case c10::kLong: return MPI_INT64_T;
    case c10::kUInt16: return MPI_UINT16_T;
    case c10::kUInt32: return MPI_UINT32_T;
    case c10::kUInt64: return MPI_UINT64_T;
    case c10::kBool: return MPI_UINT8_T;  // one byte, 0 or 1
    case c10::kComplexFloat: return MPI_C_FLOAT_COMPLEX;
    case c10::kComplexDouble: return MPI_C_DOUBLE_COMPLEX;
    default: break;
  }
  if (c10::isQIntType(dtype) || c10::isBitsType(dtype)) {
    return MPI_DATATYPE_NULL;  // values that mean nothing without their quantisation or layout
  }
  switch (c10::elementSize(dtype)) {  // float16, bfloat16, float8, ...: moved as bits
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    case 8: return MPI_UINT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiReduction(Reduction op, c10::ScalarType dtype) {
  if (dtype == c10::kHalf || dtype == c10::kBFloat16) {
    const MPI_Op (&ops)[4] = mpiLibrary().halfOps[dtype == c10::kHalf ? 0 : 1];
    switch (op) {
      case Reduction::kSum:
      case Reduction::kAvg: return ops[0];
      case Reduction::kProduct: return ops[1];
      case Reduction::kMin: return ops[2];
      case Reduction::kMax: return ops[3];
      default: return MPI_OP_NULL;
    }
  }
  if (dtype == c10::kBool) {  // logical: or for SUM and MAX, and for PRODUCT and MIN
    switch (op) {
      case Reduction::kSum:
      case Reduction::kMax:
      case Reduction::kBor: return MPI_BOR;
      case Reduction::kProduct:
      case Reduction::kMin:
      case Reduction::kBand: return MPI_BAND;
      case Reduction::kBxor: return MPI_BXOR;
      default: return MPI_OP_NULL;
    }
  }
  if (dtype == c10::kComplexFloat || dtype == c10::kComplexDouble) {
    switch (op) {
      case Reduction::kSum:
      case Reduction::kAvg: return MPI_SUM;
      case Reduction::kProduct: return MPI_PROD;
      default: return MPI_OP_NULL;  // complex numbers have no order
    }
  }
  const bool floating = dtype == c10::kFloat || dtype == c10::kDouble;
  const bool integral = dtype == c10::kChar || dtype == c10::kByte || dtype == c10::kShort ||
      dtype == c10::kInt || dtype == c10::kLong || dtype == c10::kUInt16 ||
      dtype == c10::kUInt32 || dtype == c10::kUInt64;
  if (!floating && !integral) {
    return MPI_OP_NULL;  // float8 and friends: no arithmetic
  }
  switch (op) {
    case Reduction::kSum: return MPI_SUM;
    case Reduction::kAvg: return floating ? MPI_SUM : MPI_OP_NULL;
    case Reduction::kProduct: return MPI_PROD;
    case Reduction::kMin: return MPI_MIN;
    case Reduction::kMax: return MPI_MAX;
    case Reduction::kBand: return integral ? MPI_BAND : MPI_OP_NULL;
    case Reduction::kBor: return integral ? MPI_BOR : MPI_OP_NULL;
    case Reduction::kBxor: return integral ? MPI_BXOR : MPI_OP_NULL;
  }
  return MPI_OP_NULL;
}

std::pair<int, int> mpiWorld() {
  ensureInitialized();
  MpiUse use;
  int rank = 0;
  int size = 0;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return {rank, size};
}

std::string mpiBroadcast(const std::string& value) {
  ensureInitialized();
  MpiUse use;
  long long length = static_cast<long long>(value.size());
  CHECK_MPI(MPI_Bcast(&length, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD));
  std::string result = value;
  result.resize(static_cast<size_t>(length));
  CHECK_MPI(MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD));
  return result;
}

bool mpiInitialized() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void finalizeMpi() {
  MpiLibrary& rt = mpiLibrary();
  std::lock_guard<std::mutex> lock(rt.mutex);
  if (!rt.ours || rt.finalized || forked()) {
    return;  // a forked child leaves MPI to its parent
  }
  std::unique_lock<std::shared_mutex> exclusive(rt.inUse);  // waits for MPI calls in progress
  rt.finalized = true;  // from now on, ops fail instead of calling MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return;
  }
  for (const std::shared_ptr<MpiOp::State>& state : rt.abandoned) {
    bool done = true;  // a send or collective a peer never matched does not complete
    for (MPI_Request& request : state->requests) {
      int completed = 1;
      if (request != MPI_REQUEST_NULL) {
        MPI_Test(&request, &completed, MPI_STATUS_IGNORE);
      }
      done = done && completed;
    }
    if (done) {
      markComplete(*state);
    }
  }
  // Every rank must call MPI_Finalize: a launcher such as MPICH's Hydra ends
  // the job, killing the ranks still running, when one rank exits without
  // it. MPI_Finalize with ops still pending is erroneous MPI, but libraries
  // return from it (MPICH warns); a watchdog bounds it all the same.
  const int64_t pending = rt.pending.load();
  std::mutex doneMutex;
  std::condition_variable doneChanged;
  bool done = false;
  std::thread watchdog;
  if (pending > 0) {
    std::fprintf(
        stderr,
        "Backend " NEW_BACKEND_NAME ": finalizing MPI at exit with %lld op(s) that never completed (a "
        "peer died, timed out or was never waited for)\n",
        static_cast<long long>(pending));
    watchdog = std::thread([&] {
      std::unique_lock<std::mutex> watching(doneMutex);
      if (!doneChanged.wait_for(watching, kFinalizeGrace, [&] { return done; })) {
        std::fprintf(
            stderr,
            "Backend " NEW_BACKEND_NAME ": MPI_Finalize did not return within %lld s; exiting without it\n",
            static_cast<long long>(kFinalizeGrace.count()));
        std::fflush(stderr);
        std::_Exit(EXIT_FAILURE);
      }
    });
  }
  for (MPI_Op (&ops)[4] : rt.halfOps) {
    for (MPI_Op& op : ops) {
      MPI_Op_free(&op);
    }
  }
  MPI_Finalize();
  if (watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> finished(doneMutex);
      done = true;
    }
    doneChanged.notify_one();
    watchdog.join();
  }
}

// ---------------------------------------------------------------------------
// MpiComm

MpiComm::MpiComm(
    const std::string& backend,
    const std::vector<int64_t>& globalRanks,
    int rank,
    bool isWorld,
    MPI_Comm parent) {
  ensureInitialized();
  MpiUse use;
  int worldRank = 0;
  int worldSize = 0;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &worldRank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &worldSize));
  const int size = static_cast<int>(globalRanks.size());
  const int64_t globalRank = globalRanks.at(rank);
  TORCH_CHECK(
      globalRank == worldRank && (!isWorld || size == worldSize),
      "Backend ", backend, ": this process is rank ", globalRank, " of ", isWorld ? size : -1,
      " for torch.distributed but rank ", worldRank, " of ", worldSize,
      " in MPI_COMM_WORLD; they must agree. Start every rank with mpirun, mpiexec or srun, "
      "and take its rank and world size from MPI (as "
      NEW_BACKEND_PACKAGE ".init_process_group_from_mpi() does)");
  for (int64_t r : globalRanks) {
    TORCH_CHECK(
        r >= 0 && r < worldSize,
        "Backend ", backend, ": global rank ", r, " is not in MPI_COMM_WORLD (size ",
        worldSize, ")");
  }

  // The group's processes, in the group's rank order.
  const std::vector<int> ranks(globalRanks.begin(), globalRanks.end());
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  CHECK_MPI(MPI_Group_incl(world, size, ranks.data(), &group));
  constexpr int kCreateTag = 0x4e42;
  const int code = MPI_Comm_create_group(parent, group, kCreateTag, &comm_);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  checkMpi(code, "MPI_Comm_create_group");
  CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));  // errors become exceptions

  int commRank = -1;
  CHECK_MPI(MPI_Comm_rank(comm_, &commRank));
  TORCH_CHECK(
      commRank == rank,
      "Backend ", backend, ": MPI numbered this process ", commRank,
      " in its group, torch.distributed ", rank);
  int* tagUpperBound = nullptr;
  int found = 0;
  CHECK_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUpperBound, &found));
  maxTag_ = found ? *tagUpperBound : 32767;  // the least the MPI standard guarantees
}

MpiComm::~MpiComm() {
  // Ops given up on while MPI still ran them keep their communicator alive
  // (MpiOp::State holds it), so none runs on this one now. It is freed unless
  // MPI was finalized (by this backend, the program or mpi4py) or this is a
  // forked child, where MPI is its parent's.
  if (comm_ == MPI_COMM_NULL || forked()) {
    return;
  }
  std::shared_lock<std::shared_mutex> use(mpiLibrary().inUse);
  if (!mpiLibrary().finalized && mpiInitialized()) {
    MPI_Comm_free(&comm_);
  }
}

// ---------------------------------------------------------------------------
// MpiOp

MpiOp::MpiOp(const OpContext& ctx, std::shared_ptr<MpiComm> comm)
    : ctx_(ctx), use_(std::make_unique<MpiUse>()), state_(std::make_shared<State>()) {
  TORCH_CHECK(comm, "the process group's MPI communicator was freed");
  state_->comm = std::move(comm);
}

MPI_Comm MpiOp::comm() const {
  return state_->comm->get();
}

Buffer MpiOp::in(const at::Tensor& tensor) {
  if (canUseInPlace(tensor)) {
    useDirectly(*state_, tensor);
    return bufferOver(tensor, tensor.numel(), tensor.scalar_type());
  }
  const at::Tensor memory = tensor.cpu().contiguous();
  state_->tensors.push_back(memory);
  return bufferOver(memory, memory.numel(), tensor.scalar_type());
}

Buffer MpiOp::out(const at::Tensor& tensor) {
  if (canUseInPlace(tensor)) {
    useDirectly(*state_, tensor);
    return bufferOver(tensor, tensor.numel(), tensor.scalar_type());
  }
  const at::Tensor staged = tensor.new_empty(tensor.sizes(), tensor.options().device(at::kCPU));
  state_->writeBacks.push_back({staged, {tensor}});
  return bufferOver(staged, staged.numel(), tensor.scalar_type());
}

Buffer MpiOp::out(const at::Tensor& tensor, const Buffer& input) {
  const char* begin = static_cast<const char*>(tensor.data_ptr());
  const char* end = begin + tensor.nbytes();
  const char* inputBegin = static_cast<const char*>(input.ptr);
  const char* inputEnd = inputBegin + static_cast<size_t>(input.count) * input.itemsize;
  if (!canUseInPlace(tensor) || input.ptr == nullptr || end <= inputBegin || inputEnd <= begin) {
    return out(tensor);
  }
  const at::Tensor staged = tensor.new_empty(tensor.sizes(), tensor.options().device(at::kCPU));
  state_->writeBacks.push_back({staged, {tensor}});
  return bufferOver(staged, staged.numel(), tensor.scalar_type());
}

Buffer MpiOp::inout(const at::Tensor& tensor) {
  if (canUseInPlace(tensor)) {
    useDirectly(*state_, tensor);
    return bufferOver(tensor, tensor.numel(), tensor.scalar_type());
  }
  const at::Tensor staged = tensor.cpu().contiguous();
  state_->writeBacks.push_back({staged, {tensor}});
  return bufferOver(staged, staged.numel(), tensor.scalar_type());
}

Buffer MpiOp::in(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) {
    return Buffer{};
  }
  const int64_t total = totalNumel(tensors);
  const at::Tensor& first = tensors.front();
  if (backToBack(tensors)) {
    for (const at::Tensor& tensor : tensors) {
      useDirectly(*state_, tensor);
    }
    return bufferOver(first, total, first.scalar_type());
  }
  const at::Tensor staged = first.new_empty({total}, first.options().device(at::kCPU));
  int64_t offset = 0;
  for (const at::Tensor& tensor : tensors) {
    staged.narrow(0, offset, tensor.numel()).copy_(tensor.reshape(-1));
    offset += tensor.numel();
  }
  state_->tensors.push_back(staged);
  return bufferOver(staged, total, first.scalar_type());
}

Buffer MpiOp::out(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) {
    return Buffer{};
  }
  const int64_t total = totalNumel(tensors);
  const at::Tensor& first = tensors.front();
  if (backToBack(tensors)) {
    for (const at::Tensor& tensor : tensors) {
      useDirectly(*state_, tensor);
    }
    return bufferOver(first, total, first.scalar_type());
  }
  const at::Tensor staged = first.new_empty({total}, first.options().device(at::kCPU));
  state_->writeBacks.push_back({staged, tensors});
  return bufferOver(staged, total, first.scalar_type());
}

MPI_Request* MpiOp::request() {
  countPending(*state_);
  state_->requests.push_back(MPI_REQUEST_NULL);
  state_->kinds.push_back(State::Kind::kCollective);
  state_->receivedInto.emplace_back();
  return &state_->requests.back();
}

MPI_Request* MpiOp::sendRequest() {
  MPI_Request* request = this->request();
  state_->kinds.back() = State::Kind::kSend;
  return request;
}

MPI_Request* MpiOp::recvRequest(const Buffer& into) {
  MPI_Request* request = this->request();
  state_->kinds.back() = State::Kind::kRecv;
  state_->receivedInto.back() = into;
  return request;
}

int MpiOp::tag(int tag) const {
  const int maxTag = state_->comm->maxTag();
  TORCH_CHECK(
      tag >= 0 && tag <= maxTag,
      "tag ", tag, " is outside the tags MPI allows (0 to ", maxTag, ")");
  return tag;
}

const int* MpiOp::keep(std::vector<int> values) {
  state_->arrays.push_back(std::move(values));
  return state_->arrays.back().data();
}

void MpiOp::divideIfAverage(Reduction op, const at::Tensor& tensor) {
  if (op == Reduction::kAvg) {
    const int64_t size = ctx_.group.size;
    state_->then.push_back([tensor, size] { tensor.div_(size); });
  }
}

void MpiOp::completeLater() {
  ctx_.completeLater([ctx = ctx_, state = state_] { return poll(state, ctx); });
  state_.reset();
}

int MpiOp::completeLaterWithSource() {
  TORCH_CHECK(
      state_->requests.size() == 1 && state_->kinds.front() == State::Kind::kRecv,
      "completeLaterWithSource() needs exactly one receive request");
  state_->then.push_back([state = state_.get(), source = ctx_.source] {
    *source = state->statuses.front().MPI_SOURCE;
  });
  completeLater();
  return -1;
}

MpiOp::~MpiOp() {
  use_.reset();
  if (state_ && abandon(state_)) {
    deliverOrFailGroup(*state_, ctx_, /*canDeliver=*/false);  // the op fails: its message is lost
  }
}

} // namespace NEW_BACKEND_NAMESPACE

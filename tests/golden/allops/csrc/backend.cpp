// The plumbing of BackendAllops: see backend.hpp. The op bodies are in ops.cpp.
#include "backend.hpp"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#ifdef WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace allops_collectives {
namespace {

using Clock = std::chrono::steady_clock;

// How long a caller spins for its op before sleeping on the condition
// variable: long enough to catch a small op, short enough not to matter.
constexpr auto kWaitSpin = std::chrono::microseconds(50);
constexpr auto kMaxWorkerSpin = std::chrono::microseconds(100);
// How long wait() gives a body that reached its deadline to report why.
constexpr auto kReportGrace = std::chrono::milliseconds(500);
// How long destroying the group waits for an op body to notice and return.
constexpr auto kStopGrace = std::chrono::milliseconds(5000);
// An op a body completes later (OpContext::completeLater: MPI's requests, the
// store's receive from any source) moves on only while it is polled, so the
// worker polls the ops in flight, yielding between polls, for as long as they
// are likely to take: twice what the ops in flight took lately, within these
// bounds. After that it sleeps between polls, from kFirstPollPause doubling up
// to kMaxPollPause, until an op completes or another is queued (push() wakes
// it).
constexpr auto kMinPollSpin = std::chrono::microseconds(200);
constexpr auto kMaxPollSpin = std::chrono::milliseconds(100);
constexpr auto kFirstPollPause = std::chrono::microseconds(50);
constexpr auto kMaxPollPause = std::chrono::microseconds(1000);
// Where any thread may poll (kBodiesOnlyStart), a caller waiting for an op in
// flight polls it itself (Work::wait), as a blocking MPI call would, yielding
// between polls, for kDriveFactor times what the group's ops in flight took
// lately (from kMinDriveSpin to kMaxDriveSpin): a collective moves only while
// every rank polls, so a rank that sleeps early stalls its peers too.
// Meanwhile the worker leaves that op alone, and looks at its queue only every
// kAsidePause, unless the caller leaves with the op unfinished or a queued op
// may start.
constexpr int kDriveFactor = 4;
constexpr auto kMinDriveSpin = std::chrono::milliseconds(1);
constexpr auto kMaxDriveSpin = std::chrono::seconds(1);
constexpr auto kAsidePause = std::chrono::milliseconds(10);
// An op started on the caller's thread is pushed to the worker without waking
// it: its caller usually completes it itself (Work::wait). So while such ops
// keep coming, the idle worker dozes, looking at its queue every kDozeTick
// (an op nobody waits for is polled after that long at most), and only after
// kDozeFor without a push sleeps until push() wakes it.
constexpr auto kDozeTick = std::chrono::microseconds(1000);
constexpr auto kDozeFor = std::chrono::milliseconds(100);

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spinning pays only while the core has nothing else to run. A spinning
// thread yields between polls, so that on a machine with more ranks than
// cores the peer it waits for runs at once. But on a core that other
// programs keep busy, one yield waits out every other runnable thread's time
// slice (milliseconds, under Linux's EEVDF scheduler). So when a yield takes
// longer than kSlowYield, spinUntil() stops spinning in every thread of this
// process for kNoSpinFor (its callers sleep on a condition variable instead),
// then tries again.
constexpr auto kSlowYield = std::chrono::microseconds(500);
constexpr auto kNoSpinFor = std::chrono::seconds(1);
std::atomic<Clock::rep> noSpinUntil{0};

bool spinningPays() {
  return Clock::now().time_since_epoch().count() >= noSpinUntil.load(std::memory_order_relaxed);
}

// Yields the core; false if that took so long that waits should sleep instead.
bool yieldQuickly() {
  const auto before = Clock::now();
  std::this_thread::yield();
  const auto after = Clock::now();
  if (after - before < kSlowYield) {
    return true;
  }
  noSpinUntil.store((after + kNoSpinFor).time_since_epoch().count(), std::memory_order_relaxed);
  return false;
}

// Spins until `done()` or `budget` has passed, yielding between polls after
// the first few, or until spinning stops paying; returns done().
template <typename Done>
bool spinUntil(Done done, Clock::duration budget) {
  const auto until = Clock::now() + budget;
  for (int polls = 0;; ++polls) {
    if (done()) {
      return true;
    }
    if (polls < 16) {
      cpuRelax();
      continue;
    }
    if (((polls & 7) == 0 && Clock::now() > until) || !spinningPays() || !yieldQuickly()) {
      return done();
    }
  }
}

// Counts a running op body for as long as it exists.
class Running {
 public:
  explicit Running(std::atomic<int>& count) : count_(count) {
    count_.fetch_add(1);
  }
  ~Running() {
    count_.fetch_sub(1);
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  std::atomic<int>& count_;
};

std::string errorMessage(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// A c10d error (RuntimeError in Python) carrying `message`.
std::exception_ptr backendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

// Every tensor in `outputs`, flattened, for Work::result().
void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      collectTensors(item, out);
    }
  }
}

// The argument checks of one call. Each failure raises a RuntimeError that
// names the backend, the rank, the op and what is wrong.
class Check {
 public:
  Check(const Group& group, const char* op) : group_(group), op_(op) {}

  int size() const {
    return group_.size;
  }

  // A usable tensor: defined, dense, on a device this build supports, of a
  // dtype the backend supports.
  void tensor(const at::Tensor& t, const char* what) const {
    require(t.defined(), what, " is an undefined tensor");
    require(t.layout() == c10::kStrided, what, " must be a dense tensor, got layout ", t.layout());
    require(
        t.is_cpu() || t.is_cuda(),
        what,
        " is on ",
        t.device(),
        "; this backend is registered for cpu and cuda tensors");
#ifndef WITH_CUDA
    require(
        !t.is_cuda(),
        what,
        " is a CUDA tensor, but this build of allops_collectives has no CUDA support "
        "(rebuild it against a CUDA build of torch, or with FORCE_CUDA=1)");
#endif
    require(supportsDtype(t.scalar_type()), what, " has dtype ", t.scalar_type(), ", which this backend does not support");
  }

  // Exactly one tensor, checked.
  at::Tensor& one(std::vector<at::Tensor>& tensors, const char* what) const {
    require(tensors.size() == 1, what, " must hold exactly one tensor, got ", tensors.size());
    tensor(tensors.front(), what);
    return tensors.front();
  }

  // At least one tensor, all checked, all of one dtype and on one device.
  void many(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(!tensors.empty(), what, " is empty");
    for (const at::Tensor& t : tensors) {
      tensor(t, what);
      sameDtype(t, tensors.front(), what);
    }
  }

  // Exactly one tensor list.
  std::vector<at::Tensor>& oneList(
      std::vector<std::vector<at::Tensor>>& lists,
      const char* what) const {
    require(lists.size() == 1, what, " must hold exactly one tensor list, got ", lists.size());
    return lists.front();
  }

  // One tensor per rank of the group, each like `like` (dtype, device, numel).
  void perRank(
      const std::vector<at::Tensor>& tensors,
      const at::Tensor& like,
      const char* what) const {
    require(
        static_cast<int>(tensors.size()) == size(),
        what, " must hold one tensor per rank (", size(), "), got ", tensors.size());
    for (const at::Tensor& t : tensors) {
      tensor(t, what);
      sameDtype(t, like, what);
      require(t.numel() == like.numel(), what, " holds a tensor of ", t.numel(), " elements, expected ", like.numel());
    }
  }

  // One tensor per rank of the group, of any size, all of one dtype.
  void perRankAnyShape(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(
        static_cast<int>(tensors.size()) == size(),
        what, " must hold one tensor per rank (", size(), "), got ", tensors.size());
    many(tensors, what);
  }

  // For gather and scatter: on the root, one list with a tensor per rank like
  // `like`; on the other ranks, no list or one empty list. Returns the root's
  // list, empty elsewhere.
  std::vector<at::Tensor> rootList(
      std::vector<std::vector<at::Tensor>>& lists,
      int root,
      const at::Tensor& like,
      const char* what) const {
    if (group_.rank != root) {
      require(
          lists.empty() || (lists.size() == 1 && lists.front().empty()),
          what, " must be empty on ranks other than the root (", root, ")");
      return {};
    }
    std::vector<at::Tensor>& list = oneList(lists, what);
    perRank(list, like, what);
    return list;
  }

  // allgather_coalesced: one list per rank, each matching `inputs` tensor for tensor.
  void coalescedPerRank(
      const std::vector<std::vector<at::Tensor>>& lists,
      const std::vector<at::Tensor>& inputs,
      const char* what) const {
    require(
        static_cast<int>(lists.size()) == size(),
        what, " must hold one list per rank (", size(), "), got ", lists.size());
    for (const std::vector<at::Tensor>& list : lists) {
      require(
          list.size() == inputs.size(),
          what, " lists must hold one tensor per input (", inputs.size(), "), got ", list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        tensor(list[i], what);
        sameDtype(list[i], inputs[i], what);
        require(list[i].numel() == inputs[i].numel(), what, " tensor ", i, " has ", list[i].numel(), " elements, expected ", inputs[i].numel());
      }
    }
  }

  // `big` holds `factor` times the elements of `small`, same dtype.
  void scaled(
      const at::Tensor& big,
      const at::Tensor& small,
      int64_t factor,
      const char* what) const {
    tensor(big, what);
    sameDtype(big, small, what);
    require(
        big.numel() == small.numel() * factor,
        what, " must hold ", small.numel() * factor, " elements (",
        factor, " x ", small.numel(), "), got ", big.numel());
  }

  // `big` as scaled() on the root; ignored elsewhere.
  void scaledOnRoot(
      const at::Tensor& big,
      const at::Tensor& small,
      int root,
      const char* what) const {
    if (group_.rank == root) {
      scaled(big, small, size(), what);
    }
  }

  // The same for lists of tensors, pair by pair.
  void scaledPairs(
      const std::vector<at::Tensor>& bigs,
      const std::vector<at::Tensor>& smalls,
      int64_t factor,
      const char* what) const {
    require(bigs.size() == smalls.size(), what, " must hold ", smalls.size(), " tensors, got ", bigs.size());
    for (size_t i = 0; i < bigs.size(); ++i) {
      scaled(bigs[i], smalls[i], factor, what);
    }
  }

  void sameDtype(const at::Tensor& t, const at::Tensor& like, const char* what) const {
    require(
        t.scalar_type() == like.scalar_type(),
        what, " has dtype ", t.scalar_type(), " but the op's tensors are ", like.scalar_type());
    require(t.device() == like.device(), what, " is on ", t.device(), " but the op's tensors are on ", like.device());
  }

  // Split sizes of an all_to_all_single along dimension 0; even splits when
  // none are given.
  std::vector<int64_t> splits(
      const std::vector<int64_t>& sizes,
      const at::Tensor& t,
      const char* what) const {
    require(t.dim() > 0, what, ": all_to_all_single needs tensors with at least one dimension");
    const int64_t rows = t.size(0);
    if (sizes.empty()) {
      require(
          rows % size() == 0,
          what, " is empty, so dimension 0 (", rows, ") must split evenly across ", size(), " ranks");
      return std::vector<int64_t>(size(), rows / size());
    }
    require(
        static_cast<int>(sizes.size()) == size(),
        what, " must hold one size per rank (", size(), "), got ", sizes.size());
    int64_t total = 0;
    for (int64_t s : sizes) {
      require(s >= 0, what, " holds a negative size ", s);
      total += s;
    }
    require(total == rows, what, " sums to ", total, " but dimension 0 has ", rows, " rows");
    return sizes;
  }

  int root(int64_t rootRank, int64_t rootTensor = 0) const {
    require(rootRank >= 0 && rootRank < size(), "root rank ", rootRank, " is out of range for a group of ", size());
    require(rootTensor == 0, "root tensor must be 0, got ", rootTensor);
    return static_cast<int>(rootRank);
  }

  int peer(int rank, const char* what) const {
    require(rank >= 0 && rank < size(), what, " ", rank, " is out of range for a group of ", size());
    return rank;
  }

  Reduction reduction(const c10d::ReduceOp& reduceOp, const at::Tensor& t) const {
    Reduction op = Reduction::kSum;
    switch (reduceOp.op_) {
      case c10d::ReduceOp::SUM: op = Reduction::kSum; break;
      case c10d::ReduceOp::AVG: op = Reduction::kAvg; break;
      case c10d::ReduceOp::PRODUCT: op = Reduction::kProduct; break;
      case c10d::ReduceOp::MIN: op = Reduction::kMin; break;
      case c10d::ReduceOp::MAX: op = Reduction::kMax; break;
      case c10d::ReduceOp::BAND: op = Reduction::kBand; break;
      case c10d::ReduceOp::BOR: op = Reduction::kBor; break;
      case c10d::ReduceOp::BXOR: op = Reduction::kBxor; break;
      default:
        require(false, "reduce op ", static_cast<int>(reduceOp.op_), " (e.g. PREMUL_SUM) is not supported");
    }
    require(
        supportsReduction(op, t.scalar_type()),
        "reduce op ", reductionName(op), " is not supported for dtype ", t.scalar_type());
    return op;
  }

 private:
  template <typename... Args>
  void require(bool ok, const Args&... reason) const {
    TORCH_CHECK(ok, "Backend ", group_.backend, " (rank ", group_.rank, "): ", op_, ": ", reason...);
  }

  const Group& group_;
  const char* const op_;
};

} // namespace

#ifdef WITH_CUDA
// A CUDA event that orders streams (no timing). Only c10's CUDA headers and
// the CUDA runtime are needed, not ATen's (which want the CUDA math libraries).
class StreamEvent {
 public:
  explicit StreamEvent(c10::DeviceIndex device) {
    const c10::cuda::CUDAGuard onDevice(device);
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  ~StreamEvent() {
    cudaEventDestroy(event_);
  }

  // The event happens when `stream` reaches this point.
  void record(const c10::cuda::CUDAStream& stream) {
    C10_CUDA_CHECK(cudaEventRecord(event_, stream.stream()));
  }

  // Work queued on `stream` from now on waits for the event.
  void block(const c10::cuda::CUDAStream& stream) const {
    C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), event_, 0));
  }

 private:
  cudaEvent_t event_ = nullptr;
};
#endif

// How an op on CUDA tensors meets the streams around it. The op runs on the
// worker thread, on the backend's stream for the device, once the caller's
// stream has reached the call (`ready`); `done` marks its end on the backend's
// stream, and wait() makes the caller's stream wait for it. So results are
// ordered as with NCCL, and the caller's thread never blocks on the GPU.
struct CudaOp {
#ifdef WITH_CUDA
  CudaOp(c10::Device device, c10::Stream stream)
      : device(device),
        stream(c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream)),
        ready(device.index()),
        done(device.index()) {}

  c10::Device device;
  c10::cuda::CUDAStream stream;
  StreamEvent ready;
  StreamEvent done;
#endif
};

const char* reductionName(Reduction op) {
  switch (op) {
    case Reduction::kSum: return "SUM";
    case Reduction::kAvg: return "AVG";
    case Reduction::kProduct: return "PRODUCT";
    case Reduction::kMin: return "MIN";
    case Reduction::kMax: return "MAX";
    case Reduction::kBand: return "BAND";
    case Reduction::kBor: return "BOR";
    case Reduction::kBxor: return "BXOR";
  }
  return "UNKNOWN";
}

// ---------------------------------------------------------------------------
// Health

void Health::fail(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed_.load(std::memory_order_relaxed)) {
    failure_ = what;
    failed_.store(true, std::memory_order_release);
  }
}

std::exception_ptr Health::refuse(const std::string& who) const {
  if (!failed_.load(std::memory_order_acquire)) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return backendError(
      who + ": this process group can no longer be used since " + failure_ +
      "; destroy it and create a new one");
}

void OpContext::failGroup(const std::string& why) const {
  health.fail(why);
}

// ---------------------------------------------------------------------------
// Library

Library::Library(std::shared_ptr<Bootstrap> store, std::shared_ptr<Communicator> comm)
    : store_(std::move(store)), comm_(std::move(comm)) {}

void Library::abort() {
  if (!aborted_.exchange(true)) {
    try {
      ops::abort(*comm_);
    } catch (const std::exception& e) {
      TORCH_WARN("Backend allops: ops::abort failed: ", e.what());
    }
  }
}

void Library::finalize() {
  if (!finalized_.exchange(true)) {
    try {
      ops::finalize(*comm_);
    } catch (const std::exception& e) {
      TORCH_WARN("Backend allops: ops::finalize failed: ", e.what());
    }
  }
}

namespace {

// The group's c10d Store as ops::init sees it: every key under "bootstrap/"
// (torch.distributed already scopes the store to the group), waits bounded
// by the group's timeout.
class StoreBootstrap : public Bootstrap {
 public:
  StoreBootstrap(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {
    TORCH_CHECK(store_, "Backend allops: torch.distributed passed no store");
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_->set(scoped(key), value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    store_->wait({scoped(key)}, timeout_);
    return store_->get(scoped(key));
  }
  bool check(const std::vector<std::string>& keys) override {
    return store_->check(scoped(keys));
  }
  void wait(const std::vector<std::string>& keys) override {
    store_->wait(scoped(keys), timeout_);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return store_->add(scoped(key), delta);
  }
  void deleteKey(const std::string& key) override {
    store_->deleteKey(scoped(key));
  }
  c10::intrusive_ptr<c10d::Store> c10dStore() override {
    return store_;
  }

 private:
  static std::string scoped(const std::string& key) {
    return "bootstrap/" + key;
  }
  static std::vector<std::string> scoped(const std::vector<std::string>& keys) {
    std::vector<std::string> result;
    result.reserve(keys.size());
    for (const std::string& key : keys) {
      result.push_back(scoped(key));
    }
    return result;
  }

  const c10::intrusive_ptr<c10d::Store> store_;
  const std::chrono::milliseconds timeout_;
};

// Parses an environment variable's `text` into a field of Options.
template <typename T>
T parseOption(const std::string& variable, const std::string& text) {
  const auto fail = [&](const char* type) {
    TORCH_CHECK(
        false, "Backend allops: environment variable ", variable, "=\"", text,
        "\" is not ", type);
  };
  if constexpr (std::is_same_v<T, bool>) {
    for (const char* yes : {"1", "true", "yes", "on", "TRUE", "True", "YES", "ON"}) {
      if (text == yes) {
        return true;
      }
    }
    for (const char* no : {"0", "false", "no", "off", "FALSE", "False", "NO", "OFF", ""}) {
      if (text == no) {
        return false;
      }
    }
    fail("a boolean (1, 0, true, false, yes, no, on, off)");
  } else if constexpr (std::is_integral_v<T>) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(text, &used, 0);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      fail("an integer");
    }
    return static_cast<T>(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      fail("a number");
    }
    return static_cast<T>(value);
  } else {
    static_assert(std::is_same_v<T, std::string>, "Options fields are bool, integers, floating point or std::string");
    return text;
  }
  return T{};
}

} // namespace

Options optionsFromEnvironment() {
  Options options;
  describeOptions([&options](const char* name, auto member, const char* /* doc */) {
    std::string variable = "ALLOPS_";
    for (const char* c = name; *c != '\0'; ++c) {
      variable += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    }
    if (const char* text = std::getenv(variable.c_str())) {
      using Field = std::decay_t<decltype(options.*member)>;
      options.*member = parseOption<Field>(variable, text);
    }
  });
  return options;
}

// ---------------------------------------------------------------------------
// WorkQueue

struct WorkQueue::State {
  void loop();
  void spinForWork();
  void adaptSpin(Clock::duration gap);
  // Whether the next queued op may start: not while a collective is in flight,
  // since a later op may use its tensors (a group's collectives run one at a
  // time, in order, as with gloo and ProcessGroupMPI). Sends and receives in
  // flight do not hold anything up.
  bool mayStartNext() const;
  // Polls the ops in flight until none is left, or another op is queued and
  // may start.
  void progress();
  // Sleeps up to `pause`, or until push() or stop() wakes the worker.
  void pause(Clock::duration pause);
  // Polls each op in flight once; forgets those that completed.
  void pollInFlight();
  // A caller stopped polling an op in flight (Work::wait): wakes the worker
  // from pause() or a doze when the op is `unfinished`, or when ops queued
  // behind it wait to start.
  void callerLeft(bool unfinished);

  std::mutex mutex;
  std::condition_variable wake;    // for the worker: work was queued, or stop
  std::condition_variable exited;  // for stop(): the worker left its loop
  std::deque<c10::intrusive_ptr<WorkAllops>> queue;
  std::atomic<size_t> queued{0};  // queue.size(), readable without the lock
  std::atomic<bool> stopping{false};  // set under the mutex; read by the worker without it
  bool running = false;  // the thread is in loop()
  bool sleeping = false;  // until push() wakes it
  bool dozing = false;    // for kDozeTick
  Clock::time_point pushedAt;
  bool spinForNext = false;  // the worker ran the last op's body: ops come through the queue
  Clock::time_point sleptAt;
  std::atomic<int64_t> spinNs{50'000};  // how long the worker spins for work
  std::thread thread;
  // Ops whose bodies returned before they completed (OpContext::completeLater);
  // only the worker thread touches it.
  std::vector<c10::intrusive_ptr<WorkAllops>> inFlight;
  bool pausing = false;  // in pause(): push() wakes the worker
  bool nudged = false;   // callerLeft() ends the pause
  size_t toRun = 0;      // queued ops whose bodies have not run
  std::atomic<bool> busy{false};  // the worker is running an op's body
  // Collectives issued to this queue that have not completed: while one is
  // queued or in flight, no op starts on the caller's thread (idle()).
  std::atomic<int> unfinishedCollectives{0};
  Clock::duration lately = kMinPollSpin;  // how long ops in flight took lately (worker only)
};

namespace {

// Fails `work`, an op that may have started on the caller's thread, then
// polls it until it gives up (MPI cancels what it can), so that it is not
// left with requests pending; for an op not in flight the first poll says so.
void failStarted(WorkAllops& work, std::exception_ptr error) {
  work.finish(std::move(error));
  for (int polls = 0; !work.tryPoll() && polls < 1000; ++polls) {
    std::this_thread::yield();
  }
}

} // namespace

WorkQueue::WorkQueue() : state_(std::make_shared<State>()) {}

WorkQueue::~WorkQueue() {
  stop(kStopGrace);
}

void WorkQueue::push(const c10::intrusive_ptr<WorkAllops>& work) {
  State& s = *state_;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.stopping) {
      if (!s.running) {
        s.running = true;
        // The thread keeps the state alive, whatever becomes of this WorkQueue.
        s.thread = std::thread([state = state_] { state->loop(); });
      }
      s.queue.push_back(work);
      s.queued.fetch_add(1, std::memory_order_release);
      // An op that started on the caller's thread (kBodiesOnlyStart) needs
      // polling, not starting, and its caller usually polls it: unless the
      // worker sleeps for good, it looks at the op soon enough (kDozeTick).
      const bool startedHere = kBodiesOnlyStart && work->ran();
      if (startedHere) {
        s.pushedAt = Clock::now();
      } else if (!work->ran()) {
        ++s.toRun;
      }
      const bool wake = s.sleeping || (!startedHere && (s.pausing || s.dozing));
      if (s.sleeping) {
        s.adaptSpin(Clock::now() - s.sleptAt);
      }
      lock.unlock();
      if (wake) {
        s.wake.notify_one();
      }
      return;
    }
  }
  failStarted(*work, backendError(work->describe() + ": the process group was already destroyed"));
}

bool WorkQueue::idle() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  return !s.stopping && s.toRun == 0 && !s.busy.load() && s.unfinishedCollectives.load() == 0;
}

void WorkQueue::issue(WorkAllops& work) {
  work.queue_ = state_;
  if (work.isCollective()) {
    work.countedCollective_ = true;
    state_->unfinishedCollectives.fetch_add(1);
  }
}

void WorkQueue::State::callerLeft(bool unfinished) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    // The worker takes over the op, or starts what was queued behind it.
    if (!unfinished && !(pausing && toRun > 0)) {
      return;
    }
    nudged = true;
  }
  wake.notify_one();
}

bool WorkQueue::stop(std::chrono::milliseconds grace) {
  State& s = *state_;
  std::deque<c10::intrusive_ptr<WorkAllops>> cancelled;
  std::thread thread;  // only the first stop() gets it
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    cancelled.swap(s.queue);
    s.queued.store(0, std::memory_order_release);
    s.toRun = 0;
    thread = std::move(s.thread);
  }
  s.wake.notify_one();
  for (auto& work : cancelled) {
    if (work->ran()) {  // started on the caller's thread: in flight, or done
      failStarted(*work, backendError(work->describe() + ": aborted, the process group was destroyed"));
      continue;
    }
    work->finish(backendError(work->describe() + ": cancelled, the process group was destroyed before it ran"));
  }
  if (!thread.joinable()) {
    // Never started, or an earlier stop() has it: whether it still runs an
    // op is that stop()'s to say.
    std::lock_guard<std::mutex> lock(s.mutex);
    return !s.running;
  }
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();  // stopped from its own op's callback: it leaves the loop on return
    return true;
  }
  bool exited = false;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    exited = s.exited.wait_for(lock, grace, [&s] { return !s.running; });
  }
  if (exited) {
    thread.join();
  } else {
    thread.detach();
    TORCH_WARN(
        "Backend allops: an op body did not return within ", grace.count(),
        " ms of the process group's destruction; its thread is left running");
  }
  return exited;
}

void WorkQueue::State::spinForWork() {
  spinUntil(
      [this] { return queued.load(std::memory_order_acquire) > 0; },
      std::chrono::nanoseconds(spinNs.load(std::memory_order_relaxed)));
}

void WorkQueue::State::adaptSpin(Clock::duration gap) {
  // The worker fell asleep `gap` before this op came. If a spin that long
  // would have caught it, spin twice that from now on (ops come in bursts);
  // if ops come further apart than spinning is worth, spin half as long.
  const int64_t spin = spinNs.load(std::memory_order_relaxed);
  const int64_t gapNs = std::chrono::duration_cast<std::chrono::nanoseconds>(gap).count();
  const int64_t maxNs = std::chrono::nanoseconds(kMaxWorkerSpin).count();
  spinNs.store(
      gapNs < maxNs ? std::min(maxNs, std::max(spin, 2 * gapNs)) : spin / 2,
      std::memory_order_relaxed);
}

void WorkQueue::State::loop() {
  for (;;) {
    pollInFlight();
    if (queued.load(std::memory_order_acquire) == 0 || !mayStartNext()) {
      if (inFlight.empty()) {
        if (spinForNext) {
          spinForWork();
        }
      } else {
        progress();
      }
    }
    c10::intrusive_ptr<WorkAllops> work;
    {
      std::unique_lock<std::mutex> lock(mutex);
      while (queue.empty() && !stopping && inFlight.empty()) {
        const auto now = Clock::now();
        if (now - pushedAt < kDozeFor) {
          dozing = true;
          wake.wait_for(lock, kDozeTick);
          dozing = false;
          continue;
        }
        sleeping = true;
        sleptAt = now;
        wake.wait(lock);
        sleeping = false;
      }
      if (queue.empty()) {
        if (!inFlight.empty()) {
          continue;  // ops in flight fail at once when the group was destroyed
        }
        running = false;
        exited.notify_all();
        return;  // stopping, and stop() failed whatever was queued
      }
      work = std::move(queue.front());
      queue.pop_front();
      queued.fetch_sub(1, std::memory_order_release);
      spinForNext = !work->ran();
      if (spinForNext) {
        --toRun;
        busy.store(true);
      }
    }
    if (!work->ran()) {  // an op started on the caller's thread is in flight already
      work->run();
      busy.store(false);
      work->notifyInFlight();
    }
    if (work->inFlight()) {
      inFlight.push_back(std::move(work));
    }
  }
}

void WorkQueue::State::pollInFlight() {
  inFlight.erase(
      std::remove_if(
          inFlight.begin(),
          inFlight.end(),
          [this](const c10::intrusive_ptr<WorkAllops>& work) {
            return !work->inFlight() || ((!work->awaited() || stopping.load()) && work->tryPoll());
          }),
      inFlight.end());
}

void WorkQueue::State::progress() {
  const auto start = Clock::now();
  const auto spinUntil = start + std::clamp<Clock::duration>(2 * lately, kMinPollSpin, kMaxPollSpin);
  Clock::duration nextPause = kFirstPollPause;
  bool spinning = true;
  const auto waiting = [this] {
    return !inFlight.empty() && (queued.load(std::memory_order_acquire) == 0 || !mayStartNext());
  };
  for (int polls = 0; waiting(); ++polls) {
    if (spinning && (polls & 7) == 0) {
      spinning = Clock::now() < spinUntil;
    }
    // Callers waiting for every op in flight poll them themselves: the
    // worker steps aside, and takes over if they leave (callerLeft).
    const bool aside = !stopping.load() &&
        std::all_of(inFlight.begin(), inFlight.end(), [](const auto& work) { return work->awaited(); });
    if (aside) {
      pause(kAsidePause);
    } else if (polls < 16) {
      cpuRelax();
    } else if (spinning) {
      // Slow yields do not stop it, as they stop spinUntil(): nothing but
      // polling completes these ops, and nothing would wake a sleeping poller
      // when they do (stopping cost 10x at 1 MiB, 4 ranks on 2 cores).
      std::this_thread::yield();
    } else {
      pause(nextPause);
      nextPause = std::min<Clock::duration>(2 * nextPause, kMaxPollPause);
    }
    pollInFlight();
  }
  if (inFlight.empty()) {  // not interrupted by a new op: how long these took
    lately = (lately + (Clock::now() - start)) / 2;
  }
}

bool WorkQueue::State::mayStartNext() const {
  // An op completed by its caller (tryPoll) is no longer in flight, though
  // the worker has not forgotten it yet.
  return std::none_of(
      inFlight.begin(), inFlight.end(), [](const auto& work) { return work->isCollective() && work->inFlight(); });
}

void WorkQueue::State::pause(Clock::duration pause) {
  std::unique_lock<std::mutex> lock(mutex);
  pausing = true;
  wake.wait_for(lock, pause, [this] { return (!queue.empty() && mayStartNext()) || stopping || nudged; });
  pausing = false;
  nudged = false;
}

// ---------------------------------------------------------------------------
// WorkAllops

WorkAllops::WorkAllops(
    std::shared_ptr<Group> group,
    std::shared_ptr<Health> health,
    std::shared_ptr<Library> library,
    c10d::OpType type,
    const char* op,
    const char* profilingTitle,
    std::chrono::milliseconds timeout,
    c10::IValue outputs,
    Body body,
    std::shared_ptr<CudaOp> cuda)
    : c10d::Work(group->rank, type, profilingTitle),
      group_(std::move(group)),
      health_(std::move(health)),
      library_(std::move(library)),
      op_(op),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      outputs_(std::move(outputs)),
      body_(std::move(body)),
      cuda_(std::move(cuda)) {
#ifdef WITH_CUDA
  if (cuda_) {  // The future then orders its callbacks after the op's stream.
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        outputs_.type(), std::vector<c10::Device>{cuda_->device});
    return;
  }
#endif
  future_ = c10::make_intrusive<c10::ivalue::Future>(outputs_.type());
}

bool WorkAllops::isCollective() const {
  return !c10d::isP2POp(opType_);
}

std::string WorkAllops::describe() const {
  std::ostringstream out;
  out << "Backend " << group_->backend << " (rank " << group_->rank << "): " << op_
      << " #" << seq_;
  return out.str();
}

std::exception_ptr WorkAllops::refusal() const {
  if (group_->aborted.load()) {
    return backendError(describe() + ": cancelled, the process group was destroyed before it ran");
  }
  if (health_->failed()) {
    return health_->refuse(describe());
  }
  if (Clock::now() > deadline_) {
    return backendError(
        describe() + ": could not start within its " + std::to_string(timeout_.count()) +
        " ms timeout (the ops queued before it took that long)");
  }
  return nullptr;
}

void WorkAllops::run() {
#ifdef WITH_CUDA
  std::optional<c10::cuda::CUDAStreamGuard> onStream;
  if (cuda_) {
    onStream.emplace(cuda_->stream);  // and stays there until finish() below
  }
#endif
  ran_.store(true, std::memory_order_release);
  started_ = Clock::now();
  std::exception_ptr error = refusal();
  if (!error) {
    try {
#ifdef WITH_CUDA
      if (cuda_) {
        cuda_->ready.block(cuda_->stream);
      }
#endif
      const OpContext ctx{
          *group_, library_->comm(), op_, seq_, collective_, deadline_, timeout_,
          cancelled_, &later_, &sourceRank_, *health_};
      const Running running(library_->running);
      body_(ctx, *this);
#ifdef WITH_CUDA
      if (cuda_ && !later_) {
        cuda_->done.record(cuda_->stream);
      }
#endif
    } catch (...) {
      error = backendError(describe() + " failed: " + errorMessage(std::current_exception()));
      later_ = nullptr;
    }
  }
  body_ = nullptr;  // Drop the tensors the body captured.
  if (later_) {
    // The WorkQueue polls it until it completes, and so does a caller
    // waiting for it (tryPoll).
    inFlight_.store(true, std::memory_order_release);
    return;
  }
  finish(error);    // For a CUDA op, on its stream: the future records it.
}

bool WorkAllops::tryPoll() {
  if (!inFlight_.load(std::memory_order_acquire)) {
    return true;
  }
  if (polling_.exchange(true, std::memory_order_acquire)) {
    return false;  // another thread polls it now
  }
  if (!inFlight_.load(std::memory_order_relaxed)) {  // it completed meanwhile
    polling_.store(false, std::memory_order_release);
    return true;
  }
  std::exception_ptr error;
  bool completed = false;
  {
#ifdef WITH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> onStream;
    if (cuda_) {
      onStream.emplace(cuda_->stream);  // staged results are copied back on the op's stream
    }
#endif
    try {
      completed = later_();
#ifdef WITH_CUDA
      if (completed && cuda_) {
        cuda_->done.record(cuda_->stream);
      }
#endif
    } catch (...) {
      error = backendError(describe() + " failed: " + errorMessage(std::current_exception()));
      completed = true;
    }
    if (completed) {
      later_ = nullptr;
      inFlight_.store(false, std::memory_order_release);
    }
  }
  polling_.store(false, std::memory_order_release);
  if (completed) {
    // Outside polling_: the future's callbacks may destroy the process group,
    // whose worker then forgets this op (inFlight() is false) and exits.
    finish(error);
  }
  return completed;
}

void WorkAllops::notifyInFlight() {
  if (kBodiesOnlyStart && inFlight()) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a waiter is asleep, or sees inFlight_
    cv_.notify_all();
  }
}

void WorkAllops::finish(std::exception_ptr error) {
  if (finishing_.exchange(true)) {
    if (!error && (opType_ == c10d::OpType::RECV || opType_ == c10d::OpType::RECVANYSOURCE)) {
      // It took its message after it had failed: the next receive from that
      // rank would take the message after it.
      health_->fail(std::string(op_) + " #" + std::to_string(seq_) + " took its message after it had failed");
    }
    return;
  }
  if (error && isCollective()) {
    // The ranks no longer agree on which collective comes next.
    std::string what = errorMessage(error);
    const std::string prefix = "Backend " + group_->backend + " (rank " + std::to_string(group_->rank) + "): ";
    if (what.rfind(prefix, 0) == 0) {
      what.erase(0, prefix.size());
    }
    health_->fail(what);
    library_->abort();  // as NCCL does: bodies stuck in the library return
  }
  if (error) {
    cancelled_.store(true);
    future_->setError(error);
  } else {
    future_->markCompleted(outputs_);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    completed_ = true;
    done_.store(true, std::memory_order_release);
    if (countedCollective_) {
      queue_->unfinishedCollectives.fetch_sub(1);
    }
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();  // the op's end in torch.profiler
      recordFunctionEndCallback_ = nullptr;
    }
  }
  cv_.notify_all();
}

bool WorkAllops::isCompleted() {
  return done_.load(std::memory_order_acquire);
}

bool WorkAllops::isSuccess() const {
  return done_.load(std::memory_order_acquire) && !error_;
}

std::exception_ptr WorkAllops::exception() const {
  return done_.load(std::memory_order_acquire) ? error_ : nullptr;
}

int WorkAllops::sourceRank() const {
  TORCH_CHECK(
      sourceRank_ >= 0,
      describe(), ": sourceRank() is only known for a completed recv from any source");
  return sourceRank_;
}

void WorkAllops::setSourceRank(int rank) {
  sourceRank_ = rank;
}

std::vector<at::Tensor> WorkAllops::result() {
  std::vector<at::Tensor> tensors;
  collectTensors(outputs_, tensors);
  return tensors;
}

bool WorkAllops::await(Clock::time_point until) {
  waiters_.fetch_add(1);
  const auto leave = [this] {
    waiters_.fetch_sub(1);
    if (kBodiesOnlyStart && queue_) {
      queue_->callerLeft(inFlight());
    }
    return done();
  };
  // Queued, or its body runs on the worker: waits until it completes, or
  // (kBodiesOnlyStart) goes in flight (notifyInFlight) and this thread polls it.
  const auto doneOrInFlight = [this] { return done() || (kBodiesOnlyStart && inFlight()); };
  if (!spinUntil(doneOrInFlight, kWaitSpin)) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, until, doneOrInFlight);
  }
  if (!kBodiesOnlyStart || !inFlight()) {  // done, being finished by the thread that saw it complete, or out of time
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, until, [this] { return done(); });
    return leave();
  }
  const auto lately = std::chrono::nanoseconds(library_->inFlightNs.load(std::memory_order_relaxed));
  const auto spinEnd = Clock::now() + std::clamp<Clock::duration>(kDriveFactor * lately, kMinDriveSpin, kMaxDriveSpin);
  Clock::duration nextPause = kFirstPollPause;
  for (int polls = 0; !tryPoll() && !done(); ++polls) {
    const auto now = Clock::now();
    if (now >= until) {
      return leave();
    }
    if (polls < 16) {
      cpuRelax();
    } else if (now < spinEnd) {
      std::this_thread::yield();  // slow or not: only polling moves the op (see progress())
    } else {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::min<Clock::duration>(nextPause, until - now), [this] { return done(); });
      nextPause = std::min<Clock::duration>(2 * nextPause, kMaxPollPause);
    }
  }
  // An op that waited for a late peer counts as no longer than the spin it
  // was given, so that one late peer does not make later waits spin long.
  const int64_t took = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::min(Clock::now(), spinEnd) - started_).count();
  library_->inFlightNs.store(
      (library_->inFlightNs.load(std::memory_order_relaxed) + took) / 2, std::memory_order_relaxed);
  {
    // Complete: finished by this thread, or being finished by the one that saw it complete.
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done(); });
  }
  return leave();
}

bool WorkAllops::wait(std::chrono::milliseconds timeout) {
  if (!done()) {
    const bool useOwn = timeout <= kNoTimeout;  // 0 (no timeout given) or unset
    // At its own deadline the op's body fails too, saying more (which peers
    // are missing): give it a moment to.
    const auto until = useOwn ? deadline_ + kReportGrace : Clock::now() + timeout;
    if (!await(until)) {
      const auto limit = useOwn ? timeout_ : timeout;
      const std::exception_ptr error = backendError(
          describe() + " did not complete within " + (useOwn ? "its " : "the ") +
          std::to_string(limit.count()) + " ms timeout (a peer may have failed, or not called " +
          op_ + ")");
      if (!useOwn) {
        std::rethrow_exception(error);
      }
      // The op's own timeout passed: it has failed, unless it completed just
      // now, in which case whoever finished it first wins.
      finish(error);
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return done(); });
    }
  }
  if (error_) {
    std::rethrow_exception(error_);
  }
  synchronize();
  return true;
}

void WorkAllops::abort() {
  finish(backendError(describe() + ": aborted"));
}

void WorkAllops::synchronize() {
#ifdef WITH_CUDA
  if (cuda_ && done_.load(std::memory_order_acquire) && !error_) {
    cuda_->done.block(c10::cuda::getCurrentCUDAStream(cuda_->device.index()));
  }
#endif
}

c10::intrusive_ptr<c10::ivalue::Future> WorkAllops::getFuture() {
  return future_;
}

uint64_t WorkAllops::getSequencenumber() const {
  return seq_;
}

#if ALLOPS_TORCH_2_14
std::chrono::milliseconds WorkAllops::getTimeout() const {
  return timeout_;
}
#endif

// ---------------------------------------------------------------------------
// BackendAllops

namespace {

// The default group's communicator, the parent of the groups created after
// it (ops::split). Guarded by worldMutex.
std::mutex worldMutex;
std::weak_ptr<Library> world;

std::shared_ptr<Group> makeGroup(int rank, int size, const std::string& id, std::vector<int64_t> globalRanks) {
  auto group = std::make_shared<Group>();
  group->backend = "allops";
  group->rank = rank;
  group->size = size;
  group->id = id;
  group->globalRanks = std::move(globalRanks);
  if (group->globalRanks.empty()) {  // the default group: global ranks are group ranks
    for (int r = 0; r < size; ++r) {
      group->globalRanks.push_back(r);
    }
  }
  return group;
}

// The group's communicator: ops::split from `parent` when there is one and it
// gives one, else ops::init. Runs on the caller's thread.
std::shared_ptr<Library> makeLibrary(
    const Group& group,
    const c10::intrusive_ptr<c10d::Store>& store,
    std::chrono::milliseconds timeout,
    const Options& options,
    bool isWorld,
    const std::shared_ptr<Library>& parent) {
  auto bootstrap = std::make_shared<StoreBootstrap>(store, timeout);
  const GroupInfo info{
      group.backend, group.rank, group.size, group.globalRanks, group.id, timeout, options,
      *bootstrap, isWorld};
  std::shared_ptr<Communicator> comm;
  try {
    if (parent) {
      comm = ops::split(parent->comm(), info);
    }
    if (!comm) {
      comm = ops::init(info);
    }
  } catch (const std::exception& e) {
    C10_THROW_ERROR(
        DistBackendError,
        "Backend allops (rank " + std::to_string(group.rank) + "): creating the communicator of group " +
            group.id + " failed: " + (dynamic_cast<const c10::Error*>(&e)
                                          ? dynamic_cast<const c10::Error*>(&e)->what_without_backtrace()
                                          : e.what()));
  }
  TORCH_CHECK(comm, "Backend allops: ops::", parent ? "split" : "init", " returned no communicator");
  return std::make_shared<Library>(std::move(bootstrap), std::move(comm));
}

} // namespace

BackendAllops::BackendAllops(
    std::shared_ptr<Group> group,
    std::shared_ptr<Library> library,
    allops_collectives::Options options,
    std::chrono::milliseconds timeout)
    : c10d::Backend(group->rank, group->size),
      group_(std::move(group)),
      library_(std::move(library)),
      options_(std::move(options)),
      timeoutMs_(timeout.count()) {}

BackendAllops::~BackendAllops() {
  shutdown();
}

c10::intrusive_ptr<c10d::Backend> BackendAllops::create(
    const c10d::DistributedBackendOptions& options,
    const allops_collectives::Options& userOptions) {
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
  const bool isWorld = options.global_ranks_in_group.empty();
  auto group = makeGroup(options.group_rank, options.group_size, options.group_id, options.global_ranks_in_group);
  std::shared_ptr<Library> parent;
  if (!isWorld) {
    std::lock_guard<std::mutex> lock(worldMutex);
    parent = world.lock();
    if (parent && parent->aborted()) {
      parent = nullptr;
    }
  }
  auto library = makeLibrary(*group, options.store, timeout, userOptions, isWorld, parent);
  if (isWorld) {
    std::lock_guard<std::mutex> lock(worldMutex);
    world = library;
  }
  return c10::make_intrusive<BackendAllops>(std::move(group), std::move(library), userOptions, timeout);
}

c10::intrusive_ptr<c10d::Backend> BackendAllops::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const auto it = std::find(ranks.begin(), ranks.end(), group_->rank);
  if (it == ranks.end()) {
    return nullptr;  // this rank is not in the new group
  }
  const std::string name = opts ? opts->group_name : "";
  std::lock_guard<std::mutex> lock(splitMutex_);
  if (lastSplit_ && store.get() == lastSplitStore_ && name == lastSplitName_) {
    if (auto child = lastSplit_->lock()) {
      return child;  // the same split, asked again for another device type
    }
  }
  std::vector<int64_t> globalRanks;
  for (int r : ranks) {
    globalRanks.push_back(group_->globalRanks.at(r));
  }
  const auto timeout = opts ? opts->timeout : std::chrono::milliseconds(timeoutMs_.load());
  auto group = makeGroup(
      static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()), name, std::move(globalRanks));
  auto library = makeLibrary(*group, store, timeout, options_, false, library_);
  c10::intrusive_ptr<c10d::Backend> child =
      c10::make_intrusive<BackendAllops>(std::move(group), std::move(library), options_, timeout);
  lastSplitStore_ = store.get();
  lastSplitName_ = name;
  lastSplit_.emplace(child);
  return child;
}

c10::intrusive_ptr<c10d::Backend::Options> BackendAllops::getBackendOptions() {
  auto opts = c10::make_intrusive<c10d::Backend::Options>(
      "allops", std::chrono::milliseconds(timeoutMs_.load()));
  opts->group_name = group_->id;
  opts->global_ranks_in_group.assign(group_->globalRanks.begin(), group_->globalRanks.end());
  return opts;
}

const std::string BackendAllops::getBackendName() const {
  return "allops";
}

void BackendAllops::shutdown() {
  group_->aborted.store(true);  // running bodies see it in OpContext::expired()
  if (library_->running.load() > 0) {
    library_->abort();  // a body is still running: make it return
  }
  const bool ops = queue_.stop(kStopGrace);
  const bool receives = receives_.stop(kStopGrace);
  if (ops && receives && library_->running.load() == 0) {
    library_->finalize();  // no op body can use the communicator any more
  }
}

void BackendAllops::abort() {
  group_->aborted.store(true);
  library_->abort();
  shutdown();
}

void BackendAllops::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_.store(timeout.count());
}

void BackendAllops::setSequenceNumberForGroup() {
  // Every rank's count starts at 0 when the group is created: nothing to agree on.
}

uint64_t BackendAllops::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(issueMutex_);
  return collectives_;
}

c10::intrusive_ptr<c10d::Work> BackendAllops::enqueue(
    WorkQueue* queue,
    c10d::OpType type,
    const char* op,
    const char* profilingTitle,
    std::chrono::milliseconds timeout,
    c10::IValue outputs,
    const c10::IValue& inputs,
    WorkAllops::Body body) {
  if (timeout == c10d::kUnsetTimeout) {
    timeout = std::chrono::milliseconds(timeoutMs_.load());
  }
  std::shared_ptr<CudaOp> cuda = cudaOp(outputs, inputs);
  auto work = c10::make_intrusive<WorkAllops>(
      group_, health_, library_, type, op, profilingTitle, timeout, std::move(outputs),
      std::move(body), std::move(cuda));
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    work->seq_ = ops_++;
    if (work->isCollective()) {
      work->collective_ = collectives_++;
    }
    const bool runsNow = queue != nullptr && kBodiesOnlyStart && !work->cuda_ && queue->idle();
    (queue != nullptr ? queue : &queue_)->issue(*work);
    if (queue != nullptr) {
      // A body that only starts the op runs here when the worker would run it
      // right away: no hand-off to the worker, which only polls the op in
      // flight (and not even that while the caller waits for it). Nobody
      // holds the op's future yet, so finishing it here (a refused op, a
      // body that threw) runs no callback under the issue lock.
      if (!runsNow) {
        queue->push(work);
        return work;
      }
      work->run();
      if (work->inFlight()) {
        queue->push(work);
      }
      return work;
    }
  }
  work->run();  // on the caller's thread
  if (work->inFlight()) {
    queue_.push(work);  // the worker completes it
  }
  return work;
}

std::shared_ptr<CudaOp> BackendAllops::cudaOp(
    const c10::IValue& outputs,
    const c10::IValue& inputs) {
#ifdef WITH_CUDA
  std::vector<at::Tensor> tensors;
  collectTensors(outputs, tensors);
  collectTensors(inputs, tensors);
  if (tensors.empty() || !tensors.front().is_cuda()) {
    return nullptr;
  }
  const c10::Device device = tensors.front().device();
  c10::Stream stream = [&] {
    std::lock_guard<std::mutex> lock(streamsMutex_);
    auto it = streams_.find(device.index());
    if (it == streams_.end()) {
      it = streams_.emplace(device.index(), c10::cuda::getStreamFromPool(false, device.index())).first;
    }
    return it->second;
  }();
  auto cuda = std::make_shared<CudaOp>(device, stream);
  // The op starts when the caller's stream reaches this point.
  cuda->ready.record(c10::cuda::getCurrentCUDAStream(device.index()));
  // The caching allocator must not hand these tensors' memory to anyone else
  // before the backend's stream is done with them.
  for (const at::Tensor& t : tensors) {
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), cuda->stream);
  }
  return cuda;
#else
  (void)outputs;
  (void)inputs;
  return nullptr;
#endif
}


// Copies the root's tensor into the tensor of every rank.
c10::intrusive_ptr<c10d::Work> BackendAllops::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  const Check check(*group_, __func__);
  at::Tensor& tensor = check.one(tensors, "tensors");
  const int root = check.root(opts.rootRank, opts.rootTensor);
  return enqueue(
      &queue_,
      c10d::OpType::BROADCAST,
      __func__,
      "allops:broadcast",
      opts.timeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::broadcast(ctx, tensor, root);
      });
}

// Reduces the tensor of every rank; every rank gets the result.
c10::intrusive_ptr<c10d::Work> BackendAllops::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  const Check check(*group_, __func__);
  at::Tensor& tensor = check.one(tensors, "tensors");
  const Reduction op = check.reduction(opts.reduceOp, tensor);
  return enqueue(
      &queue_,
      c10d::OpType::ALLREDUCE,
      __func__,
      "allops:allreduce",
      opts.timeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::allreduce(ctx, tensor, op);
      });
}

// All-reduces several tensors as one operation.
c10::intrusive_ptr<c10d::Work> BackendAllops::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  const Check check(*group_, __func__);
  check.many(tensors, "tensors");
  const Reduction op = check.reduction(opts.reduceOp, tensors.front());
  return enqueue(
      &queue_,
      c10d::OpType::ALLREDUCE_COALESCED,
      __func__,
      "allops:allreduce_coalesced",
      opts.timeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::allreduce_coalesced(ctx, tensors, op);
      });
}

// Reduces the tensor of every rank into the root's tensor.
c10::intrusive_ptr<c10d::Work> BackendAllops::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  const Check check(*group_, __func__);
  at::Tensor& tensor = check.one(tensors, "tensors");
  const int root = check.root(opts.rootRank, opts.rootTensor);
  const Reduction op = check.reduction(opts.reduceOp, tensor);
  return enqueue(
      &queue_,
      c10d::OpType::REDUCE,
      __func__,
      "allops:reduce",
      opts.timeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::reduce(ctx, tensor, op, root);
      });
}

// Gathers the tensor of every rank into a list on every rank.
c10::intrusive_ptr<c10d::Work> BackendAllops::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const Check check(*group_, __func__);
  const at::Tensor& input = check.one(inputTensors, "inputTensors");
  std::vector<at::Tensor>& outputs = check.oneList(outputTensors, "outputTensors");
  check.perRank(outputs, input, "outputTensors[0]");
  return enqueue(
      &queue_,
      c10d::OpType::ALLGATHER,
      __func__,
      "allops:allgather",
      opts.timeout,
      outputTensors,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::allgather(ctx, outputs, input);
      });
}

// Gathers the tensor of every rank into one flat tensor on every rank.
#if ALLOPS_TORCH_2_14
c10::intrusive_ptr<c10d::Work> BackendAllops::all_gather_single(
#else
c10::intrusive_ptr<c10d::Work> BackendAllops::_allgather_base(
#endif
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  const Check check(*group_, __func__);
  check.tensor(inputBuffer, "inputBuffer");
  check.scaled(outputBuffer, inputBuffer, check.size(), "outputBuffer");
  return enqueue(
      &queue_,
      c10d::OpType::_ALLGATHER_BASE,
      __func__,
      "allops:_allgather_base",
      opts.timeout,
      std::vector<at::Tensor>{outputBuffer},
      std::vector<at::Tensor>{inputBuffer},
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::_allgather_base(ctx, outputBuffer, inputBuffer);
      });
}

// All-gathers several tensors as one operation.
c10::intrusive_ptr<c10d::Work> BackendAllops::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const Check check(*group_, __func__);
  check.many(inputTensors, "inputTensors");
  check.coalescedPerRank(outputTensorLists, inputTensors, "outputTensorLists");
  return enqueue(
      &queue_,
      c10d::OpType::ALLGATHER_COALESCED,
      __func__,
      "allops:allgather_coalesced",
      opts.timeout,
      outputTensorLists,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::allgather_coalesced(ctx, outputTensorLists, inputTensors);
      });
}

// Runs several flat all-gathers as one operation.
#if ALLOPS_TORCH_2_14
c10::intrusive_ptr<c10d::Work> BackendAllops::all_gather_single_coalesced(
#else
c10::intrusive_ptr<c10d::Work> BackendAllops::allgather_into_tensor_coalesced(
#endif
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const Check check(*group_, __func__);
  check.many(inputs, "inputs");
  check.scaledPairs(outputs, inputs, check.size(), "outputs");
  return enqueue(
      &queue_,
#if ALLOPS_TORCH_2_14
      c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
#else
      c10d::OpType::COALESCED,
#endif
      __func__,
      "allops:allgather_into_tensor_coalesced",
      opts.timeout,
      outputs,
      inputs,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::allgather_into_tensor_coalesced(ctx, outputs, inputs);
      });
}

// Gathers the tensor of every rank into a list on the root.
c10::intrusive_ptr<c10d::Work> BackendAllops::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  const Check check(*group_, __func__);
  const int root = check.root(opts.rootRank);
  const at::Tensor& input = check.one(inputTensors, "inputTensors");
  std::vector<at::Tensor> outputs = check.rootList(outputTensors, root, input, "outputTensors");
  return enqueue(
      &queue_,
      c10d::OpType::GATHER,
      __func__,
      "allops:gather",
      opts.timeout,
      outputTensors,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::gather(ctx, outputs, input, root);
      });
}

// Gathers the tensor of every rank into one flat tensor on the root.
#if ALLOPS_TORCH_2_14  // added in torch 2.14
c10::intrusive_ptr<c10d::Work> BackendAllops::gather_single(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::GatherOptions& opts) {
  const Check check(*group_, __func__);
  const int root = check.root(opts.rootRank);
  check.tensor(inputBuffer, "inputBuffer");
  check.scaledOnRoot(outputBuffer, inputBuffer, root, "outputBuffer");
  return enqueue(
      &queue_,
      c10d::OpType::GATHER,
      __func__,
      "allops:gather_single",
      opts.timeout,
      std::vector<at::Tensor>{outputBuffer},
      std::vector<at::Tensor>{inputBuffer},
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::gather_single(ctx, outputBuffer, inputBuffer, root);
      });
}
#endif

// Sends the root's i-th tensor to rank i.
c10::intrusive_ptr<c10d::Work> BackendAllops::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  const Check check(*group_, __func__);
  const int root = check.root(opts.rootRank);
  at::Tensor& output = check.one(outputTensors, "outputTensors");
  const std::vector<at::Tensor> inputs = check.rootList(inputTensors, root, output, "inputTensors");
  return enqueue(
      &queue_,
      c10d::OpType::SCATTER,
      __func__,
      "allops:scatter",
      opts.timeout,
      outputTensors,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::scatter(ctx, output, inputs, root);
      });
}

// Reduces the i-th tensor of every rank into the output of rank i.
c10::intrusive_ptr<c10d::Work> BackendAllops::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const Check check(*group_, __func__);
  at::Tensor& output = check.one(outputTensors, "outputTensors");
  const std::vector<at::Tensor>& inputs = check.oneList(inputTensors, "inputTensors");
  check.perRank(inputs, output, "inputTensors[0]");
  const Reduction op = check.reduction(opts.reduceOp, output);
  return enqueue(
      &queue_,
      c10d::OpType::REDUCE_SCATTER,
      __func__,
      "allops:reduce_scatter",
      opts.timeout,
      outputTensors,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::reduce_scatter(ctx, output, inputs, op);
      });
}

// Reduces one flat tensor of every rank; rank i keeps the i-th chunk.
#if ALLOPS_TORCH_2_14
c10::intrusive_ptr<c10d::Work> BackendAllops::reduce_scatter_single(
#else
c10::intrusive_ptr<c10d::Work> BackendAllops::_reduce_scatter_base(
#endif
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  const Check check(*group_, __func__);
  check.tensor(outputBuffer, "outputBuffer");
  check.scaled(inputBuffer, outputBuffer, check.size(), "inputBuffer");
  const Reduction op = check.reduction(opts.reduceOp, outputBuffer);
  return enqueue(
      &queue_,
      c10d::OpType::_REDUCE_SCATTER_BASE,
      __func__,
      "allops:_reduce_scatter_base",
      opts.timeout,
      std::vector<at::Tensor>{outputBuffer},
      std::vector<at::Tensor>{inputBuffer},
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::_reduce_scatter_base(ctx, outputBuffer, inputBuffer, op);
      });
}

// Runs several flat reduce-scatters as one operation.
#if ALLOPS_TORCH_2_14
c10::intrusive_ptr<c10d::Work> BackendAllops::reduce_scatter_single_coalesced(
#else
c10::intrusive_ptr<c10d::Work> BackendAllops::reduce_scatter_tensor_coalesced(
#endif
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const Check check(*group_, __func__);
  check.many(outputs, "outputs");
  check.scaledPairs(inputs, outputs, check.size(), "inputs");
  const Reduction op = check.reduction(opts.reduceOp, outputs.front());
  return enqueue(
      &queue_,
      c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
      __func__,
      "allops:reduce_scatter_tensor_coalesced",
      opts.timeout,
      outputs,
      inputs,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::reduce_scatter_tensor_coalesced(ctx, outputs, inputs, op);
      });
}

// Every rank sends a slice of one flat tensor to every rank (splits may be uneven).
#if ALLOPS_TORCH_2_14
c10::intrusive_ptr<c10d::Work> BackendAllops::all_to_all_single(
#else
c10::intrusive_ptr<c10d::Work> BackendAllops::alltoall_base(
#endif
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  const Check check(*group_, __func__);
  check.tensor(inputBuffer, "inputBuffer");
  check.tensor(outputBuffer, "outputBuffer");
  check.sameDtype(outputBuffer, inputBuffer, "outputBuffer");
  const std::vector<int64_t> outputSplits = check.splits(outputSplitSizes, outputBuffer, "outputSplitSizes");
  const std::vector<int64_t> inputSplits = check.splits(inputSplitSizes, inputBuffer, "inputSplitSizes");
  return enqueue(
      &queue_,
      c10d::OpType::ALLTOALL_BASE,
      __func__,
      "allops:alltoall_base",
      opts.timeout,
      std::vector<at::Tensor>{outputBuffer},
      std::vector<at::Tensor>{inputBuffer},
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::alltoall_base(ctx, outputBuffer, inputBuffer, outputSplits, inputSplits);
      });
}

// Every rank sends its i-th tensor to rank i.
c10::intrusive_ptr<c10d::Work> BackendAllops::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  const Check check(*group_, __func__);
  check.perRankAnyShape(inputTensors, "inputTensors");
  check.perRankAnyShape(outputTensors, "outputTensors");
  check.sameDtype(outputTensors.front(), inputTensors.front(), "outputTensors");
  return enqueue(
      &queue_,
      c10d::OpType::ALLTOALL,
      __func__,
      "allops:alltoall",
      opts.timeout,
      outputTensors,
      inputTensors,
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::alltoall(ctx, outputTensors, inputTensors);
      });
}

// Sends the tensor to one peer, matched by tag.
c10::intrusive_ptr<c10d::Work> BackendAllops::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  const Check check(*group_, __func__);
  const at::Tensor& tensor = check.one(tensors, "tensors");
  const int dst = check.peer(dstRank, "dstRank");
  return enqueue(
      nullptr,
      c10d::OpType::SEND,
      __func__,
      "allops:send",
      c10d::kUnsetTimeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::send(ctx, tensor, dst, tag);
      });
}

// Receives a tensor from one peer, matched by tag.
c10::intrusive_ptr<c10d::Work> BackendAllops::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  const Check check(*group_, __func__);
  at::Tensor& tensor = check.one(tensors, "tensors");
  const int src = check.peer(srcRank, "srcRank");
  return enqueue(
      &receives_,
      c10d::OpType::RECV,
      __func__,
      "allops:recv",
      c10d::kUnsetTimeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::recv(ctx, tensor, src, tag);
      });
}

// Receives a tensor from whichever peer sends first with the tag.
c10::intrusive_ptr<c10d::Work> BackendAllops::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  const Check check(*group_, __func__);
  at::Tensor& tensor = check.one(tensors, "tensors");
  return enqueue(
      &receives_,
      c10d::OpType::RECVANYSOURCE,
      __func__,
      "allops:recvAnysource",
      c10d::kUnsetTimeout,
      tensors,
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops& work) mutable {
        work.setSourceRank(ops::recvAnysource(ctx, tensor, tag));
      });
}

// Returns once every rank has entered it.
c10::intrusive_ptr<c10d::Work> BackendAllops::barrier(
    const c10d::BarrierOptions& opts) {
  return enqueue(
      &queue_,
      c10d::OpType::BARRIER,
      __func__,
      "allops:barrier",
      opts.timeout,
      std::vector<at::Tensor>{},
      c10::IValue(),
      [=](const OpContext& ctx, WorkAllops&) mutable {
        ops::barrier(ctx);
      });
}

} // namespace allops_collectives

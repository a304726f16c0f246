// The plumbing of Backend: see backend.hpp. The op bodies are in ops.cpp.
#include "backend.hpp"
#include "checks.hpp"
#include "collectives.hpp"  // this project's: class Collectives, a final Backend

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <thread>
#include <type_traits>
#include <utility>

namespace NEW_BACKEND_NAMESPACE {
namespace {

// An op that has not completed this long after its deadline is failed and
// dropped by the runtime; until then its body may report why it timed out.
constexpr auto kGrace = std::chrono::seconds(1);
// How long destroying the group waits for a queue's thread to exit.
constexpr auto kStopGrace = std::chrono::milliseconds(5000);

// How every thread here waits, for an op in flight (it moves only while polled) or for another
// thread: a few pause instructions, then yields for `yieldFor` (with more ranks than cores, the
// peer runs at once), then sleeps through `sleep`, which what it waits for can interrupt, from
// 50 us doubling to 1 ms. A yield slower than 0.5 ms (other programs keep the core busy, and it
// waits out their time slices) ends the yielding, unless the thread `polls` an op.
class Backoff {
 public:
  Backoff(Clock::duration yieldFor, bool polls) : yieldUntil_(Clock::now() + yieldFor), polls_(polls) {}

  template <typename Sleep>
  void pause(Sleep&& sleep) {
    if (++pauses_ <= 16) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      return;
    }
    const auto before = Clock::now();
    if (before < yieldUntil_) {
      std::this_thread::yield();
      if (!polls_ && Clock::now() - before > std::chrono::microseconds(500)) {
        yieldUntil_ = before;
      }
      return;
    }
    sleep(nap_);
    nap_ = std::min<Clock::duration>(2 * nap_, std::chrono::milliseconds(1));
  }

 private:
  Clock::time_point yieldUntil_;
  const bool polls_;
  int pauses_ = 0;
  Clock::duration nap_ = std::chrono::microseconds(50);
};

// How long a thread polling an op in flight yields before it sleeps: about
// four times as long as the queue's ops in flight took lately.
Clock::duration pollBudget(const std::atomic<int64_t>& latelyNs) {
  return std::clamp<Clock::duration>(
      4 * std::chrono::nanoseconds(latelyNs.load(std::memory_order_relaxed)),
      std::chrono::milliseconds(1),
      std::chrono::seconds(1));
}

// The threads that complete futures, so run their callbacks, and fail ops past their deadline
// and grace; shared by every group of the process. A callback may issue ops and wait for them
// (DDP's comm hooks do): so no callback runs on a queue's thread, and one of these threads is
// always idle (the one that takes the last idle thread's place starts another first). Spare
// threads leave after a minute idle.
class Runtime {
 public:
  static Runtime& get() {
    // A forked child has none of its parent's threads: it starts afresh.
    static const int forkSafe = pthread_atfork(nullptr, nullptr, [] { instance = new Runtime(); });
    (void)forkSafe;
    return *instance;
  }

  // Runs `job` on an idle thread.
  void post(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    wakeOrStart();
  }

  // Fails `work` (Work::expire) once its giveUpAt() passed, unless it is done by then.
  void watch(const c10::intrusive_ptr<Work>& work) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Idle threads look at the deadlines at least once a minute (loop()).
    const bool soon = work->giveUpAt() < Clock::now() + kLookEvery &&
        (deadlines_.empty() || work->giveUpAt() < deadlines_.begin()->first);
    deadlines_.emplace(work->giveUpAt(), work);
    if (soon) {
      wakeOrStart();
    }
  }

  void unwatch(const Work& work) {
    c10::intrusive_ptr<Work> last;  // dropped outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    auto [from, to] = deadlines_.equal_range(work.giveUpAt());
    for (auto it = from; it != to; ++it) {
      if (it->second.get() == &work) {
        last = std::move(it->second);
        deadlines_.erase(it);
        break;
      }
    }
  }

 private:
  static Runtime* instance;
  static constexpr auto kLookEvery = std::chrono::minutes(1);

  void wakeOrStart() {
    if (idle_ > 0) {
      wake_.notify_one();
      return;
    }
    ++idle_;
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    auto idleSince = Clock::now();
    for (;;) {
      std::function<void()> job;
      c10::intrusive_ptr<Work> late;
      const auto now = Clock::now();
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      } else if (!deadlines_.empty() && deadlines_.begin()->first <= now) {
        late = std::move(deadlines_.begin()->second);
        deadlines_.erase(deadlines_.begin());
      } else if (idle_ > 2 && now - idleSince > kLookEvery) {
        --idle_;
        return;
      } else {
        // A copy, not a reference into deadlines_: the first one may go while this thread waits.
        const Clock::time_point first = deadlines_.empty() ? now + kLookEvery : deadlines_.begin()->first;
        wake_.wait_until(lock, std::min(first, now + kLookEvery));
        continue;
      }
      if (--idle_ == 0) {
        wakeOrStart();
      }
      lock.unlock();
      if (job) {
        job();
        job = nullptr;  // whatever it held goes outside the lock
      } else {
        late->expire();
        late.reset();
      }
      lock.lock();
      ++idle_;
      idleSince = Clock::now();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::multimap<Clock::time_point, c10::intrusive_ptr<Work>> deadlines_;
  int idle_ = 0;  // threads not running a job, and any starting
};

Runtime* Runtime::instance = new Runtime();  // never destroyed: its threads may outlive exit()

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


// The title an op has in torch.profiler, "NAME:OP", kept for the process's
// life (c10d::Work's profiling keeps the pointer).
const char* profilingTitle(const char* op) {
  static std::mutex mutex;
  static std::map<std::string, std::string> titles;
  std::lock_guard<std::mutex> lock(mutex);
  std::string& title = titles[op];
  if (title.empty()) {
    title = std::string(NEW_BACKEND_NAME ":") + op;
  }
  return title.c_str();
}

template <typename F>
void warnIfThrows(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    TORCH_WARN("Backend " NEW_BACKEND_NAME ": ", what, " failed: ", e.what());
  }
}

// The tensors torch.profiler shows as an op's inputs (with record_shapes):
// those it reads, else those it writes. None while nothing is profiled.
std::optional<std::vector<at::Tensor>> profiledTensors(const c10::IValue& inputs, const c10::IValue& outputs) {
  if (!at::hasCallbacks()) {
    return std::nullopt;
  }
  std::vector<at::Tensor> tensors;
  collectTensors(inputs, tensors);
  if (tensors.empty()) {
    collectTensors(outputs, tensors);
  }
  return tensors;
}

int64_t elements(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const at::Tensor& tensor : tensors) {
    total += tensor.numel();
  }
  return total;
}

} // namespace

void OpContext::failGroup(const std::string& why) const {
  health.fail(why);
}

std::exception_ptr backendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      collectTensors(item, out);
    }
  }
}

void watch(const c10::intrusive_ptr<Work>& work) {
  Runtime::get().watch(work);
}

// ---------------------------------------------------------------------------
// Library

Library::Library(std::shared_ptr<Bootstrap> store, std::shared_ptr<Communicator> comm)
    : store_(std::move(store)), comm_(std::move(comm)) {}

bool Library::take() {
  if ((users_.fetch_add(1) & kClosed) == 0) {
    return true;
  }
  release();
  return false;
}

void Library::release() {
  const int64_t before = users_.fetch_sub(1);
  TORCH_INTERNAL_ASSERT((before & ~kClosed) > 0, "the library was released more often than taken");
  if (before - 1 == kClosed) {
    finalize();
  }
}

void Library::close() {
  if (users_.fetch_or(kClosed) == 0) {
    finalize();
  }
}

// ops::abort and ops::finalize, each once: an error is a warning, as nobody waits for them.
void Library::abort() {
  if (take()) {  // never once finalized
    if (!aborted_.exchange(true)) {
      warnIfThrows("ops::abort", [this] { ops::abort(*comm_); });
    }
    release();
  }
}

void Library::finalize() {
  if (!finalized_.exchange(true)) {
    warnIfThrows("ops::finalize", [this] { ops::finalize(*comm_); });
  }
}

// ---------------------------------------------------------------------------
// WorkQueue

struct WorkQueue::State {
  void loop();
  // Polls the ops in flight once each (but those their callers poll); forgets
  // those that are over. Returns whether any was.
  bool poll(std::vector<c10::intrusive_ptr<Work>>& inFlight, bool stopping);
  // A caller stopped polling its op: wakes the worker to take it over when
  // `unfinished`, or to start the ops queued behind it.
  void callerLeft(bool unfinished) {
    std::unique_lock<std::mutex> lock(mutex);
    if (unfinished || !queued.empty()) {
      changed.store(true);
      lock.unlock();
      wake.notify_one();
    }
  }

  std::mutex mutex;
  std::condition_variable wake;    // the worker's: an op was pushed, a caller left one, stop
  std::condition_variable exited;  // stop()'s: the worker left its loop
  std::deque<c10::intrusive_ptr<Work>> queued;    // ops to run, in order
  std::vector<c10::intrusive_ptr<Work>> started;  // ops in flight, started elsewhere
  std::thread thread;
  bool running = false;  // the thread is in loop()
  bool stopping = false;
  bool waiting = false;  // the worker waits for `wake`
  bool asleep = false;   // ... with nothing to poll, until push() wakes it
  Clock::time_point startedAt;  // when an op last started on a caller's thread
  std::atomic<bool> changed{false};  // an op was pushed or left by its caller since the worker looked
  bool busy = false;     // the worker runs a body
  std::atomic<int> unfinishedCollectives{0};  // issued to this queue
  std::atomic<int64_t> latelyNs{200'000};     // how long ops in flight took lately
};

WorkQueue::WorkQueue() : state_(std::make_shared<State>()) {}

WorkQueue::~WorkQueue() {
  stop(kStopGrace);
}

bool WorkQueue::push(const c10::intrusive_ptr<Work>& work) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.stopping) {
    return false;
  }
  if (!s.running) {
    s.running = true;
    s.thread = std::thread([state = state_] { state->loop(); });  // the thread owns the state
  }
  (work->inFlight() ? s.started.push_back(work) : s.queued.push_back(work));
  s.changed.store(true);
  // With kBodiesOnlyStart, an op started on the caller's thread is polled by its caller
  // (Work::wait) or soon by the worker, dozing while such ops come (loop()): it wakes only a
  // worker asleep for good.
  const bool startedHere = kBodiesOnlyStart && work->inFlight();
  if (startedHere) {
    s.startedAt = Clock::now();
  }
  const bool wake = startedHere ? s.asleep : s.waiting;
  lock.unlock();
  if (wake) {
    s.wake.notify_one();
  }
  return true;
}

bool WorkQueue::idle() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return !s.stopping && s.queued.empty() && !s.busy && s.unfinishedCollectives.load() == 0;
}

void WorkQueue::stop(std::chrono::milliseconds grace) {
  State& s = *state_;
  std::deque<c10::intrusive_ptr<Work>> cancelled;
  std::thread thread;  // only the first stop() gets it
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    s.changed.store(true);
    cancelled.swap(s.queued);
    thread = std::move(s.thread);
  }
  s.wake.notify_one();
  for (auto& work : cancelled) {
    work->finish(backendError(work->describe() + ": cancelled, the process group was destroyed before it ran"));
  }
  if (!thread.joinable()) {
    return;
  }
  // No callback runs on a queue's thread, and no op body destroys its group.
  TORCH_INTERNAL_ASSERT(thread.get_id() != std::this_thread::get_id(), "a queue stopped from its own thread");
  std::unique_lock<std::mutex> lock(s.mutex);
  if (s.exited.wait_for(lock, grace, [&s] { return !s.running; })) {
    lock.unlock();
    thread.join();
    return;
  }
  thread.detach();  // it finalizes the library when its last op lets go
  TORCH_WARN(
      "Backend " NEW_BACKEND_NAME ": an op did not give up within ", grace.count(),
      " ms of the process group's destruction; its thread is left to finish it");
}

void WorkQueue::State::loop() {
  std::vector<c10::intrusive_ptr<Work>> inFlight;  // this thread's alone
  std::optional<Backoff> backoff;  // since the last op started or completed
  const auto sleep = [this, &inFlight](bool idle, Clock::duration nap) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!changed.load() && !stopping) {
      waiting = true;
      asleep = idle && inFlight.empty() && Clock::now() - startedAt > std::chrono::milliseconds(100);
      if (asleep) {
        wake.wait(lock);
      } else {
        wake.wait_for(lock, idle ? std::chrono::milliseconds(inFlight.empty() ? 1 : 10) : nap);
      }
      waiting = asleep = false;
    }
    changed.store(true);  // it slept: it looks again
  };
  bool idle = false;
  for (;;) {
    if (idle && !changed.load(std::memory_order_acquire)) {
      backoff->pause([&](Clock::duration nap) { sleep(true, nap); });
      continue;
    }
    c10::intrusive_ptr<Work> next;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex);
      inFlight.insert(inFlight.end(), started.begin(), started.end());
      started.clear();
      changed.store(false);
      // A group's collectives run one at a time, in order (a later one may
      // use the tensors of one in flight); sends and receives do not wait.
      const bool blocked = std::any_of(inFlight.begin(), inFlight.end(), [](const auto& work) {
        return work->isCollective() && work->inFlight();
      });
      if (!queued.empty() && !blocked) {
        next = std::move(queued.front());
        queued.pop_front();
        busy = true;
      } else if (inFlight.empty() && stopping) {
        running = false;
        exited.notify_all();
        return;
      }
      stop = stopping;
      // Idle, or every op in flight is polled by its caller (who wakes this
      // thread when it leaves one unfinished).
      const bool wasIdle = idle;
      idle = !next && (inFlight.empty() ||
                       (!stop && std::all_of(inFlight.begin(), inFlight.end(), [](const auto& work) {
                          return work->awaited();
                        })));
      if (idle != wasIdle) {
        backoff.reset();  // polling and idling wait differently
      }
    }
    if (next) {
      next->run();
      if (next->inFlight()) {
        inFlight.push_back(std::move(next));
      }
      next.reset();  // the op's last reference may go here, outside the lock
      std::lock_guard<std::mutex> lock(mutex);
      busy = false;
      backoff.reset();
      continue;
    }
    if (!idle && poll(inFlight, stop)) {
      backoff.reset();
      continue;
    }
    if (!backoff) {
      backoff.emplace(idle ? std::chrono::microseconds(50) : pollBudget(latelyNs), !idle);
    }
    if (!idle) {
      backoff->pause([&](Clock::duration nap) { sleep(false, nap); });
    }
  }
}

bool WorkQueue::State::poll(std::vector<c10::intrusive_ptr<Work>>& inFlight, bool stopping) {
  const auto over = std::remove_if(inFlight.begin(), inFlight.end(), [stopping](const auto& work) {
    return !work->inFlight() || ((stopping || !work->awaited()) && work->tryPoll());
  });
  const bool any = over != inFlight.end();
  inFlight.erase(over, inFlight.end());
  return any;
}

// ---------------------------------------------------------------------------
// Work

Work::Work(
    std::shared_ptr<Group> group,
    std::shared_ptr<Health> health,
    std::shared_ptr<Library> library,
    std::shared_ptr<WorkQueue::State> queue,
    c10d::OpType type,
    const char* op,
    const char* profilingTitle,
    std::chrono::milliseconds timeout,
    c10::IValue outputs,
    c10::IValue inputs,
    Body body,
    std::shared_ptr<DeviceOp> device)
    : c10d::Work(group->rank, type, profilingTitle, profiledTensors(inputs, outputs)),
      group_(std::move(group)),
      health_(std::move(health)),
      library_(std::move(library)),
      queue_(std::move(queue)),
      op_(op),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      device_(std::move(device)),
      body_(std::move(body)) {
  static std::atomic<uint64_t> completionKeys{0};
  completionKey_ = completionKeys.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool Work::isCollective() const {
  return !c10d::isP2POp(opType_);
}

std::string Work::describe() const {
  return "Backend " + group_->backend + " (rank " + std::to_string(group_->rank) + "): " + op_ + " #" +
      std::to_string(seq_);
}

Clock::time_point Work::giveUpAt() const {
  return deadline_ + kGrace;
}

std::exception_ptr Work::refusal() const {
  if (group_->aborted.load()) {
    return backendError(describe() + ": cancelled, the process group was destroyed before it ran");
  }
  if (std::exception_ptr refused = health_->refuse(describe())) {
    return refused;
  }
  if (Clock::now() > deadline_) {
    return backendError(
        describe() + ": could not start within its " + std::to_string(timeout_.count()) +
        " ms timeout (the ops queued before it took that long)");
  }
  return nullptr;
}

void Work::run() {
  if (cancelled_.load()) {
    return;  // aborted or failed while queued: its body never runs
  }
  TORCH_INTERNAL_ASSERT(body_ && !holdsLibrary_, describe(), " ran twice");
  // Taken before refusal() reads `aborted`, which shutdown() sets before it
  // asks whether the library is busy: one of the two sees the other.
  std::exception_ptr error;
  if (library_->take()) {
    holdsLibrary_ = true;
    error = refusal();
  } else {
    error = backendError(describe() + ": cancelled, the process group was destroyed before it ran");
  }
  if (!error) {
    started_ = Clock::now();
    bodyStarted_.store(true, std::memory_order_release);
    recordStarted(record_);
    try {
      const c10::OptionalStreamGuard onStream(stream());
      if (device_) {
        device_->ready.block(device_->stream);
      }
      const OpContext ctx{
          *group_, library_->comm(), op_, seq_, collective_, deadline_, timeout_,
          cancelled_, &later_, &sourceRank_, *health_};
      body_(ctx, *this);
    } catch (...) {
      error = backendError(failure(std::current_exception()));
      later_ = nullptr;
    }
  }
  body_ = nullptr;  // drops the tensors the body captured
  if (later_) {
    inFlight_->store(true, std::memory_order_release);
    if (kBodiesOnlyStart) {
      { std::lock_guard<std::mutex> lock(mutex_); }  // a caller asleep in await() sees it in flight
      cv_.notify_all();
    }
    return;
  }
  finish(error);
  release();
}

void Work::abandon() {
  finish(backendError(describe() + ": aborted, the process group was destroyed"));
  Backoff backoff(std::chrono::milliseconds(1), true);
  while (!tryPoll()) {  // an op that started here gives up now (its group is aborted)
    backoff.pause([](Clock::duration nap) { std::this_thread::sleep_for(nap); });
  }
}

bool Work::tryPoll() {
  if (!inFlight() || polling_.exchange(true, std::memory_order_acquire)) {
    return !inFlight();
  }
  bool completed = false;
  bool dropped = false;
  std::exception_ptr error;
  if (!inFlight_->load(std::memory_order_relaxed)) {
    // Another thread saw it complete just now.
  } else if (cancelled_.load() && Clock::now() > giveUpAt()) {
    dropped = true;  // it failed, and its done function did not give up in time
  } else {
    try {
      const c10::OptionalStreamGuard onStream(stream());
      completed = later_();
    } catch (...) {
      error = backendError(failure(std::current_exception()));
      completed = true;
    }
  }
  if (error) {
    finish(error);  // the group fails before the collectives behind this one may start
  }
  if (completed || dropped) {
    // A wait for a late peer counts as no longer than its polling budget.
    const auto took = std::min<Clock::duration>(Clock::now() - started_, pollBudget(queue_->latelyNs));
    queue_->latelyNs.store(
        (queue_->latelyNs.load(std::memory_order_relaxed) + std::chrono::nanoseconds(took).count()) / 2,
        std::memory_order_relaxed);
    inFlight_->store(false, std::memory_order_release);
    release();
  }
  polling_.store(false, std::memory_order_release);
  if (completed && !error) {
    finish(nullptr);
  }
  return !inFlight();
}

void Work::release() {
  later_ = nullptr;  // the done function, and what it holds, before the library goes
  if (holdsLibrary_) {
    holdsLibrary_ = false;
    library_->release();
  }
}

void Work::finish(std::exception_ptr error) {
  const auto self = c10::intrusive_ptr<Work>::reclaim_copy(this);  // unwatch() may drop another
  if (error) {
    error = explained(error);
    if (!error) {
      return;  // the Runtime asks the other ranks about the failure, then finishes the op
    }
  }
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) {
      if (!error && (opType_ == c10d::OpType::RECV || opType_ == c10d::OpType::RECVANYSOURCE)) {
        // It took its message after it had failed: the next receive from that
        // rank would take the message after it.
        health_->fail(std::string(op_) + " #" + std::to_string(seq_) + " took its message after it had failed");
      }
      return;
    }
    // An op succeeds once its body or done function said so, not before.
    TORCH_INTERNAL_ASSERT(error || !inFlight(), describe(), " completed while in flight");
    completed_ = true;
    error_ = error;
    if (error) {
      cancelled_.store(true);
      if (isCollective()) {
        failGroup(error);  // the ranks no longer agree on which collective comes next
      }
    } else if (device_) {
      device_->done.record(device_->stream);
    }
    future = future_;
  }
  if (error && isCollective()) {
    library_->abort();  // as NCCL does: bodies stuck in the library return
  }
  if (isCollective()) {
    queue_->unfinishedCollectives.fetch_sub(1);
  }
  if (monitor_) {  // null for an op that was never issued
    monitor_->finished();
  }
  const bool ran = bodyStarted_.load(std::memory_order_acquire);
  if (!error) {
    const std::optional<float> took = ran ? std::optional(milliseconds()) : std::nullopt;
    durationMs_ = took.value_or(0);
    recordFinished(record_, "completed", took, "");
    if (monitor_) {  // null for an op that was never issued
      monitor_->completed(completionKey_, took);
    }
  } else if (record_ >= 0) {
    recordFinished(record_, Clock::now() > deadline_ ? "timed out" : "failed", std::nullopt, errorMessage(error));
  }
  if (explaining_.load()) {
    monitor_->dumpSoon();  // with this op's failure in it
  }
  Runtime::get().unwatch(*this);
  if (!future) {
    publish();
    return;
  }
  // The future's callbacks run on the Runtime's thread; the op is done once
  // they ran, as with gloo.
  Runtime::get().post([self, future] {
    self->settle(future);
    self->publish();
  });
}

std::string Work::failure(const std::exception_ptr& error) const {
  // Past the deadline, the words of a timeout, which callers look for (" timeout ").
  return describe() +
      (Clock::now() > deadline_ ? " failed at its " + std::to_string(timeout_.count()) + " ms timeout (" : " failed (") +
      errorMessage(error) + ")";
}

void Work::expire() {
  const std::string late = describe() + " did not complete within its " + std::to_string(timeout_.count()) + " ms timeout";
  if (!bodyStarted_.load(std::memory_order_acquire)) {
    finish(backendError(late + ": it never started, as the ops before it on this rank took that long"));
  } else {
    finish(backendError(
        late + ": on this rank, ops::" + op_ + (inFlight() ? "'s done function (OpContext::completeLater)" : "") +
        " did not give up at the deadline, as it must once ctx.expired() is true (ops.hpp)"));
  }
}

std::exception_ptr Work::explained(std::exception_ptr error) {
  if (explained_.load() || !isCollective() || !bodyStarted_.load(std::memory_order_acquire) || group_->aborted.load() ||
      group_->size < 2 || Clock::now() <= deadline_) {
    return error;  // not a timeout of a collective this rank entered
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) {
      return error;  // finish() ignores it
    }
  }
  if (explaining_.exchange(true)) {
    return nullptr;
  }
  // The group fails now, as finish() would make it, so that the ops behind
  // this one are refused at once; the others' answers take up to a few
  // seconds, on a thread of the Runtime, which then finishes the op.
  failGroup(error);
  library_->abort();
  const std::string what = errorMessage(error);
  Runtime::get().post([self = c10::intrusive_ptr<Work>::reclaim_copy(this), what] {
    const std::string said = self->monitor_->explain(self->collective_);
    self->explained_.store(true);
    self->finish(backendError(said.empty() ? what : what + "; " + said));
  });
  return nullptr;
}

void Work::failGroup(const std::exception_ptr& error) const {
  const std::string what = errorMessage(error);
  const std::string prefix = "Backend " + group_->backend + " (rank " + std::to_string(group_->rank) + "): ";
  health_->fail(what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
}

float Work::milliseconds() const {
  return std::chrono::duration<float, std::milli>(Clock::now() - started_).count();
}

void Work::publish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.store(true, std::memory_order_release);
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();  // the op's end in torch.profiler
      recordFunctionEndCallback_ = nullptr;
    }
  }
  cv_.notify_all();
}

void Work::settle(const c10::intrusive_ptr<c10::ivalue::Future>& future) const {
  // On the op's stream: the future's events mark where its results are ready.
  const c10::OptionalStreamGuard onStream(stream());
  if (error_) {
    future->setError(error_);
  } else {
    future->markCompleted(outputs_);
  }
}

bool Work::await(Clock::time_point until) {
  if (kBodiesOnlyStart) {
    waiters_.fetch_add(1);  // the worker leaves the op to this thread
  }
  Backoff backoff(kBodiesOnlyStart ? pollBudget(queue_->latelyNs) : std::chrono::microseconds(50), kBodiesOnlyStart);
  while (!done() && Clock::now() < until) {
    if (kBodiesOnlyStart && inFlight() && tryPoll()) {
      continue;
    }
    backoff.pause([&](Clock::duration nap) {
      std::unique_lock<std::mutex> lock(mutex_);
      const bool polling = kBodiesOnlyStart && inFlight();
      cv_.wait_until(lock, polling ? std::min(until, Clock::now() + nap) : until, [&] {
        return done() || (kBodiesOnlyStart && !polling && inFlight());
      });
    });
  }
  if (kBodiesOnlyStart) {
    waiters_.fetch_sub(1);
    queue_->callerLeft(inFlight());
  }
  return done();
}

bool Work::wait(std::chrono::milliseconds timeout) {
  const bool bounded = timeout > kNoTimeout;
  if (!await(bounded ? Clock::now() + timeout : giveUpAt())) {
    if (bounded) {
      C10_THROW_ERROR(
          DistBackendError,
          describe() + " did not complete within the " + std::to_string(timeout.count()) +
              " ms timeout given to wait()");
    }
    expire();  // as the Runtime does at this time: whichever comes first
    await(Clock::time_point::max());  // its future's callbacks, if any, run first
  }
  if (error_) {
    std::rethrow_exception(error_);
  }
  synchronize();
  return true;
}

void Work::synchronize() {
  if (device_ && done() && !error_) {
    const c10::impl::VirtualGuardImpl guard(device_->stream.device_type());
    device_->done.block(guard.getStream(device_->stream.device()));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool settleNow = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = device_ ? c10::make_intrusive<c10::ivalue::Future>(
                              outputs_.type(), std::vector<c10::Device>{device_->stream.device()})
                        : c10::make_intrusive<c10::ivalue::Future>(outputs_.type());
      settleNow = completed_;  // else finish() settles it
    }
    future = future_;
  }
  if (settleNow) {
    settle(future);  // no callback was added yet
  } else if (kBodiesOnlyStart) {
    queue_->callerLeft(inFlight());  // waited for through its future: the worker polls it now
  }
  return future;
}


// ---------------------------------------------------------------------------
// Backend

namespace {

// The default group's communicator, the parent of the groups created after
// it (ops::split). Guarded by worldMutex.
std::mutex worldMutex;
std::weak_ptr<Library> world;

uint64_t nextGroupUid() {
  static std::atomic<uint64_t> uids{0};
  return uids.fetch_add(1);
}

} // namespace

Backend::Backend(
    std::shared_ptr<Group> group,
    std::shared_ptr<Library> library,
    NEW_BACKEND_NAMESPACE::Options options,
    std::chrono::milliseconds timeout)
    : WithSplitting(group->rank, group->size),
      group_(std::move(group)),
      library_(std::move(library)),
      options_(std::move(options)),
      timeoutMs_(timeout.count()),
      uid_(nextGroupUid()),
      monitor_(GroupMonitor::watched(group_, library_->store(), uid_)) {}

Backend::~Backend() {
  shutdown();
}

c10::intrusive_ptr<c10d::Backend> Backend::create(
    const c10d::DistributedBackendOptions& options,
    const NEW_BACKEND_NAMESPACE::Options& userOptions) {
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
  return c10::make_intrusive<Collectives>(std::move(group), std::move(library), userOptions, timeout);
}

c10::intrusive_ptr<c10d::Backend> Backend::split(
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
      c10::make_intrusive<Collectives>(std::move(group), std::move(library), options_, timeout);
  lastSplitStore_ = store.get();
  lastSplitName_ = name;
  lastSplit_.emplace(child);
  return child;
}

c10::intrusive_ptr<c10d::Backend::Options> Backend::getBackendOptions() {
  auto opts = c10::make_intrusive<c10d::Backend::Options>(
      NEW_BACKEND_NAME, std::chrono::milliseconds(timeoutMs_.load()));
  opts->group_name = group_->id;
  opts->global_ranks_in_group.assign(group_->globalRanks.begin(), group_->globalRanks.end());
  return opts;
}

void Backend::deliverSends() {
  decltype(sends_) sends;
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    sends.swap(sends_);
  }
  const auto usable = [this] {
    return !group_->aborted.load() && !library_->aborted() && !health_->failed();
  };
  const auto until = Clock::now() + kStopGrace;  // a peer that destroyed its group takes none
  for (const auto& [inFlight, deadline] : sends) {
    auto nap = std::chrono::milliseconds(1);
    while (inFlight->load(std::memory_order_acquire) && Clock::now() < std::min(deadline, until) && usable()) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::milliseconds(50));
    }
  }
}

void Backend::shutdown() {
  if (!group_->aborted.load()) {
    deliverSends();
  }
  // Peers may wait for this rank's collectives under way (before the queues fail the rest),
  // unless the group failed already: they were told.
  const bool underWay = queue_.state()->unfinishedCollectives.load() > 0 && !health_->failed();
  group_->aborted.store(true);  // bodies and done functions see it in OpContext::expired()
  if (library_->busy()) {
    library_->abort();  // an op uses the library: make it return
  }
  queue_.stop(kStopGrace);
  receives_.stop(kStopGrace);
  library_->close();  // finalized now, or when the last op in flight lets go
  monitor_->close(underWay);
}

void Backend::abort() {
  group_->aborted.store(true);
  library_->abort();
  shutdown();
}

uint64_t Backend::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(issueMutex_);
  return collectives_;
}
#if NEW_BACKEND_TORCH_2_15

void Backend::registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) {
  monitor_->addCompletionHook(hookId, [hook = std::move(hook)](uint64_t key, std::optional<float> durationMs) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    args.duration_ms = durationMs;
    hook(args);
  });
}

void Backend::unregisterCompletionHook(int64_t hookId) {
  monitor_->removeCompletionHook(hookId);
}
#endif

c10::intrusive_ptr<c10d::Work> Backend::enqueue(
    Runs where,
    c10d::OpType type,
    const char* op,
    std::chrono::milliseconds timeout,
    c10::IValue outputs,
    const c10::IValue& inputs,
    Work::Body body,
    int peer) {
  if (!at::hasCallbacks()) {
    return issue(where, type, op, timeout, std::move(outputs), inputs, std::move(body), peer);
  }
  // torch.profiler records the call with its sizes, as it records NCCL's.
  std::vector<at::Tensor> read;
  std::vector<at::Tensor> written;
  collectTensors(inputs, read);
  collectTensors(outputs, written);
  const std::vector<at::Tensor>& anyTensors = read.empty() ? written : read;
  const auto& ranks = group_->globalRanks;
  int stride = ranks.size() > 1 ? static_cast<int>(ranks[1] - ranks[0]) : 1;
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] - ranks[i - 1] != stride) {
      stride = -1;  // not evenly strided
    }
  }
  const bool p2p = c10d::isP2POp(type);
  int64_t number = 0;
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    number = static_cast<int64_t>(p2p ? ops_ - collectives_ : collectives_);
  }
  RECORD_PARAM_COMMS_DATA(
      std::make_tuple(number, p2p),
      std::make_tuple(getGroupUid().empty() ? group_->id : getGroupUid(), getGroupDesc()),
      read.empty() ? written : read,
      written,
      group_->rank,
      recordedName(op),
      elements(read.empty() ? written : read),
      elements(written),
      anyTensors.empty() ? at::kByte : anyTensors.front().scalar_type(),
      std::vector<int64_t>(),
      std::vector<int64_t>(),
      static_cast<int>(ranks.front()),
      stride,
      group_->size);
  return issue(where, type, op, timeout, std::move(outputs), inputs, std::move(body), peer);
}

const std::shared_ptr<const RecordedGroup>& Backend::recordedGroup() {
  if (!recorded_) {
    auto recorded = std::make_shared<RecordedGroup>();
    recorded->uid = uid_;
    recorded->name = getGroupUid().empty() ? group_->id : getGroupUid();
    recorded->desc = getGroupDesc().empty() ? "undefined" : getGroupDesc();
    recorded->ranks = group_->globalRanks;
    recorded_ = std::move(recorded);
  }
  return recorded_;
}

c10::intrusive_ptr<c10d::Work> Backend::issue(
    Runs where,
    c10d::OpType type,
    const char* op,
    std::chrono::milliseconds timeout,
    c10::IValue outputs,
    const c10::IValue& inputs,
    Work::Body body,
    int peer) {
  if (timeout == c10d::kUnsetTimeout) {
    timeout = std::chrono::milliseconds(timeoutMs_.load());
  }
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365));  // no overflow
  WorkQueue& queue = where == Runs::kOnReceives ? receives_ : queue_;  // a send in flight is polled by queue_
  std::shared_ptr<DeviceOp> device = deviceOp(outputs, inputs);
  Frames frames = callersFrames();
  auto work = c10::make_intrusive<Work>(
      group_, health_, library_, queue.state(), type, op, profilingTitle(op), timeout, std::move(outputs),
      inputs, std::move(body), std::move(device));
  bool handed = true;  // to the queue, or done
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    // A body that only starts its op runs here if its queue would run it at once (no hand-off);
    // nobody holds the op's future yet, so finishing it here runs no callback under the lock.
    const bool here = where != Runs::kHere && kBodiesOnlyStart && !work->device_ && queue.idle();
    work->seq_ = ops_++;
    if (work->isCollective()) {
      work->collective_ = collectives_++;
      queue.state()->unfinishedCollectives.fetch_add(1);
      monitor_->entered(collectives_);
    }
    work->monitor_ = monitor_;
    monitor_->issued();
    const bool p2p = !work->isCollective();
    work->record_ = recordOp(OpRecord{
        recordedGroup(), op, group_->rank, peer, p2p, p2p ? collectives_ : work->collective_,
        work->seq_ - (p2p ? collectives_ : work->collective_), work->seq_, timeout, inputs, work->outputs_,
        std::move(frames)});
    watch(work);
    if (here) {
      work->run();  // in flight, it reaches the queue before any later op can
      handed = !work->inFlight() || queue.push(work);
    } else if (where != Runs::kHere) {
      handed = queue.push(work);
    }
  }
  if (where == Runs::kHere) {
    work->run();  // a send, on the caller's thread
    handed = !work->inFlight() || queue.push(work);
    if (handed && work->inFlight()) {
      std::lock_guard<std::mutex> lock(issueMutex_);
      if (sends_.size() >= forgetSendsAt_) {  // forget those no longer in flight
        sends_.erase(
            std::remove_if(sends_.begin(), sends_.end(), [](const auto& send) { return !send.first->load(); }),
            sends_.end());
        forgetSendsAt_ = std::max<size_t>(64, 2 * sends_.size());
      }
      sends_.emplace_back(work->inFlight_, work->deadline_);
    }
  }
  if (!handed) {
    work->abandon();  // the group was destroyed meanwhile
  }
  return work;
}

} // namespace NEW_BACKEND_NAMESPACE

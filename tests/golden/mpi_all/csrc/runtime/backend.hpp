// Backend: the c10d::Backend of a generated backend (its name: config.hpp).
//
// This is the plumbing every generated backend shares: argument checks, work
// queues, Work objects with real state, timeouts, errors and
// shutdown. You should not need to edit it: the collectives are in ops.cpp,
// and ops.hpp says what they may do.
//
// Who does what:
// - The caller's thread checks each call, numbers it and queues it (a send,
//   and with kBodiesOnlyStart an op whose queue is idle, runs its body there).
// - Each WorkQueue's one thread runs the bodies in order and polls the ops in
//   flight (OpContext::completeLater) until they complete or give up.
// - The Runtime's threads, shared by every group of the process, complete
//   futures (so run their callbacks) and fail ops past their deadline. One of
//   them is always idle: a callback may issue ops and wait for them.
// - Library counts who uses the communicator; the last to let go of a
//   destroyed group finalizes it.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops.hpp"

namespace torch {
struct CapturedTraceback;
} // namespace torch

// torch 2.14 renamed several collectives (_allgather_base became
// all_gather_single, ...), kept the old names as deprecated aliases and added
// gather_single. The backend overrides the canonical names of the torch it is
// built against, and only the collectives that torch has.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
#define NEW_BACKEND_TORCH_2_14 1
#else
#define NEW_BACKEND_TORCH_2_14 0
#endif
// torch 2.15 added completion hooks (c10d::Backend::registerCompletionHook),
// through which c10d's own flight recorder learns when an op completed. It
// defines no C10D_BACKEND_HAS_* macro for them.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define NEW_BACKEND_TORCH_2_15 1
#else
#define NEW_BACKEND_TORCH_2_15 0
#endif

namespace NEW_BACKEND_NAMESPACE {

using Clock = std::chrono::steady_clock;

class Work;

// Every tensor in `value` (a tensor, or lists of them), flattened, into `out`.
void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out);

// A c10d error (a RuntimeError in Python) carrying `message`.
std::exception_ptr backendError(const std::string& message);

// Whether a process group can still be used on this rank. The first
// collective that fails or times out leaves the ranks disagreeing on which
// collective comes next, so from then on every op of the group fails at once,
// naming that collective, instead of pairing with the wrong data.
class Health {
 public:
  // Records the first failure; later ones change nothing.
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = what;
      failed_.store(true, std::memory_order_release);
    }
  }
  // Whether a failure was recorded: the group is no longer usable.
  bool failed() const {
    return failed_.load(std::memory_order_acquire);
  }
  // Null while the group is usable; else the error refusing the op `who`.
  std::exception_ptr refuse(const std::string& who) const {
    if (!failed_.load(std::memory_order_acquire)) {
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return backendError(
        who + ": this process group can no longer be used since " + failure_ + "; destroy it and create a new one");
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

// Your library's communicator (ops.hpp) and who is using it. Every op holds
// the library from the moment its body starts until its body returned done,
// or its done function (OpContext::completeLater) did, or was dropped; after
// close(), nobody may take it, and the last one to let go runs ops::finalize.
// So finalize runs exactly once, after the last op's last call, on whichever
// thread that was.
class Library {
 public:
  Library(std::shared_ptr<Bootstrap> store, std::shared_ptr<Communicator> comm);

  Communicator& comm() const {
    return *comm_;
  }
  // The group's store, as ops::init saw it.
  const std::shared_ptr<Bootstrap>& store() const {
    return store_;
  }
  // Takes the library for an op; false once it is closed.
  bool take();
  // Lets go of it; the last to let go of a closed library finalizes it.
  void release();
  // No op takes it from now on; finalizes it now if none holds it.
  void close();
  // Whether an op holds it.
  bool busy() const {
    return (users_.load() & ~kClosed) != 0;
  }
  // ops::abort, the first time only; safe from any thread.
  void abort();
  bool aborted() const {
    return aborted_.load();
  }

 private:
  static constexpr int64_t kClosed = int64_t{1} << 40;
  void finalize();

  const std::shared_ptr<Bootstrap> store_;  // outlives the communicator, which may keep it
  const std::shared_ptr<Communicator> comm_;
  std::atomic<int64_t> users_{0};  // ops holding it, plus kClosed once closed
  std::atomic<bool> aborted_{false};
  std::atomic<bool> finalized_{false};
};

// The Options of a group created without pg_options: the defaults in
// ops.hpp, then the <NAME>_<FIELD> environment variables. Throws, naming the
// variable, when one does not parse as its field's type.
Options optionsFromEnvironment();

// ---------------------------------------------------------------------------
// The flight recorder (recorder.cpp): what a hang needs explained, on every torch.
//
// Every op is recorded from the moment it is issued, in a ring holding the
// last TORCH_FR_BUFFER_SIZE ops of the process (2000 by default; 0 turns it
// off), in the format of c10d's FlightRecorder, so that torch's analyser
// (torchfrtrace) reads its dumps: the group, the collective's number (the
// same on every rank), sizes, dtypes, state (scheduled, started, completed,
// failed, timed out) and times. When a collective fails past its deadline,
// its rank asks the others through the group's store which collective each
// reached, names in its error those that never entered it, and every rank of
// the group writes its record to TORCH_FR_DUMP_TEMP_FILE<global rank>
// (/tmp/nccl_trace_rank_<global rank> by default) unless TORCH_FR_DUMP_ON_TIMEOUT=0.

// A group as the record names it: c10d's pg_id, group name and description,
// and the global rank of each of its ranks.
struct RecordedGroup {
  uint64_t uid = 0;
  std::string name;
  std::string desc;
  std::vector<int64_t> ranks;
};

// The Python frames of an op's caller (torch's CapturedTraceback).
using Frames = std::shared_ptr<torch::CapturedTraceback>;
// Where the caller is in the program, for the record (null while the recorder is off).
// Takes the GIL for a moment: call it holding no lock.
Frames callersFrames();

// At the interpreter's exit, before it finalizes (Python's atexit, with the GIL
// released): waits for the dumps reading Python frames, and lets no more read
// them; groups destroyed from then on leave the store alone.
void atInterpreterExit();

// One op as it is recorded when issued.
struct OpRecord {
  const std::shared_ptr<const RecordedGroup>& group;
  const char* method;  // the c10d method's name, e.g. "allreduce"
  int rank;          // this rank in the group
  int peer;          // send and recv: the peer's group rank, -1 for any source
  bool p2p;
  // Numbered from 0 in the group, as in messages ("allreduce #4"):
  uint64_t collective;  // the collective's number; for a p2p op, the collectives before it
  uint64_t p2pNumber;   // the p2p op's number; for a collective, the p2p ops before it
  uint64_t op;          // the op's number
  std::chrono::milliseconds timeout;
  const c10::IValue& inputs;  // the tensors read; none: the op reads its outputs
  const c10::IValue& outputs;
  Frames frames;
};

// The name c10d's recorder and its analyser give the c10d method `op`.
const char* recordedName(const char* op);
// Records an op issued now; returns its record id, or -1 while the recorder is off.
int64_t recordOp(const OpRecord& op);
// The recorded op's body started.
void recordStarted(int64_t id);
// The recorded op finished: `state` is "completed", "failed" or "timed out";
// `error` says why it failed.
void recordFinished(int64_t id, const char* state, std::optional<float> durationMs, const std::string& error);
// The collective `number` of the group `groupUid` as this rank recorded it,
// e.g. "all_reduce of Float[4]"; empty when it is not (or no longer) recorded.
std::string recordedCollective(uint64_t groupUid, uint64_t number);
// This process's record, pickled as c10d's FlightRecorder dumps it.
std::string pickledRecord();
// Writes the record to TORCH_FR_DUMP_TEMP_FILE<globalRank>; returns the path.
std::string dumpRecord(int64_t globalRank);

// What the flight recorder, the hang watcher and c10d's completion hooks know
// of one group; shared by the backend and its ops.
class GroupMonitor : public std::enable_shared_from_this<GroupMonitor> {
 public:
  // `uid`: the group's pg_id in the flight recorder.
  GroupMonitor(std::shared_ptr<Group> group, std::shared_ptr<Bootstrap> store, uint64_t uid);
  // A monitor the process's watcher looks at once a second (stuck(), poll()).
  static std::shared_ptr<GroupMonitor> watched(
      std::shared_ptr<Group> group, std::shared_ptr<Bootstrap> store, uint64_t uid);

  // This rank entered (issued) `count` collectives of the group so far.
  void entered(uint64_t count) {
    entered_.store(count, std::memory_order_relaxed);
  }
  // An op of the group was issued; one finished (completed or failed).
  void issued() {
    outstanding_.fetch_add(1, std::memory_order_relaxed);
  }
  void finished() {
    finished_.fetch_add(1, std::memory_order_relaxed);
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
  }
  // From the watcher, once a second: whether an op of the group was under
  // way at this look and the last, and none finished in between. Only then
  // does the process talk to the store (poll()): a healthy group sends
  // nothing between its ops, and a process whose store's host exited first
  // has no request on its way to be refused.
  bool stuck();
  // For the collective `number`, failed here past its deadline: asks the
  // other ranks which collective each reached and what each entered as
  // `number`, and returns what they said, e.g. "rank 2 never entered it (its
  // last collective was #3)" or "rank 2 entered broadcast of Float[4] as #4,
  // where this rank entered all_reduce of Float[4]"; within a few seconds,
  // whatever the others do. Every rank of the group dumps its record.
  std::string explain(uint64_t number);
  // Dumps the record on another thread, where dumps on timeout are on.
  void dumpSoon() const;
  // From the watcher, while an op of the process is stuck: when a peer asked
  // (explain()), answers, and dumps.
  void poll();
  // At the group's destruction: takes its keys out of the store. With
  // collectives `underWay`, peers may be waiting for this rank: its answer
  // says instead that it destroyed the group, and stays for them to read.
  // Once the interpreter exits (atInterpreterExit), nothing: the store's host
  // may be gone, and TCPStore prints a backtrace for each request refused.
  void close(bool underWay);

  // c10d's completion hooks (torch 2.15): called with the op's completion key
  // and duration when an op completed successfully.
  using CompletionHook = std::function<void(uint64_t key, std::optional<float> durationMs)>;
  void addCompletionHook(int64_t id, CompletionHook hook);
  void removeCompletionHook(int64_t id);
  void completed(uint64_t key, std::optional<float> durationMs);

 private:
  // Says which collective this rank reached, and what it entered as `number`.
  void answer(uint64_t number);

  // A connection to the group's store of its own, opened on first use:
  // another thread may block the group's own for long (a wait for keys holds
  // a TCPStore's connection).
  c10d::Store& store();

  const std::shared_ptr<Group> group_;
  const std::shared_ptr<Bootstrap> bootstrap_;
  const uint64_t uid_;
  std::mutex storeMutex_;
  c10::intrusive_ptr<c10d::Store> store_;  // see store()
  std::atomic<uint64_t> entered_{0};    // the collectives this rank entered
  std::atomic<int64_t> outstanding_{0};  // ops issued and not finished
  std::atomic<uint64_t> finished_{0};    // ops finished
  bool wasOutstanding_ = false;          // what stuck() saw last (the watcher's own)
  uint64_t finishedBefore_ = 0;
  std::atomic<bool> answered_{false};   // its answer is in the store
  std::atomic<bool> asked_{false};      // this rank asked the others
  std::atomic<int> explaining_{0};      // explain() calls under way (its own dump follows)
  std::atomic<bool> closed_{false};
  std::mutex keysMutex_;  // this rank's keys are written (answer(), explain()) or deleted (close()) under it
  std::atomic<bool> hasHooks_{false};
  std::mutex hooksMutex_;
  std::vector<std::pair<int64_t, CompletionHook>> hooks_;
};


// A group: `globalRanks` empty for the default group (its ranks are global).
std::shared_ptr<Group> makeGroup(int rank, int size, const std::string& id, std::vector<int64_t> globalRanks);
// The group's communicator: ops::split from `parent` when there is one and it
// gives one, else ops::init. Runs on the caller's thread (group.cpp).
std::shared_ptr<Library> makeLibrary(
    const Group& group,
    const c10::intrusive_ptr<c10d::Store>& store,
    std::chrono::milliseconds timeout,
    const Options& options,
    bool isWorld,
    const std::shared_ptr<Library>& parent);

// How an op on accelerator tensors meets the streams around it, as NCCL's do:
// its body runs on the backend's stream once the caller's current stream has
// reached the call (`ready`), `done` marks its end there, and the caller's
// stream waits for `done` in wait(). Written against c10's device-generic
// Stream and Event, so it serves every device type with a registered
// DeviceGuardImpl (cuda, xpu, a PrivateUse1 device).
struct DeviceOp {
  explicit DeviceOp(c10::Stream stream)
      : stream(stream), ready(stream.device_type()), done(stream.device_type()) {}
  c10::Stream stream;
  c10::Event ready;
  c10::Event done;
};

// Runs a group's queued ops in order on one thread, started on first use
// (never at import time, so processes forked after `import` are safe), and
// polls its ops in flight. A backend has two: one for receives and one for
// every other op, so that a receive waiting for its sender never holds up the
// ops queued after it. The thread owns the queue's state, not the WorkQueue.
class WorkQueue {
 public:
  WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;
  ~WorkQueue();

  // Queues an op behind those queued before it; an op that started elsewhere
  // and is in flight, to be polled.
  // False once the queue is stopped: the op was not taken.
  bool push(const c10::intrusive_ptr<Work>& work);
  // Whether an op issued now would start at once: nothing queued, no body
  // running, no collective unfinished (kBodiesOnlyStart runs it here instead).
  bool idle() const;
  // Fails the queued ops, then gives the thread up to `grace` to see its ops
  // in flight give up (the group is aborted) and exit. Any thread but the
  // queue's own, more than once.
  void stop(std::chrono::milliseconds grace);

  struct State;
  // What its Works share with it.
  const std::shared_ptr<State>& state() const {
    return state_;
  }

 private:
  std::shared_ptr<State> state_;
};

// The Work handle torch.distributed returns for every op of this backend.
// Its life: queued, run (the body), in flight (done function polled), done.
// finish() is the one place it becomes done.
class Work : public c10d::Work {
 public:
  using Body = std::function<void(const OpContext&, Work&)>;

  Work(
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
      std::shared_ptr<DeviceOp> device);

  bool isCompleted() override {
    return done();
  }
  bool isSuccess() const override {
    return done() && !error_;
  }
  std::exception_ptr exception() const override {
    return done() ? error_ : nullptr;
  }
  int sourceRank() const override {
    TORCH_CHECK(sourceRank_ >= 0, describe(), ": sourceRank() is only known for a completed recv from any source");
    return sourceRank_;
  }
  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> tensors;
    collectTensors(outputs_, tensors);
    return tensors;
  }
  // Blocks until the op is done; with kBodiesOnlyStart, polls it meanwhile.
  // Every op is done by its deadline plus a grace (the Runtime fails it), so
  // this never blocks longer. A timeout given here only raises when it passes.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Fails the op now; a queued op never runs, a running one sees it cancelled.
  void abort() override {
    finish(backendError(describe() + ": aborted"));
  }
  // For accelerator tensors: makes the caller's current stream wait for the op.
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override {
    return seq_;
  }
  // How long a completed op took, in ms, from the start of its body.
  float getDuration() const override {
    TORCH_CHECK(isSuccess(), describe(), ": getDuration() is only known once the op completed successfully");
    return durationMs_;
  }
#if NEW_BACKEND_TORCH_2_14
  std::chrono::milliseconds getTimeout() const override {
    return timeout_;
  }
#endif
#if NEW_BACKEND_TORCH_2_15
  // What c10d's completion hooks call the op: never reused in the process.
  uint64_t getCompletionKey() const override {
    return completionKey_;
  }
#endif

  // Runs the body, unless the op is done already or may not start; completes
  // the op unless the body left it in flight.
  void run();
  // Polls an op in flight once; only one thread at a time, the others return
  // false at once. True once nothing is left to poll.
  bool tryPoll();
  // Completes the op with `error` (null for success); the first call counts.
  // The op is done once its future, if it has one, is completed too.
  void finish(std::exception_ptr error);
  // Fails an op its queue did not take (the group was destroyed) and polls
  // it on this thread until it gives up.
  void abandon();
  // Fails the op, past its deadline and grace (the Runtime and wait() do). A
  // body that honours ctx.expired() has failed by then with its own reason,
  // so the reason is on this rank: a body or done function that did not give
  // up, or, for an op that never started, the ops before it.
  void expire();

  bool done() const {
    return done_.load(std::memory_order_acquire);
  }
  bool inFlight() const {
    return inFlight_->load(std::memory_order_acquire);
  }
  // Whether a caller polls it in wait() (kBodiesOnlyStart): the worker leaves it.
  bool awaited() const {
    return waiters_.load(std::memory_order_acquire) > 0;
  }
  bool isCollective() const;
  // "Backend NAME (rank R): OP #SEQ", the start of every message about the op.
  std::string describe() const;
  // When the runtime stops waiting for the op: its deadline and a grace.
  Clock::time_point giveUpAt() const;

 private:
  friend class Backend;
  friend class Collectives;

  // The error of a body or done function that threw `error`.
  std::string failure(const std::exception_ptr& error) const;
  // Why the op must not start (null when it may).
  std::exception_ptr refusal() const;
  // Drops the done function (and what it holds), then the op's hold on the library.
  void release();
  // Makes the op done: wait() returns, isCompleted() is true.
  void publish();
  // Completes `future` as the op completed, on the op's stream.
  void settle(const c10::intrusive_ptr<c10::ivalue::Future>& future) const;
  std::optional<c10::Stream> stream() const {
    return device_ ? std::optional(device_->stream) : std::nullopt;
  }
  // Waits until done or `until`; returns done().
  bool await(Clock::time_point until);
  // `error`; or, for a collective whose body ran here and that failed past
  // its deadline, null: the group fails at once, and the Runtime finishes
  // the op with `error` and what the other ranks say of it (GroupMonitor::explain).
  std::exception_ptr explained(std::exception_ptr error);
  // Leaves the group unusable since the op failed with `error`.
  void failGroup(const std::exception_ptr& error) const;
  // How long the op took since its body started, in ms.
  float milliseconds() const;

  const std::shared_ptr<Group> group_;
  const std::shared_ptr<Health> health_;
  const std::shared_ptr<Library> library_;
  const std::shared_ptr<WorkQueue::State> queue_;
  const char* const op_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  const c10::IValue outputs_;
  const c10::IValue inputs_;  // kept alive until the op is done, as outputs_ are
  const std::shared_ptr<DeviceOp> device_;  // null for CPU ops
  Body body_;
  std::function<bool()> later_;  // OpContext::completeLater's; called under polling_
  uint64_t seq_ = 0;             // the op's number in the group (set when issued)
  uint64_t collective_ = 0;      // the collective's number, the same on every rank
  int sourceRank_ = -1;
  bool holdsLibrary_ = false;
  Clock::time_point started_;
  std::atomic<bool> cancelled_{false};
  // Shared with whoever waits for the op to leave flight without keeping it (deliverSends).
  const std::shared_ptr<std::atomic<bool>> inFlight_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> polling_{false};
  std::atomic<int> waiters_{0};
  std::atomic<bool> done_{false};
  std::shared_ptr<GroupMonitor> monitor_;  // set when issued
  int64_t record_ = -1;                    // its id in the flight recorder (-1: not recorded)
  uint64_t completionKey_ = 0;
  float durationMs_ = 0;  // written before done_ is set
  std::atomic<bool> bodyStarted_{false};
  std::atomic<bool> explaining_{false};  // explained() took the op's failure
  std::atomic<bool> explained_{false};   // ... and the other ranks answered
  std::exception_ptr error_;  // written before done_ is set
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made by the first getFuture()
};

// Fails `work` (Work::expire) once its giveUpAt() passed, unless it is done
// by then: every op is watched from the moment it is issued.
void watch(const c10::intrusive_ptr<Work>& work);

// c10d::Backend, saying it supports split_group where this torch asks through
// supportsSplitting(). Which torch asks is detected by the compiler, not by
// version: PyTorch's main branch folds the supportsX() virtuals into one
// capabilities() set, and an override of a virtual that is gone would not compile.
template <typename Base, typename = void>
class WithSplitting : public Base {
 public:
  using Base::Base;
};
template <typename Base>
class WithSplitting<Base, std::void_t<decltype(std::declval<const Base&>().supportsSplitting())>>
    : public Base {
 public:
  using Base::Base;
  bool supportsSplitting() const override {
    return true;
  }
};

class Backend : public WithSplitting<c10d::Backend> {
 public:
  Backend(
      std::shared_ptr<Group> group,
      std::shared_ptr<Library> library,
      NEW_BACKEND_NAMESPACE::Options options,
      std::chrono::milliseconds timeout);
  ~Backend() override;

  // The creator torch.distributed calls for each process group (extended API),
  // with the group's options (pg_options, else optionsFromEnvironment()).
  // Creates the communicator: ops::split from the default group when this
  // group is a subgroup of it and the user's split() gives one, else ops::init.
  static c10::intrusive_ptr<c10d::Backend> create(
      const c10d::DistributedBackendOptions& options,
      const NEW_BACKEND_NAMESPACE::Options& userOptions);

  // The options the group was created with.
  const NEW_BACKEND_NAMESPACE::Options& options() const {
    return options_;
  }

  const std::string getBackendName() const override {
    return NEW_BACKEND_NAME;
  }
  // Delivers the sends in flight (deliverSends), then fails the queued ops
  // and stops the queues; ops in flight give up. The communicator is
  // finalized once the last op lets go of it. Bounded in time (the sends get
  // 5 s at most; abort() does not wait for them), from any thread, an op's callback included.
  void shutdown() override;
  void abort() override;
  // The default timeout of the ops issued from now on.
  void setTimeout(std::chrono::milliseconds timeout) override {
    timeoutMs_.store(timeout.count());
  }

  // split_group: the child's communicator comes from ops::split, else
  // ops::init. c10d asks once per device type this backend serves, with the
  // same store and group name: the child made for the first is returned again.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;

  // The number of collectives issued so far on this rank, the same on every
  // rank (ProcessGroupWrapper checks it under TORCH_DISTRIBUTED_DEBUG=DETAIL).
  void setSequenceNumberForGroup() override {}  // every rank's count starts at 0
  uint64_t getSequenceNumberForGroup() override;
#if NEW_BACKEND_TORCH_2_15

  // c10d's flight recorder (FlightRecorderHook, attached to every group of a
  // backend that does not record itself) learns here when each op completed
  // and how long it took; failed ops report nothing, as c10d asks.
  bool supportsCompletionHooks() const override {
    return true;
  }
  void registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hookId) override;
#endif


 protected:
  // Where an op runs: its queue, or the caller's thread (sends).
  enum class Runs { kOnQueue, kOnReceives, kHere };

  // Numbers the op, records it, then runs or queues it, and returns its
  // Work. `op` is the c10d method's name; `inputs` holds the tensors the op
  // only reads; `peer` is a send's or recv's peer. Under torch.profiler, the
  // call is recorded as c10d's RECORD_PARAM_COMMS records NCCL's.
  c10::intrusive_ptr<c10d::Work> enqueue(
      Runs where,
      c10d::OpType type,
      const char* op,
      std::chrono::milliseconds timeout,
      c10::IValue outputs,
      const c10::IValue& inputs,
      Work::Body body,
      int peer = -1);
  c10::intrusive_ptr<c10d::Work> issue(
      Runs where,
      c10d::OpType type,
      const char* op,
      std::chrono::milliseconds timeout,
      c10::IValue outputs,
      const c10::IValue& inputs,
      Work::Body body,
      int peer);

  const std::shared_ptr<Group> group_;

 private:
  // The group as the flight recorder names it (made by the first op, once
  // c10d gave the group its name and description). Under issueMutex_.
  const std::shared_ptr<const RecordedGroup>& recordedGroup();

  // At destroy, while the group is usable: waits, asleep, for each send in
  // flight to complete or reach its deadline, 5 s in all at most (or the
  // group to fail or be aborted), so that posted sends are delivered as gloo's are.
  void deliverSends();

  // For an op on accelerator tensors: its stream and events. Null for CPU.
  std::shared_ptr<DeviceOp> deviceOp(const c10::IValue& outputs, const c10::IValue& inputs);

  const std::shared_ptr<Health> health_ = std::make_shared<Health>();
  const std::shared_ptr<Library> library_;
  const NEW_BACKEND_NAMESPACE::Options options_;
  std::atomic<int64_t> timeoutMs_;  // the default op timeout (setTimeout)
  std::mutex streamsMutex_;
  std::vector<c10::Stream> streams_;  // the backend's stream for each device it used
  // The last child split() made, and its store and name (see split()).
  std::mutex splitMutex_;
  const c10d::Store* lastSplitStore_ = nullptr;
  std::string lastSplitName_;
  std::optional<c10::weak_intrusive_ptr<c10d::Backend>> lastSplit_;
  // Ops are numbered and queued under issueMutex_, so that each queue runs
  // them in the order of their numbers, whichever threads issue them.
  std::mutex issueMutex_;
  uint64_t ops_ = 0;          // ops issued so far (each Work's sequence number)
  uint64_t collectives_ = 0;  // collectives issued so far
  std::shared_ptr<const RecordedGroup> recorded_;  // see recordedGroup()
  // The sends that were in flight when issued: whether each still is, and its deadline.
  std::vector<std::pair<std::shared_ptr<const std::atomic<bool>>, Clock::time_point>> sends_;
  size_t forgetSendsAt_ = 64;  // sends_'s size at which those no longer in flight go
  // The group's pg_id: groups are created in the same order on every rank.
  const uint64_t uid_;
  const std::shared_ptr<GroupMonitor> monitor_;
  WorkQueue queue_;     // every op but the receives
  WorkQueue receives_;  // recv and recvAnysource
};

} // namespace NEW_BACKEND_NAMESPACE

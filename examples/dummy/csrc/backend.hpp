// BackendDummy: a c10d::Backend registered with torch.distributed as "dummy".
//
// This is the plumbing every generated backend shares: argument checks, a work
// queue served by one background thread, WorkDummy objects with real
// state, timeouts, errors and shutdown. You should not need to edit it: the
// collectives themselves are in ops.cpp.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ops.hpp"

// torch 2.14 renamed several collectives (_allgather_base became
// all_gather_single, ...), kept the old names as deprecated aliases and added
// gather_single. The backend overrides the canonical names of the torch it is
// built against, and only the collectives that torch has.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)
#define DUMMY_TORCH_2_14 1
#else
#define DUMMY_TORCH_2_14 0
#endif

namespace dummy_collectives {

class WorkDummy;
struct CudaOp;

// Whether a process group can still be used on this rank. The first
// collective that fails or times out leaves the ranks disagreeing on which
// collective comes next, so from then on every op of the group fails at once,
// naming that collective, instead of pairing with the wrong data.
class Health {
 public:
  // Records the first failure; later ones change nothing.
  void fail(const std::string& what);
  // Null while the group is usable; after a failure, the error that refuses
  // the op `who` ("Backend NAME (rank R): OP #SEQ").
  std::exception_ptr refuse(const std::string& who) const;
  // Whether a failure was recorded.
  bool failed() const {
    return failed_.load(std::memory_order_acquire);
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

// Your library's communicator (ops.hpp) with its lifecycle: created by
// ops::init or ops::split with the group, aborted at most once (ops::abort),
// finalized once after the group's last op returned (ops::finalize).
class Library {
 public:
  Library(std::shared_ptr<Bootstrap> store, std::shared_ptr<Communicator> comm);

  Communicator& comm() const {
    return *comm_;
  }
  // ops::abort, the first time only; safe from any thread.
  void abort();
  // Whether abort() was called.
  bool aborted() const {
    return aborted_.load();
  }
  // ops::finalize, the first time only.
  void finalize();

  std::atomic<int> running{0};  // op bodies running now
  // How long the group's ops in flight took lately: a caller waiting for one
  // polls it, yielding, for about four times that (see WorkDummy::wait).
  std::atomic<int64_t> inFlightNs{200'000};

 private:
  const std::shared_ptr<Bootstrap> store_;  // outlives the communicator, which may keep it
  const std::shared_ptr<Communicator> comm_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> finalized_{false};
};

// The Options of a group created without pg_options: the defaults in
// ops.hpp, then the DUMMY_<FIELD> environment variables. Throws, naming the
// variable, when one does not parse as its field's type.
Options optionsFromEnvironment();

// Runs queued work in order on one background thread, started on first use
// (never at import time, so processes forked after `import` are safe). A
// backend has two: one for receives (recv, recvAnysource) and one for every
// other op, so that a receive waiting for its sender never holds up the ops
// queued after it.
//
// Ops in flight (OpContext::completeLater) are polled by the worker. Where op
// bodies only start their ops (kBodiesOnlyStart, the MPI implementation), a
// caller waiting for one in wait() polls it instead, while the worker steps
// aside; and an op the worker would start at once starts on the caller's
// thread instead, and is pushed in flight without waking the worker, which
// dozes while such ops come: a caller that waits for its op does all the
// work itself, as a blocking MPI call would.
//
// The thread owns the queue's state (a shared_ptr), not the WorkQueue: when
// the last reference to the backend is dropped from inside an op's callback,
// the WorkQueue is destroyed on its own thread, which then leaves the loop
// without touching freed memory.
class WorkQueue {
 public:
  WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;
  ~WorkQueue();

  // Queues `work` behind everything queued before it; an op that is
  // already in flight (started on the caller's thread) is polled until done.
  void push(const c10::intrusive_ptr<WorkDummy>& work);

  // Whether an op issued now may run its body on the caller's thread instead
  // (ops::kBodiesOnlyStart): no queued op waits to run, the worker is not
  // running a body, and no collective is in flight, so the op would start
  // right away on the worker too. The caller holds the backend's issue lock
  // until it has pushed the op (in flight) or found it complete.
  bool idle() const;
  // Registers `work`, issued to this queue (or, for a send, polled by it):
  // it counts among the unfinished collectives until it completes.
  void issue(WorkDummy& work);

  // Fails the work that has not started and waits up to `grace` for the
  // running op to return (it sees the group aborted). A thread still busy
  // after that is left behind with a warning: it owns what it uses. Safe from
  // any thread, the queue's own included, and more than once. Returns whether
  // no thread of the queue can still be running an op.
  bool stop(std::chrono::milliseconds grace);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// The Work handle torch.distributed returns for every op of this backend.
class WorkDummy : public c10d::Work {
 public:
  // What the backend queues: the op body, run on the worker thread.
  using Body = std::function<void(const OpContext&, WorkDummy&)>;

  WorkDummy(
      std::shared_ptr<Group> group,
      std::shared_ptr<Health> health,
      std::shared_ptr<Library> library,
      c10d::OpType type,
      const char* op,
      const char* profilingTitle,
      std::chrono::milliseconds timeout,
      c10::IValue outputs,
      Body body,
      std::shared_ptr<CudaOp> cuda);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  // Blocks until the op is done; while it is in flight (kBodiesOnlyStart),
  // this thread polls it (tryPoll). A timeout of zero means the op's own timeout
  // (the process group's unless the call gave one); when it passes, the op
  // fails and this raises a RuntimeError naming the backend, op, rank and
  // timeout. A shorter timeout given here only raises.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // Fails the op now; its body sees it cancelled.
  void abort() override;
  // For CUDA tensors: makes the caller's current stream wait for the op.
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;
#if DUMMY_TORCH_2_14
  std::chrono::milliseconds getTimeout() const override;
#endif

  // For recvAnysource: the group rank the message came from.
  void setSourceRank(int rank);

  // Runs the body (on the thread the op belongs to) and completes the future
  // unless the body completes it later (see inFlight()).
  void run();
  // Whether run() was called.
  bool ran() const {
    return ran_.load(std::memory_order_acquire);
  }
  // Whether the body returned before the op completed (OpContext::completeLater)
  // and nobody has seen it complete since.
  bool inFlight() const {
    return inFlight_.load(std::memory_order_acquire);
  }
  // Polls an op in flight once (its completeLater function), and completes
  // it when that says so. Any thread may call it: the worker, and a caller
  // waiting for the op; only one polls at a time, the others return false at
  // once. True once nothing is left to poll: the op completed or failed (and
  // is being finished), or it never went in flight.
  bool tryPoll();
  // Whether the op completed (or failed) and its future is set.
  bool done() const {
    return done_.load(std::memory_order_acquire);
  }
  // Whether a caller waiting for the op in wait() polls it itself while it is
  // in flight: where the ops' completeLater functions may run on any thread
  // (kBodiesOnlyStart), and someone waits.
  bool awaited() const {
    return kBodiesOnlyStart && waiters_.load(std::memory_order_acquire) > 0;
  }
  // After the worker ran the body: wakes a caller sleeping in wait() when the
  // op went in flight, so that it polls the op itself.
  void notifyInFlight();
  // Completes the op with `error` (nullptr for success). Only the first call
  // counts: an op that timed out in wait() stays failed when its body returns,
  // and a receive that completes after it failed fails the group.
  void finish(std::exception_ptr error);
  // "Backend NAME (rank R): OP #SEQ", the start of every message about the op.
  std::string describe() const;
  // Every op but send and receive.
  bool isCollective() const;

 private:
  friend class BackendDummy;
  friend class WorkQueue;

  // Waits until the op is done or `until` passed; returns done(). While the
  // op is in flight (kBodiesOnlyStart) this thread polls it itself (tryPoll),
  // yielding between polls for about four times as long as the group's ops
  // took lately, then between growing sleeps.
  bool await(std::chrono::steady_clock::time_point until);

  // Why the op must not start (null when it may): the group was destroyed or
  // can no longer be used, or the op's deadline passed while it was queued.
  std::exception_ptr refusal() const;

  const std::shared_ptr<Group> group_;
  const std::shared_ptr<Health> health_;
  const std::shared_ptr<Library> library_;
  const char* const op_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::steady_clock::time_point deadline_;
  const c10::IValue outputs_;
  Body body_;
  std::function<bool()> later_;  // set by OpContext::completeLater; called under polling_
  const std::shared_ptr<CudaOp> cuda_;  // null for CPU ops
  uint64_t seq_ = 0;         // the op's number in the group (set when issued)
  uint64_t collective_ = 0;  // the collective's number, the same on every rank
  int sourceRank_ = -1;
  std::atomic<bool> cancelled_{false};  // the body should give up
  std::atomic<bool> ran_{false};
  std::atomic<bool> inFlight_{false};  // later_ is set and has not returned true or thrown
  std::atomic<bool> polling_{false};   // a thread is in tryPoll() (calls later_)
  std::atomic<int> waiters_{0};        // callers in wait()
  std::chrono::steady_clock::time_point started_;  // when run() began
  std::shared_ptr<WorkQueue::State> queue_;  // the queue it was issued to (WorkQueue::issue)
  bool countedCollective_ = false;           // in queue_->unfinishedCollectives
  std::atomic<bool> finishing_{false};
  std::atomic<bool> done_{false};
  std::exception_ptr error_;  // written before done_ is set
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class BackendDummy : public c10d::Backend {
 public:
  BackendDummy(
      std::shared_ptr<Group> group,
      std::shared_ptr<Library> library,
      dummy_collectives::Options options,
      std::chrono::milliseconds timeout);
  ~BackendDummy() override;

  // The creator torch.distributed calls for each process group (extended API),
  // with the group's options (pg_options, else optionsFromEnvironment()).
  // Creates the communicator: ops::split from the default group when this
  // group is a subgroup of it and the user's split() gives one, else ops::init.
  static c10::intrusive_ptr<c10d::Backend> create(
      const c10d::DistributedBackendOptions& options,
      const dummy_collectives::Options& userOptions);

  // The options the group was created with.
  const dummy_collectives::Options& options() const {
    return options_;
  }

  const std::string getBackendName() const override;
  // Fails the ops not started yet and stops the worker threads. Called by
  // destroy_process_group(), abort() and the destructor; returns within a
  // bounded time even while an op body is stuck in a library call.
  void shutdown() override;
  void abort() override;
  // The default timeout of the ops issued from now on.
  void setTimeout(std::chrono::milliseconds timeout) override;

  // split_group (c10d's split path, taken where the default group has a
  // device bound): the child's communicator comes from ops::split, else ops::init.
  // c10d's ProcessGroup::splitGroup asks once per device type this backend
  // serves (cpu, then cuda), with the same store and group name: the child made
  // for the first is returned again, as create() makes one backend for all
  // devices (two children would publish their bootstrap keys over each other).
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;

  // The number of collectives (every op but send and receive) issued so far
  // on this rank, the same on every rank of a group that issues them in the
  // same order. TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every backend in a
  // ProcessGroupWrapper, which calls these to check that ranks agree on the
  // collective they run; the count starts at 0 in every new group.
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // The collectives of this backend. torch.distributed raises
  // "Backend dummy does not support <op>" for every other one.
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override;

 private:
  // Numbers the op, then runs it on `queue`, or on the caller's thread when
  // `queue` is null, and returns its Work. `inputs` holds the tensors the op
  // reads but does not write (None when it works in place).
  c10::intrusive_ptr<c10d::Work> enqueue(
      WorkQueue* queue,
      c10d::OpType type,
      const char* op,
      const char* profilingTitle,
      std::chrono::milliseconds timeout,
      c10::IValue outputs,
      const c10::IValue& inputs,
      WorkDummy::Body body);

  // For an op on CUDA tensors: how it meets the caller's stream. Null for CPU.
  std::shared_ptr<CudaOp> cudaOp(const c10::IValue& outputs, const c10::IValue& inputs);

  const std::shared_ptr<Group> group_;
  const std::shared_ptr<Health> health_ = std::make_shared<Health>();
  const std::shared_ptr<Library> library_;
  const dummy_collectives::Options options_;
  std::atomic<int64_t> timeoutMs_;  // the default op timeout (setTimeout)
  std::mutex streamsMutex_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;  // the backend's CUDA stream per device
  // The last child split() made, and its store and name (see split()).
  std::mutex splitMutex_;
  const c10d::Store* lastSplitStore_ = nullptr;
  std::string lastSplitName_;
  std::optional<c10::weak_intrusive_ptr<c10d::Backend>> lastSplit_;
  // Ops are numbered and queued under issueMutex_, so that each queue runs
  // them in the order of their numbers, whichever threads issue them.
  std::mutex issueMutex_;
  uint64_t ops_ = 0;          // ops issued so far (each Work's sequence number)
  uint64_t collectives_ = 0;  // collectives issued so far (see getSequenceNumberForGroup)
  WorkQueue queue_;     // every op but the receives and sends
  WorkQueue receives_;  // recv and recvAnysource (the catalogue's queue = "receives")
};

} // namespace dummy_collectives

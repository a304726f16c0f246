// The runtime's queue, Work and teardown under ThreadSanitizer, without Python.
//
// Compiled together with a generated store project's csrc/ (named "san_store",
// so its backend is san_store_collectives::Backend) by
// test_sanitizers.py. The ranks of each group are backends in this one
// process, over one in-process c10d::HashStore, each driven by threads of its
// own, so every thread the runtime starts runs under ThreadSanitizer. It
// mirrors the generated concurrency tests: 8 threads issuing ops while some
// fail, destroy from a future's callback, abort() and shutdown() at once, and
// adds a Work that times out in wait() while its body fails on the worker.
// Then the runtime's guarantees, each case failing on a plausible bug: a done
// function that never gives up is failed and dropped by the Runtime; an
// aborted queued op never runs; callbacks may issue ops and wait for them;
// a receive's callback may destroy the group while another receive is in
// flight. test_sanitizers.py also builds it with kBodiesOnlyStart = true.
#include <ATen/ops/full.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend.hpp"

namespace {

using Backend = san_store_collectives::Backend;
using Work = san_store_collectives::Work;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
constexpr int kWorld = 3;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cout << std::flush;
    std::cerr << "FAILED: " << what << std::endl;
    std::_Exit(1);  // at once, from any thread: std::exit would race the others
  }
}

// The ranks of one group, over a store of their own.
std::vector<c10::intrusive_ptr<Backend>> group(const std::string& id, std::chrono::seconds timeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<c10::intrusive_ptr<Backend>> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    c10d::DistributedBackendOptions options{store, rank, kWorld, timeout, id, {}};
    // The creator torch.distributed calls, with the default options.
    ranks.push_back(c10::static_intrusive_pointer_cast<Backend>(
        Backend::create(options, san_store_collectives::Options{})));
  }
  return ranks;
}

// A thread running fn; an exception escaping it fails the test with its
// message (a bare std::thread would call std::terminate and lose it).
std::thread spawn(std::function<void()> fn) {
  return std::thread([fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      check(false, std::string("unexpected error: ") + e.what());
    }
  });
}

// Runs fn(rank) for every rank, each on a thread of its own.
void onEachRank(const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.push_back(spawn([&fn, rank] { fn(rank); }));
  }
  for (auto& thread : threads) {
    thread.join();
  }
}

// Whether `fn` throws an error that names the backend.
bool raisesBackendError(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return std::string(e.what()).find("Backend san_store") != std::string::npos;
  }
  return false;
}

float allreduced(Backend& backend, float value) {
  std::vector<at::Tensor> tensors{at::full({4}, value)};
  backend.allreduce(tensors, c10d::AllreduceOptions())->wait();
  return tensors[0][3].item<float>();
}

// Per rank, 8 threads at once: 4 all-reduce (the sum does not depend on how
// the ranks' concurrent calls pair up), 2 issue ops that fail their checks on
// the calling thread, 2 pass messages around the ring on tags of their own.
void eightThreadsWhileSomeFail() {
  auto ranks = group("threads", std::chrono::seconds(60));
  onEachRank([&](int rank) {
    Backend& backend = *ranks[rank];
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.push_back(spawn([&] {
        for (int i = 0; i < 5; ++i) {
          failures += allreduced(backend, 1.0F) != kWorld;
        }
      }));
    }
    for (int k = 0; k < 2; ++k) {
      threads.push_back(spawn([&] {
        for (int i = 0; i < 5; ++i) {
          std::vector<at::Tensor> sparse{at::full({2, 2}, 1.0F).to_sparse()};
          failures += !raisesBackendError([&] { backend.allreduce(sparse, c10d::AllreduceOptions())->wait(); });
        }
      }));
    }
    for (int tag = 30; tag < 32; ++tag) {
      threads.push_back(spawn([&, tag] {
        for (int i = 0; i < 5; ++i) {
          std::vector<at::Tensor> out{at::full({3}, -1.0F)};
          std::vector<at::Tensor> in{at::full({3}, float(rank * 100 + tag + i))};
          auto sent = backend.send(in, (rank + 1) % kWorld, tag);
          backend.recv(out, (rank + kWorld - 1) % kWorld, tag)->wait();
          sent->wait();
          failures += out[0][2].item<float>() != float(((rank + kWorld - 1) % kWorld) * 100 + tag + i);
        }
      }));
    }
    for (auto& thread : threads) {
      thread.join();
    }
    check(failures == 0, "rank " + std::to_string(rank) + ": wrong results or missing errors");
  });
}

// The last reference to each rank's backend is dropped in its op's callback,
// on whichever thread completes the op: usually the backend's own worker.
void destroyFromACallback() {
  auto ranks = group("callback", std::chrono::seconds(60));
  onEachRank([&](int rank) {
    c10::intrusive_ptr<Backend> backend = std::move(ranks[rank]);
    std::vector<at::Tensor> tensors{at::full({4}, 1.0F)};
    auto future = backend->allreduce(tensors, c10d::AllreduceOptions())->getFuture();
    future->addCallback([held = std::move(backend)](c10::ivalue::Future&) mutable { held.reset(); });
    future->wait();
    check(tensors[0][0].item<float>() == kWorld, "destroy from a callback: wrong sum");
  });
}

// abort() and shutdown() of one backend at once, while an op waits for peers
// that never come; then the other ranks are destroyed too.
void abortAndShutdownAtOnce() {
  auto ranks = group("abort", std::chrono::seconds(60));
  // Issued on a thread of its own: with kBodiesOnlyStart the store's body
  // runs on the caller's thread, and blocks it until the abort.
  c10::intrusive_ptr<c10d::Work> pending;
  std::thread issuing = spawn([&] {
    std::vector<at::Tensor> tensors{at::full({4}, 1.0F)};
    pending = ranks[0]->allreduce(tensors, c10d::AllreduceOptions());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  std::thread aborting = spawn([&] { ranks[0]->abort(); });
  std::thread shutting = spawn([&] { ranks[0]->shutdown(); });
  aborting.join();
  shutting.join();
  issuing.join();
  check(Clock::now() - start < std::chrono::seconds(10), "abort()/shutdown() took too long");
  check(raisesBackendError([&] { pending->wait(); }), "the pending op did not fail");
  onEachRank([&](int rank) { ranks[rank]->shutdown(); });
}

// One rank's op times out: wait() fails it on the caller's thread while its
// body fails on the worker, and another thread aborts it at the same time.
// Then the group refuses every op, on any thread.
void timeoutRacesTheWorker() {
  auto ranks = group("timeout", std::chrono::seconds(1));
  std::vector<at::Tensor> tensors{at::full({4}, 1.0F)};
  auto work = ranks[0]->allreduce(tensors, c10d::AllreduceOptions());
  std::thread aborting = spawn([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    work->abort();
  });
  check(raisesBackendError([&] { work->wait(); }), "the lone op did not fail");
  aborting.join();
  check(work->isCompleted() && !work->isSuccess() && work->exception(), "the failed op's state");
  std::vector<std::thread> threads;
  std::atomic<int> accepted{0};
  for (int k = 0; k < 4; ++k) {
    threads.push_back(spawn([&] {
      std::vector<at::Tensor> more{at::full({4}, 1.0F)};
      accepted += !raisesBackendError([&] { ranks[0]->allreduce(more, c10d::AllreduceOptions())->wait(); });
    }));
  }
  for (auto& thread : threads) {
    thread.join();
  }
  check(accepted == 0, "an unusable group accepted an op");
  onEachRank([&](int rank) { ranks[rank]->shutdown(); });
}

// One rank's runtime without a Backend: a group of one over a HashStore, its
// library, and one WorkQueue that Works built here are pushed to.
struct Lone {
  std::shared_ptr<san_store_collectives::Group> group = san_store_collectives::makeGroup(0, 1, "lone", {});
  std::shared_ptr<san_store_collectives::Library> library = san_store_collectives::makeLibrary(
      *group, c10::make_intrusive<c10d::HashStore>(), Ms(10000), san_store_collectives::Options{}, false,
      nullptr);
  san_store_collectives::WorkQueue queue;

  // A Work of `type` running `body`; each has a Health of its own, so that
  // one failing does not make the next refuse to run.
  c10::intrusive_ptr<Work> make(c10d::OpType type, Ms timeout, Work::Body body) {
    auto work = c10::make_intrusive<Work>(
        group, std::make_shared<san_store_collectives::Health>(), library, queue.state(), type, "lone",
        "san_store:lone", timeout, c10::IValue(), c10::IValue(), std::move(body), nullptr);
    san_store_collectives::watch(work);
    return work;
  }
};

std::string errorOf(Work& work) {
  try {
    std::rethrow_exception(work.exception());
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A collective whose done function never gives up (it ignores expired()):
// the Runtime fails it about 1 s past its deadline without anyone waiting,
// the queue's thread then drops it, so the collective queued behind it runs,
// and the dropped op let go of the library. Fails if watch() or the Runtime
// never expires it, if the queue keeps polling a failed op (the next
// collective never runs), or if dropping it keeps its hold on the library.
void aDoneFunctionThatNeverGivesUp() {
  Lone lone;
  const auto start = Clock::now();
  auto stuck = lone.make(c10d::OpType::ALLREDUCE, Ms(300), [](const san_store_collectives::OpContext& ctx, Work&) {
    ctx.completeLater([] { return false; });
  });
  std::atomic<bool> ran{false};
  Clock::time_point ranAt;
  auto next = lone.make(c10d::OpType::ALLREDUCE, Ms(20000), [&](const san_store_collectives::OpContext&, Work&) {
    ranAt = Clock::now();
    ran = true;
  });
  lone.queue.push(stuck);
  lone.queue.push(next);
  while (!stuck->isCompleted() && Clock::now() - start < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(Ms(10));  // no wait(): wait() would expire it itself
  }
  const auto failedAfter = Clock::now() - start;
  check(stuck->isCompleted() && !stuck->isSuccess(), "the stuck op was never failed");
  check(failedAfter < Ms(300 + 1000 + 1500), "the stuck op failed late");
  check(errorOf(*stuck).find("within its 300 ms timeout") != std::string::npos,
        "the stuck op's error does not name its timeout: " + errorOf(*stuck));
  // The cause is on this rank, and the error says so (not "a peer may have failed").
  check(errorOf(*stuck).find("on this rank, ops::lone's done function (OpContext::completeLater) did not give "
                             "up at the deadline") != std::string::npos,
        "the stuck op's error does not name its done function: " + errorOf(*stuck));
  next->wait();
  check(ran && ranAt - start >= Ms(300 + 1000), "the next collective did not run, or ran before the stuck one was dropped");
  lone.queue.stop(Ms(5000));
  lone.library->close();
  check(!lone.library->busy(), "the dropped op still holds the library");
}

// abort() of an op queued behind one that blocks until released: its body
// never runs (fails if run() does not check that the op was aborted).
void abortAQueuedOp() {
  Lone lone;
  std::atomic<bool> release{false};
  std::atomic<bool> blocking{false};
  std::atomic<bool> ran{false};
  auto first = lone.make(c10d::OpType::SEND, Ms(20000), [&](const san_store_collectives::OpContext&, Work&) {
    blocking = true;
    while (!release) {
      std::this_thread::sleep_for(Ms(1));
    }
  });
  auto queued = lone.make(c10d::OpType::SEND, Ms(20000), [&](const san_store_collectives::OpContext&, Work&) {
    ran = true;
  });
  lone.queue.push(first);
  lone.queue.push(queued);
  while (!blocking) {
    std::this_thread::sleep_for(Ms(1));
  }
  queued->abort();
  release = true;
  first->wait();
  check(raisesBackendError([&] { queued->wait(); }), "the aborted op did not fail");
  check(errorOf(*queued).find("aborted") != std::string::npos, "the aborted op's error: " + errorOf(*queued));
  lone.queue.stop(Ms(5000));  // the queue's thread is done with it
  check(!ran, "the aborted op's body ran");
  lone.library->close();
}

// all_reduce(level) whose future's callback issues the next level's all_reduce
// on the same backend and waits for it, `kLevels` deep. Counts correct sums.
constexpr int kLevels = 3;
void nested(Backend& backend, int level, std::atomic<int>& correct) {
  std::vector<at::Tensor> tensors{at::full({4}, float(level))};
  auto work = backend.allreduce(tensors, c10d::AllreduceOptions());
  work->getFuture()->addCallback([&backend, level, &correct, tensors](c10::ivalue::Future& future) {
    check(!future.hasError(), "level " + std::to_string(level) + " failed");
    correct += tensors[0][0].item<float>() == float(kWorld * level);
    if (level < kLevels) {
      nested(backend, level + 1, correct);
    }
  });
  work->wait();  // returns once the callback ran, so once every deeper level completed
}

// Every rank at once: a callback waiting for an op whose callback waits for
// another. Fails (a deadlock, then timeouts) if callbacks ran on a queue's
// thread or the Runtime had no idle thread left for the deeper futures.
void callbacksIssueOpsAndWait() {
  auto ranks = group("nested", std::chrono::seconds(20));
  onEachRank([&](int rank) {
    std::atomic<int> correct{0};
    nested(*ranks[rank], 1, correct);
    check(correct == kLevels, "rank " + std::to_string(rank) + ": wrong sums in nested callbacks");
  });
  onEachRank([&](int rank) { ranks[rank]->shutdown(); });
}

// Rank 0 destroys its group from the callback of a receive while another of
// its receives (from a rank that never sends) is in flight: that receive
// fails, promptly, and the teardown from a Runtime thread races nothing.
void destroyFromAReceiveCallback() {
  auto ranks = group("recv-callback", std::chrono::seconds(20));
  Backend* zero = ranks[0].get();
  std::vector<at::Tensor> first{at::full({3}, -1.0F)};
  std::vector<at::Tensor> other{at::full({3}, -1.0F)};
  auto waiting = zero->recv(other, 2, 8);
  auto received = zero->recv(first, 1, 7);
  std::atomic<bool> destroyed{false};
  received->getFuture()->addCallback([zero, &destroyed](c10::ivalue::Future&) {
    zero->shutdown();
    destroyed = true;
  });
  std::vector<at::Tensor> message{at::full({3}, 5.0F)};
  ranks[1]->send(message, 0, 7)->wait();
  const auto start = Clock::now();
  received->wait();
  check(first[0][1].item<float>() == 5.0F, "the first receive's data");
  check(raisesBackendError([&] { waiting->wait(); }), "the other receive did not fail");
  check(Clock::now() - start < std::chrono::seconds(10), "the other receive failed late");
  while (!destroyed) {
    std::this_thread::sleep_for(Ms(1));
  }
  onEachRank([&](int rank) { ranks[rank]->shutdown(); });
}

} // namespace

// With an argument, runs only the cases whose names contain it.
int main(int argc, char** argv) {
  // A case that hangs fails instead, naming itself.
  std::atomic<const char*> current{nullptr};
  std::atomic<int64_t> startedMs{0};
  std::thread([&] {
    for (;;) {
      std::this_thread::sleep_for(Ms(500));
      const int64_t began = startedMs.load();
      const int64_t now = std::chrono::duration_cast<Ms>(Clock::now().time_since_epoch()).count();
      if (began != 0 && now - began > 120000) {
        check(false, std::string("hangs: ") + current.load());
      }
    }
  }).detach();
  const std::vector<std::pair<const char*, void (*)()>> cases{
      {"eight threads while some fail", eightThreadsWhileSomeFail},
      {"destroy from a callback", destroyFromACallback},
      {"abort and shutdown at once", abortAndShutdownAtOnce},
      {"a timeout races the worker", timeoutRacesTheWorker},
      {"a done function that never gives up", aDoneFunctionThatNeverGivesUp},
      {"abort a queued op", abortAQueuedOp},
      {"callbacks issue ops and wait", callbacksIssueOpsAndWait},
      {"destroy from a receive's callback", destroyFromAReceiveCallback},
  };
  std::cout << "cases: " << cases.size() << (san_store_collectives::kBodiesOnlyStart ? " (kBodiesOnlyStart)" : "")
            << std::endl;
  for (const auto& [name, run] : cases) {
    if (argc > 1 && std::string(name).find(argv[1]) == std::string::npos) {
      continue;
    }
    const auto start = Clock::now();
    current = name;
    startedMs = std::chrono::duration_cast<Ms>(start.time_since_epoch()).count();
    try {
      run();
    } catch (const std::exception& e) {
      check(false, std::string(name) + ": unexpected error: " + e.what());
    }
    startedMs = 0;
    const auto ms = std::chrono::duration_cast<Ms>(Clock::now() - start);
    std::cout << "passed: " << name << " (" << ms.count() << " ms)" << std::endl;
  }
  return 0;
}

// The runtime's queue, Work and teardown under ThreadSanitizer, without Python.
//
// Compiled together with a generated store project's csrc/ (named "san_store",
// so its backend is san_store_collectives::BackendSanStore) by
// test_sanitizers.py. The ranks of each group are backends in this one
// process, over one in-process c10d::HashStore, each driven by threads of its
// own, so every thread the runtime starts runs under ThreadSanitizer. It
// mirrors the generated concurrency tests: 8 threads issuing ops while some
// fail, destroy from a future's callback, abort() and shutdown() at once, and
// adds a Work that times out in wait() while its body fails on the worker.
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

#include "backend.hpp"

namespace {

using Backend = san_store_collectives::BackendSanStore;
using Clock = std::chrono::steady_clock;
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
  std::vector<at::Tensor> tensors{at::full({4}, 1.0F)};
  auto pending = ranks[0]->allreduce(tensors, c10d::AllreduceOptions());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  std::thread aborting = spawn([&] { ranks[0]->abort(); });
  std::thread shutting = spawn([&] { ranks[0]->shutdown(); });
  aborting.join();
  shutting.join();
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

} // namespace

int main() {
  const std::vector<std::pair<const char*, void (*)()>> cases{
      {"eight threads while some fail", eightThreadsWhileSomeFail},
      {"destroy from a callback", destroyFromACallback},
      {"abort and shutdown at once", abortAndShutdownAtOnce},
      {"a timeout races the worker", timeoutRacesTheWorker},
  };
  for (const auto& [name, run] : cases) {
    const auto start = Clock::now();
    run();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    std::cout << "passed: " << name << " (" << ms.count() << " ms)" << std::endl;
  }
  return 0;
}

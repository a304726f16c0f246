// What the runtime (backend.cpp) hands to the code in ops.cpp, and to the
// transports it uses: the group, one op's context, and the lifecycle hooks'
// view of a new group. ops.hpp includes it.
//
// Like ops.hpp this header includes nothing from c10d, only <ATen/core/Tensor.h>.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config.hpp"

namespace c10d {
class Store;
} // namespace c10d

namespace NEW_BACKEND_NAMESPACE {

// Defined in ops.hpp, by you: the group's options, and your library's state
// for one group (its communicator).
struct Options;
struct Communicator;
class Health;

// The reduction of a reducing collective: c10d::ReduceOp without its headers.
enum class Reduction { kSum, kAvg, kProduct, kMin, kMax, kBand, kBor, kBxor };

// The name torch.distributed gives a reduction ("SUM", "AVG", ...).
inline const char* reductionName(Reduction op) {
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

// The process group an op runs in. The backend creates one and shares it with
// every op it runs; only `aborted` ever changes.
struct Group {
  std::string backend;               // the name registered with torch.distributed
  int rank = 0;                      // this process's rank in the group
  int size = 1;                      // number of ranks in the group
  std::vector<int64_t> globalRanks;  // global rank of each rank of the group
  std::string id;                    // torch.distributed's name for the group
  std::atomic<bool> aborted{false};  // set when the group is destroyed
};

// One op, as its body sees it.
struct OpContext {
  const Group& group;
  Communicator& comm;  // what ops::init (or ops::split) returned for the group
  const char* op;      // the op's name, e.g. "allreduce"
  uint64_t seq;        // the op's number among this group's ops on this rank
  // For a collective: its number among the group's collectives, the same on
  // every rank (ranks issue a group's collectives in the same order). Use it
  // to tell collectives apart on the wire.
  uint64_t collective;
  std::chrono::steady_clock::time_point deadline;  // give up after this
  std::chrono::milliseconds timeout;               // the op's timeout
  const std::atomic<bool>& cancelled;              // the op was failed or aborted

  // True once the op should give up: its deadline passed, it was cancelled,
  // or the group was destroyed. Check it while waiting for peers.
  bool expired() const {
    return cancelled.load(std::memory_order_relaxed) ||
        group.aborted.load(std::memory_order_relaxed) ||
        std::chrono::steady_clock::now() > deadline;
  }

  // For a body that returns before its communication is done: the op
  // completes when `done` returns true, or fails when it throws. See
  // "Completing later" in ops.hpp: `done` is cheap, never blocks, owns what
  // it uses and gives up once expired().
  void completeLater(std::function<bool()> done) const {
    *later = std::move(done);
  }

  std::function<bool()>* later;  // where completeLater() leaves `done`
  // For recvAnysource completed later: where its sender's group rank goes once
  // the message arrived (the body itself returns -1, not known yet).
  int* source;

  // Leaves the group unusable: every later op fails at once, naming `why`.
  // For a failure after which the ranks no longer agree on what comes next;
  // the plumbing does it itself for every collective that fails.
  void failGroup(const std::string& why) const;
  Health& health;
};

// The group's c10d Store, for bootstrapping a library: exchanging a unique
// id or addresses, NCCL-style, when the group is created. Keys are scoped to
// the group (two groups never see each other's keys). Values are bytes.
// It lives as long as the group; calls from several threads are safe.
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits up to the group's timeout for `key`, then returns its value.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  // Whether every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits up to the group's timeout until every key exists.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  // Adds `delta` to the counter `key` (0 if new); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual void deleteKey(const std::string& key) = 0;
  // The c10d Store itself, for a transport built on it (as store_exchange is).
  virtual c10::intrusive_ptr<c10d::Store> c10dStore() = 0;
};

// What ops::init and ops::split see of the new group.
struct GroupInfo {
  std::string backend;               // the name registered with torch.distributed
  int rank;                          // this process's rank in the group
  int size;                          // number of ranks in the group
  std::vector<int64_t> globalRanks;  // global rank of each rank of the group
  std::string name;                  // torch.distributed's name for the group
  std::chrono::milliseconds timeout;  // the group's default op timeout
  const Options& options;             // pg_options, else the <NAME>_* environment variables
  Bootstrap& store;                   // the group's store, scoped to the group
  bool world;  // the default group (init_process_group's): every process, in rank order
};

} // namespace NEW_BACKEND_NAMESPACE

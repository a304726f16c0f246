{%- set p = project() -%}
// The interface between the backend's plumbing and its collectives.
//
// backend.cpp checks every call on the caller's thread, queues it, and runs it
// on the backend's worker thread by calling one of the functions declared
// here. ops.cpp defines them: that is where your library's calls go.
//
// This header includes nothing from c10d, only <ATen/core/Tensor.h>, so ops.cpp
// rebuilds in seconds and does not change when c10d's Backend class does.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstdint>
{%- if p.impl == "mpi" %}
#include <functional>
{%- endif %}
#include <memory>
#include <string>
#include <vector>
{%- if p.impl == "store" %}

#include "store_exchange.hpp"
{%- elif p.impl == "mpi" %}

#include "mpi_comm.hpp"
{%- elif p.impl == "ucx" %}

#include "ucx_comm.hpp"
{%- endif %}

namespace {{ p.package }} {

// The reduction of a reducing collective: c10d::ReduceOp without its headers.
enum class Reduction { kSum, kAvg, kProduct, kMin, kMax, kBand, kBor, kBxor };

// The name torch.distributed gives a reduction ("SUM", "AVG", ...).
const char* reductionName(Reduction op);

// The process group an op runs in. The backend creates one and shares it with
// every op it runs; only `aborted` ever changes.
struct Group {
  std::string backend;               // the name registered with torch.distributed
  int rank = 0;                      // this process's rank in the group
  int size = 1;                      // number of ranks in the group
  std::vector<int64_t> globalRanks;  // global rank of each rank of the group
  std::string id;                    // torch.distributed's name for the group
  std::atomic<bool> aborted{false};  // set when the group is destroyed
{%- if p.impl == "store" %}
  // Moves tensors between the ranks through the group's c10d Store.
  std::shared_ptr<StoreExchange> exchange;
{%- elif p.impl == "mpi" %}
  // The group's MPI communicator (see mpi_comm.hpp).
  std::shared_ptr<MpiComm> comm;
{%- elif p.impl == "ucx" %}
  // The group's UCX worker and endpoints (see ucx_comm.hpp).
  std::shared_ptr<UcxComm> comm;
{%- endif %}
};

// One op, as its body sees it.
struct OpContext {
  const Group& group;
  const char* op;  // the op's name, e.g. "allreduce"
  uint64_t seq;    // the op's number among this group's ops on this rank
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
{%- if p.impl == "mpi" %}

  // For a body that returns before its communication is done: the op
  // completes when `done` returns true (or fails when it throws). The worker
  // thread calls `done` between the group's later ops, so they overlap; `done`
  // must give up itself when expired().
  void completeLater(std::function<bool()> done) const {
    *later = std::move(done);
  }

  std::function<bool()>* later;  // where completeLater() leaves `done`
{%- endif %}
};

// The element types and reductions this backend handles. They are checked on
// the caller's thread before an op is queued, so a bad call fails at once.
bool supportsDtype(c10::ScalarType dtype);
bool supportsReduction(Reduction op, c10::ScalarType dtype);

// The collectives. Each runs on the backend's worker thread, one at a time, in
// the order they were called, after the plumbing checked its arguments: ranks
// are ranks of the group and in range, and tensor counts, dtypes and sizes
// match what the op needs on this rank. Throw (TORCH_CHECK) to fail the op;
// the message reaches the caller as a RuntimeError naming the backend and op.
// After a collective failed, the plumbing fails every later op of the group
// without calling its body.
//
// Point-to-point ops are the exceptions. A send runs on the caller's thread,
// as gloo and MPI post it, so it never waits behind queued collectives: it
// must post the message and return. Receives (recv, recvAnysource) run, in
// the order they were called, on a second worker thread, at the same time as
// the other ops: a receive waits for its sender, and a rank may post it before
// its own send (irecv then isend, as batch_isend_irecv does). So send and
// receive bodies must be safe to run alongside any other op body.
namespace ops {
{% for op in p.ops %}
// {{ op.summary }}{{ " (runs on the receive thread)" if op.on_receive_queue }}{{ " (runs on the caller's thread)" if op.on_caller_thread }}
{{ op.returns }} {{ op.name }}(const OpContext& ctx{{ ", " ~ op.body if op.body }});
{% endfor %}
} // namespace ops
} // namespace {{ p.package }}

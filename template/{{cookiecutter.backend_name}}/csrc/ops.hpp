{%- set p = project() -%}
// The interface between the backend's plumbing and its collectives.
//
// collectives.hpp checks every call on the caller's thread and queues it; the
// runtime (runtime/, vendored) runs it on the backend's worker thread by
// calling one of the functions declared here. ops.cpp defines them: that is
// where your library's calls go. Your
// library's state per group (Communicator), its Options and the lifecycle of
// a group (init, split, finalize, abort) are here too.
//
// This header includes nothing from c10d, only <ATen/core/Tensor.h>, so ops.cpp
// rebuilds in seconds and does not change when c10d's Backend class does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/context.hpp"
{%- if p.impl == "store" %}
#include "runtime/store_exchange.hpp"
{%- elif p.impl == "mpi" %}
#include "runtime/mpi_comm.hpp"
{%- elif p.impl == "ucx" %}

#include "runtime/ucx_comm.hpp"
{%- endif %}

namespace {{ p.package }} {

// The options of a group: your library's settings, typed. Python passes them
// as init_process_group("{{ p.name }}", pg_options={{ p.package }}.Options(verbose=True))
// (or new_group(..., pg_options=...)); a field not given there takes its value
// from the environment variable {{ p.macro }}_<FIELD> ({{ p.macro }}_VERBOSE=1), else its
// default here. Fields may be bool, int64_t, double or std::string.
struct Options {
  // An example: init reports each group it creates on stderr.
  bool verbose = false;
};

// The fields Python and the environment may set, with their docs. List each
// field of Options here: field("name", &Options::name, "what it does").
template <typename Field>
void describeOptions(Field&& field) {
  field("verbose", &Options::verbose, "report each group created on stderr");
}

// Your library's state for one group, its communicator: ops::init creates
// it when the group is created, every op body reaches it as ctx.comm, and
// ops::finalize closes it when the group is destroyed.
struct Communicator {
  Options options;  // the group's options
{%- if p.impl == "store" %}
  // Moves tensors between the ranks through the group's c10d Store.
  std::shared_ptr<StoreExchange> exchange;
{%- elif p.impl == "mpi" %}
  // The group's MPI communicator (see mpi_comm.hpp); ops in flight share it.
  std::shared_ptr<MpiComm> mpi;
{%- elif p.impl == "ucx" %}
  // The group's UCX worker and endpoints (see ucx_comm.hpp).
  std::shared_ptr<UcxComm> ucx;
{%- endif %}
};

// Whether every op body only starts its communication and returns, leaving
// the rest to OpContext::completeLater, and every done function may run on
// any thread (one at a time), as in the MPI implementation. Then an op whose
// queue is idle runs its body on the caller's thread, and a caller waiting
// for an op polls it itself: no hand-off to the worker and back. Leave it
// false while a body may wait for peers (on the caller's thread, an async op
// would block) or a done function uses state only its queue's thread may touch.
constexpr bool kBodiesOnlyStart = {{ "true" if p.impl == "mpi" else "false" }};

// The element types and reductions this backend handles. They are checked on
// the caller's thread before an op is queued, so a bad call fails at once.
bool supportsDtype(c10::ScalarType dtype);
bool supportsReduction(Reduction op, c10::ScalarType dtype);

// The contract between the plumbing and the functions below.
//
// Threads. A group has two queues, each served by one thread of its own:
// receives (recv, recvAnysource) run on one, every other op but send on the
// other, one body at a time, in the order the ops were called. A send runs on
// the caller's thread, as gloo and MPI post sends, so it never waits behind
// queued collectives. With kBodiesOnlyStart, an op whose queue is idle runs
// on the caller's thread too. So a send or receive body may run at the same
// time as any other body: they must share the communicator safely.
//
// Arguments. They are checked before the body runs: ranks are the group's and
// in range; tensor counts, dtypes, devices and sizes are what the op needs on
// this rank. Contiguity is not checked: any tensor, input or output, may be a
// non-contiguous view of any shape (a column, a transpose, every other
// element), whose data_ptr() is not followed by numel() packed elements.
// Where your library reads flat memory, pass tensor.contiguous() (the tensor
// itself when it already is, else a packed copy); where it writes flat memory
// into a tensor that is not contiguous, write a contiguous copy and copy_()
// it back into the tensor given, which is all the caller sees.
//
// Blocking. A body may wait for peers, but must give up, by throwing, once
// ctx.expired() (its deadline passed, it was aborted, or the group was
// destroyed). A receive body should not wait at all: it posts the receive and
// completes later, or every receive posted after it waits too. A send body
// must not wait for its receiver.
//
// Completing later. A body that returns before its communication is done
// calls ctx.completeLater(done). `done` is then polled, by the queue's thread
// or a waiting caller (one thread at a time for one op; the done functions of
// different ops may run at once on different threads), until it returns true (done) or
// throws (failed). It must be cheap and must not block; it must own, by value
// or shared_ptr, everything it uses (the body's locals are gone); and it must
// give up once ctx.expired(). An op not done a second after its deadline is
// failed, and its `done` is dropped without another call. While a collective
// is in flight the collectives queued after it wait (they may use its
// tensors); sends and receives do not.
//
// Tensors. An op's tensors stay alive until it completes. A send's tensor may
// be reused once its Work completes, not before: copy it if your library
// returns before it has read it. A receive that failed must not write its
// tensor any more: if the message may still arrive, fail the group instead
// (ctx.failGroup).
//
// Errors. Throw (TORCH_CHECK) to fail the op; the message reaches the caller
// as a RuntimeError naming the backend and op. A collective that fails leaves
// the group unusable: every later op of the group fails at once, without
// calling its body.
//
// Callbacks. Futures complete on the plumbing's own threads, never on a
// queue's thread nor inside a body or `done`, and never under a lock of the
// plumbing: a future's callback may issue ops and wait for them.
//
// Lifecycle. init and split run on the caller's thread. finalize runs once,
// on whichever thread lets go of the communicator last, after every op's
// body and `done` returned for the last time. abort may run on any thread at
// any time, once.
namespace ops {

// The lifecycle of a group, around its ops.
//
// init: called when torch.distributed creates a group, on the caller's
// thread, on every rank of the group; returns the group's communicator.
// Throw to fail the group's creation. The store lets ranks exchange what
// your library needs to connect (a unique id, addresses).
std::shared_ptr<Communicator> init(const GroupInfo& group);

// split: for a group whose ranks are all in a group that exists already
// (new_group and split_group): derive the child's communicator from the
// parent's, on the child's ranks only; the parent's ops may run meanwhile.
// Return nullptr to have init() called instead.
std::shared_ptr<Communicator> split(Communicator& parent, const GroupInfo& child);

// finalize: called once the group is destroyed and its last op let go of the
// communicator (see Lifecycle above); release what init acquired. Never
// called while a body or `done` may still run.
void finalize(Communicator& comm);

// abort: called at most once, from any thread, when a collective failed or
// timed out (the ranks no longer agree on what comes next), on
// ProcessGroup.abort(), or when the group is destroyed while a body still
// runs; never after finalize. It must make bodies stuck in your library
// return soon: bodies and done functions already running go on until they
// see ctx.expired(), and finalize comes after the last of them.
void abort(Communicator& comm);

// The ops. Every tensor they receive may be non-contiguous (see Arguments).
{% for op in p.ops %}
// {{ op.summary }}{{ " (runs on the receive thread)" if op.on_receive_queue }}{{ " (runs on the caller's thread)" if op.on_caller_thread }}
{{ op.returns }} {{ op.name }}(const OpContext& ctx{{ ", " ~ op.body if op.body }});
{% endfor %}
} // namespace ops
} // namespace {{ p.package }}

// The interface between the backend's plumbing and its collectives.
//
// backend.cpp checks every call on the caller's thread, queues it, and runs it
// on the backend's worker thread by calling one of the functions declared
// here. ops.cpp defines them: that is where your library's calls go. Your
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

#include "context.hpp"

namespace single_collectives {

// The options of a group: your library's settings, typed. Python passes them
// as init_process_group("single", pg_options=single_collectives.Options(verbose=True))
// (or new_group(..., pg_options=...)); a field not given there takes its value
// from the environment variable SINGLE_<FIELD> (SINGLE_VERBOSE=1), else its
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
};

// Whether every op body only starts its communication and returns, leaving
// the rest to OpContext::completeLater, whose function any thread may call
// (one at a time), as in the MPI implementation. Then an op whose worker
// thread is idle runs its body on the caller's thread instead, and a caller
// waiting for an op polls it itself: no hand-off to the worker and back.
// Leave it false while a body may wait for peers (on the caller's thread, it
// would make an async op block) or a completeLater function uses state that
// only its queue's thread may touch.
constexpr bool kBodiesOnlyStart = false;

// The element types and reductions this backend handles. They are checked on
// the caller's thread before an op is queued, so a bad call fails at once.
bool supportsDtype(c10::ScalarType dtype);
bool supportsReduction(Reduction op, c10::ScalarType dtype);

// The collectives. Each runs on the backend's worker thread (or, with
// kBodiesOnlyStart, on the caller's when the worker is idle), one at a time, in
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
// receive bodies must be safe to run alongside any other op body. A receive
// body should post the receive and complete later (ctx.completeLater): one
// that waits for its message holds up every receive posted after it, and a
// peer whose send depends on one of those then waits for this rank forever.
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

// finalize: called once when the group is destroyed, after its last op
// returned; release what init acquired. Not called when an op body was
// still stuck after abort (it may still use the communicator).
void finalize(Communicator& comm);

// abort: called at most once, from any thread, when a collective failed or
// timed out (the ranks no longer agree on what comes next), on
// ProcessGroup.abort(), or when the group is destroyed while a body still
// runs. It must make bodies stuck in your library return soon; afterwards
// only finalize is called.
void abort(Communicator& comm);

// Reduces the tensor of every rank; every rank gets the result.
void allreduce(const OpContext& ctx, at::Tensor& tensor, Reduction op);

} // namespace ops
} // namespace single_collectives

// UcxComm: a group's connection to UCX (Unified Communication X), and
// UcxMessages: the tagged messages of one op.
//
// UCX moves bytes between processes over whatever the machine offers (shared
// memory, TCP, InfiniBand). This backend uses one part of its API, tagged
// messages (ucp_tag_send_nbx / ucp_tag_recv_nbx): a message carries a 64-bit
// tag, and a receive takes the first message whose tag matches its own under
// a mask. The collectives in ops.cpp are written with nothing else.
//
// Set-up, when the group is created (ops::init): each rank creates a UCX context and a
// worker (the object that owns the connections and is "progressed" to move
// data), publishes the worker's address in the group's store, reads
// every other rank's address from it, and creates an endpoint to each rank.
// Endpoints connect lazily, on their first message.
//
// Progress: UCX moves data only while some thread calls ucp_worker_progress().
// Op bodies do it themselves while they wait (UcxMessages::wait()), giving up
// when their op expires; while nothing moves they sleep on the worker's
// event file descriptor, which UCX makes readable when a message comes. A
// point-to-point send completes once UCX is done with its message (for a
// large one, once the receiver has taken it), as gloo's and MPI's do. A small
// helper thread progresses the messages of ops that failed, which nobody
// waits for, until UCX is done with them, sleeping on the worker's events.
//
// Threads: the worker thread (collectives), the receive thread and the
// callers' threads (sends) all use the same UCX worker, so every UCX call is
// made under one mutex.
#pragma once

#include <ATen/core/Tensor.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "context.hpp"

namespace NEW_BACKEND_NAMESPACE {

// The 64-bit tag of a message:
//
//   bit  63      0: a collective's message, 1: a point-to-point message
//   collective:  bits 62..44  the collective's number (ctx.collective)
//                bits 43..20  the element count every rank must agree on
//                             (modulo 2^24; 0 where counts may differ)
//   p2p:         bits 51..20  the user's tag
//   bits 19..0   the sending rank
//
// A receive matches the number (or p2p tag) and, when it names one, the
// sender; it never matches the count. It reads the sender's count back from
// the message's tag instead, so ranks that disagree on a collective's size
// get an error that says so, rather than a truncated message or a hang.
// UCX matches the messages of one sender with one tag in the order they were
// sent, so the steps of an algorithm need no tags of their own: a rank posts
// the receive of step s+1 after the one of step s, and so does every sender.
namespace ucx_tag {
constexpr int kSourceBits = 20;
constexpr int kCountBits = 24;
constexpr uint64_t kSourceMask = (uint64_t{1} << kSourceBits) - 1;
constexpr uint64_t kCountMask = ((uint64_t{1} << kCountBits) - 1) << kSourceBits;
constexpr uint64_t kPointToPoint = uint64_t{1} << 63;
// What a receive compares: a collective's, everything but the count; a
// point-to-point one's, everything but (from any rank) the sender.
constexpr uint64_t kCollective = ~kCountMask;
constexpr uint64_t kFromOne = ~uint64_t{0};
constexpr uint64_t kFromAny = ~kSourceMask;

inline uint64_t collective(uint64_t number, int64_t count, int source) {
  const uint64_t numberBits = (number << (kSourceBits + kCountBits)) & (kPointToPoint - 1);
  const uint64_t countBits = (static_cast<uint64_t>(count) << kSourceBits) & kCountMask;
  return numberBits | countBits | static_cast<uint64_t>(source);
}

inline uint64_t pointToPoint(int tag, int source) {
  return kPointToPoint | (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << kSourceBits) |
      static_cast<uint64_t>(source);
}

inline int source(uint64_t tag) {
  return static_cast<int>(tag & kSourceMask);
}

inline int64_t count(uint64_t tag) {
  return static_cast<int64_t>((tag & kCountMask) >> kSourceBits);
}
} // namespace ucx_tag

// A message UCX has not finished with: the request, and the tensor whose
// memory it reads or writes (kept alive until UCX is done).
struct UcxRequest {
  void* request = nullptr;  // UCX's request; nullptr once complete
  at::Tensor tensor;
  int peer = -1;            // the other rank (-1: any rank, for a receive)
  bool receive = false;
  // A completed receive: the sender's tag and the bytes that arrived.
  uint64_t senderTag = 0;
  size_t length = 0;
};

class UcxComm {
 public:
  // Creates the worker and connects to every rank of the group, exchanging
  // worker addresses through `store` (the group's own store).
  UcxComm(Bootstrap& store, int rank, int size);
  // Closes the endpoints and frees the worker: after the group's last op.
  ~UcxComm();
  UcxComm(const UcxComm&) = delete;
  UcxComm& operator=(const UcxComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Posts a send of the contiguous host tensor `tensor` to `dst` (returns at
  // once; the request completes later) and a receive into `tensor` of a
  // message tagged `tag` under `mask`.
  UcxRequest send(const at::Tensor& tensor, int dst, uint64_t tag);
  UcxRequest recv(at::Tensor& tensor, int src, uint64_t tag, uint64_t mask);

  // Moves data. Returns whether anything happened.
  bool progress();

  // Sleeps until UCX has an event for the worker (a message came, a send
  // completed) or `limit` passes, unless `awaited` is complete already;
  // progress after it returns. Returns false at once when the worker cannot
  // be armed: UCX has work to do that no event will announce.
  bool sleepUntilEvent(const UcxRequest& awaited, std::chrono::microseconds limit);

  // Whether `r` is complete (with `status`: UCS_OK, or what went wrong). A
  // completed receive has its senderTag and length set.
  bool done(UcxRequest& r, ucs_status_t& status);

  // Makes every wait give up (ops::abort): the group is not used again.
  void abort() { aborted_.store(true); }
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

  // The receives posted and not complete (ops.cpp's receiveLater): only one
  // that waits alone sleeps on events between its tests.
  std::atomic<int> receivesWaiting{0};

  // Cancels the receive `r` unless UCX has matched a message to it already.
  // Returns true when it had: the message goes on arriving into r.tensor, and
  // the next receive that would have matched it takes the one after it.
  bool cancel(UcxRequest& r);

  // Gives up on requests of an op that failed: cancels the receives and lets
  // the helper thread progress and free everything once UCX is done with it.
  void abandon(std::vector<UcxRequest> requests);

 private:
  void progressAbandoned();  // the helper thread

  int rank_;
  int size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;  // the worker's: readable after ucp_worker_arm() once an event comes
  std::vector<ucp_ep_h> endpoints_;  // one per rank of the group, this one included

  std::atomic<bool> aborted_{false};
  std::mutex mutex_;  // every UCX call is made under it
  std::condition_variable wake_;
  std::vector<UcxRequest> abandoned_;  // guarded by mutex_
  bool stopping_ = false;               // guarded by mutex_
  std::thread helper_;
};

// The messages of one op, posted together and waited for together:
//
//   UcxMessages messages(ctx, comm);
//   messages.send(chunk, right);
//   messages.recv(incoming, left);
//   messages.wait();  // both are done
//
// A UcxMessages can be reused: wait(), then post the next step's messages.
class UcxMessages {
 public:
  // `count`: for a collective whose ranks must all have the same number of
  // elements (all_reduce, broadcast...), that number; each receive checks
  // the sender's. kAnyCount where counts may differ (all_to_all, gather...).
  static constexpr int64_t kAnyCount = -1;
  UcxMessages(const OpContext& ctx, UcxComm& comm, int64_t count = kAnyCount);
  // If the op fails with messages still in flight, hands them to
  // UcxComm::abandon().
  ~UcxMessages();
  UcxMessages(const UcxMessages&) = delete;
  UcxMessages& operator=(const UcxMessages&) = delete;

  // A collective's messages. `tensor` must be a contiguous host tensor; a
  // receive expects exactly tensor's size and fails otherwise.
  void send(const at::Tensor& tensor, int dst);
  void recv(at::Tensor& tensor, int src);

  // Point-to-point messages, tagged with the user's tag. A receive from
  // src == -1 takes the first message from any rank.
  void sendTagged(const at::Tensor& tensor, int dst, int tag);
  void recvTagged(at::Tensor& tensor, int src, int tag);

  // Progresses UCX until every posted message is done, and returns the
  // sender of the last receive. Throws when the op expires first, naming the
  // ranks whose messages are missing, when a message fails, or when a
  // sender's count or message size is not what this rank expects.
  int wait();
  // wait() for at most `limit`: true once every posted message is done,
  // false when `limit` passed first. Called again for the same messages, it
  // goes on where it left off (a wait that found nothing moving sleeps on).
  bool waitFor(std::chrono::steady_clock::duration limit);
  // One round of wait(): true once every posted message is done (then
  // source() is the sender of the last receive). Throws as wait() does.
  bool test(bool* moved = nullptr);
  int source() const {
    return lastSource_;
  }

  // Cancels the posted receives that are not complete (UcxComm::cancel), for
  // an op that gives up. True when one of them had matched its message
  // already: that message is lost to the receives after it.
  bool cancelReceives();

 private:
  void checkReceived(const UcxRequest& r, ucs_status_t status) const;

  const OpContext& ctx_;
  UcxComm& comm_;
  int64_t count_;
  std::vector<UcxRequest> pending_;
  size_t finished_ = 0;  // pending_[0, finished_) are done
  int lastSource_ = -1;
  // Where waitFor() is: when data last moved, and how long it sleeps next.
  std::chrono::steady_clock::time_point lastMoved_;
  std::chrono::microseconds sleep_;
};

} // namespace NEW_BACKEND_NAMESPACE

// StoreExchange: moves tensors between the ranks of a group through the
// c10d::Store the backend was created with (init_process_group's store).
//
// The reference implementation in ops.cpp builds every collective from these
// few exchanges. Tensors they return are on the host: the store only moves
// host memory, so CUDA tensors are staged through it. Each call blocks until its data has arrived, and fails with a
// clear error when the op's deadline passes (naming the ranks that never sent)
// or when the group is destroyed. Keys carry the number of the collective, so
// ops never see each other's data, and every key is deleted as soon as all its
// readers have read it, so the store does not grow.
//
// Like ops.hpp this header includes only <ATen/core/Tensor.h>; it uses
// OpContext from context.hpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"

namespace c10d {
class Store;
} // namespace c10d

namespace NEW_BACKEND_NAMESPACE {

struct OpContext;
class Bootstrap;

class StoreExchange {
 public:
  // Over the group's store, as ops::init receives it: over `backend`'s group
  // `group` (its name). A FileStore (file://) keeps every message it was
  // given, so with one the messages go through files beside its own instead.
  StoreExchange(Bootstrap& store, const std::string& backend, const std::string& group);
  ~StoreExchange();
  StoreExchange(const StoreExchange&) = delete;
  StoreExchange& operator=(const StoreExchange&) = delete;

  // Every rank sends `tensor` to every other rank. Returns each rank's tensor,
  // shaped like `tensor`, in rank order; this rank's entry is `tensor` itself.
  std::vector<at::Tensor> allgather(const OpContext& ctx, const at::Tensor& tensor);

  // Every rank sends `tensor` to `root`. Returns each rank's tensor, shaped
  // like `tensor`, in rank order, on the root, and nothing elsewhere.
  std::vector<at::Tensor> gather(const OpContext& ctx, const at::Tensor& tensor, int root);

  // The root's `tensor` is copied into `tensor` on every other rank.
  void broadcast(const OpContext& ctx, at::Tensor& tensor, int root);

  // The root sends chunks[r] to rank r. Returns this rank's chunk, shaped and
  // typed like `like` (`chunks` is only read on the root).
  at::Tensor scatter(
      const OpContext& ctx,
      const std::vector<at::Tensor>& chunks,
      int root,
      const at::Tensor& like);

  // Every rank sends chunks[r] to rank r. Returns, in rank order, the chunk
  // each rank sent to this one, flat; counts[r] is how many elements rank r
  // must send here.
  std::vector<at::Tensor> alltoall(
      const OpContext& ctx,
      const std::vector<at::Tensor>& chunks,
      const std::vector<int64_t>& counts);

  // Returns once every rank has called it.
  void barrier(const OpContext& ctx);

  // Point-to-point, matched by (source, destination, tag) in call order.
  // Sends run on the caller's threads and receives on the backend's receive
  // thread, alongside the collectives (on its worker thread), each over a
  // store connection of their own. A receive polls for its message: a store
  // cannot wait for "any of these keys", and a receive blocked in wait()
  // would hold up every receive posted after it (see ops.cpp).
  void send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag);
  // Queues a receive from `src` (kAnySource: from any rank) with `tag`, and
  // returns its ticket for tryRecv(). Receives take messages as MPI matches
  // them: each takes the first message it matches that no receive posted
  // before it matches too.
  static constexpr int kAnySource = -1;
  uint64_t postRecv(int src, int tag);
  // Receives into `tensor` once the receive `ticket` may take a message and
  // one has arrived, and returns the sender's rank; nullopt until then. Once
  // the op expired it throws, and takes no message.
  std::optional<int> tryRecv(const OpContext& ctx, at::Tensor& tensor, int src, int tag, uint64_t ticket);

  // Wakes the worker thread when a collective blocks it in a wait, so that
  // the op fails at once (ops::abort); a receive fails at its next poll.
  // What this rank put stays: a peer that is still within its own deadline
  // reads it, and names the rank that really is missing.
  void abort();
  // Deletes what this rank put for collectives that failed (ops::finalize).
  void close();

 private:
  // Starts one exchange of the current collective: numbers it.
  void beginExchange(const OpContext& ctx);
  std::string collectiveKey(const OpContext& ctx, const std::string& name);
  std::string p2pKey(int src, int dst, int tag, uint64_t n) const;
  // Reads and deletes the next message from `src` to `me` with `tag`, which
  // has arrived, into `tensor`; the one after it is next once it is deleted.
  void take(at::Tensor& tensor, int src, int me, int tag);
  // The rank whose next message with `tag` the receive `ticket` from `src`
  // may take now: one that has arrived and that no earlier receive matches.
  std::optional<int> arrived(const OpContext& ctx, int src, int tag, uint64_t ticket);
  // A connection to the store of one thread: a store client serves one
  // request at a time, and a collective may block in wait() for a long time.
  struct Channel {
    c10::intrusive_ptr<c10d::Store> store;  // opened on first use
  };
  c10d::Store& connection(Channel& channel);
  c10d::Store& traffic();    // the worker thread's connection
  c10d::Store& receiving();  // the receive thread's connection
  // Stores this rank's part of the current collective under `keys`.
  void put(const std::vector<std::string>& keys, std::vector<std::vector<uint8_t>> blobs);
  // Waits until every key of the current collective exists; from then on,
  // reads from traffic() fail once the op's deadline passes. Throws when the
  // op expires first, after deleting what this rank put for the collective
  // (nobody will read it).
  void await(const OpContext& ctx, const std::vector<std::string>& keys, const std::vector<int>& fromRanks);
  // Deletes leftovers_ through `store`; the caller holds waitMutex_.
  void deleteLeftovers(c10d::Store& store);
  // Counts this rank's read of `keys` (messages of `bytes` bytes each); the
  // last of `readers` deletes them.
  void dropWhenAllRead(
      const std::string& counter,
      int64_t readers,
      const std::vector<std::string>& keys,
      size_t bytes);

  c10::intrusive_ptr<c10d::Store> store_;  // the backend's store
  std::mutex connectMutex_;
  Channel ops_;       // the worker thread's
  Channel receives_;  // the receive thread's
  std::mutex waitMutex_;
  bool aborted_ = false;  // guarded by waitMutex_
  // The keys the worker thread is blocked on in await(), and those of them
  // abort() created to wake it. Guarded by waitMutex_.
  std::vector<std::string> waiting_;
  std::vector<std::string> marked_;
  // What this rank put for collectives that failed (key, bytes): deleted when
  // the group is destroyed. Guarded by waitMutex_.
  std::vector<std::pair<std::string, size_t>> leftovers_;
  int rank_ = -1;         // this rank, for abort()'s markers

  // The collective being run, the exchange within it, and the keys this rank
  // put for it: all ranks run the same collectives in the same order, so
  // they agree on the keys. Only the worker thread uses these.
  uint64_t collective_ = UINT64_MAX;
  int step_ = 0;
  std::vector<std::pair<std::string, size_t>> written_;  // key, bytes

  // Sends, from any thread: a connection, and the messages sent per
  // (destination, tag).
  std::mutex sendMutex_;
  Channel sends_;
  std::map<std::pair<int, int>, uint64_t> sent_;
  // The receives waiting, by ticket (in the order they were posted): per
  // (source, tag) with the number of the next message from that source, and
  // per tag those from any source. Only the receive thread uses them.
  struct Inbox {
    uint64_t next = 0;
    std::deque<uint64_t> waiting;
  };
  std::map<std::pair<int, int>, Inbox> inboxes_;
  std::map<int, std::deque<uint64_t>> anysource_;
  uint64_t tickets_ = 0;
};

} // namespace NEW_BACKEND_NAMESPACE

#include "ucx_comm.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <sstream>
#include <thread>
#include <utility>

namespace NEW_BACKEND_NAMESPACE {

namespace {

using Clock = std::chrono::steady_clock;

// How long a wait goes on progressing UCX after data last moved before it
// sleeps on the worker's event file descriptor, and how long it sleeps there
// at most before it looks again: from kFirstSleep, doubling up to kMaxSleep
// while nothing moves. (Another thread that arms the worker drains the
// descriptor, and may take the event this one slept for.)
constexpr auto kIdleSpin = std::chrono::microseconds(50);
constexpr auto kFirstSleep = std::chrono::microseconds(250);
constexpr auto kMaxSleep = std::chrono::microseconds(2000);
// How long a wait sleeps when the worker cannot be armed (UCX has work that
// no event will announce, such as a send queued for a peer slow to take it).
constexpr auto kBusyPause = std::chrono::microseconds(50);
// How long the helper thread sleeps at most between rounds of progress on
// the messages of failed ops, which nobody waits for.
constexpr auto kAbandonedSleep = std::chrono::microseconds(10000);

// Throws with UCX's own words for `status`.
void checkUcx(ucs_status_t status, const char* what) {
  TORCH_CHECK(status == UCS_OK, "UCX ", what, " failed: ", ucs_status_string(status));
}

std::string addressKey(int rank) {
  return "ucx/address/" + std::to_string(rank);
}

// Waits for a UCX request made outside any op (closing an endpoint) until
// `giveUp` at most, then frees it.
void waitBriefly(ucp_worker_h worker, void* request, Clock::time_point giveUp) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    return;
  }
  while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < giveUp) {
    ucp_worker_progress(worker);
  }
  ucp_request_free(request);
}

} // namespace

// ---------------------------------------------------------------------------
// UcxComm

UcxComm::UcxComm(Bootstrap& store, int rank, int size)
    : rank_(rank), size_(size) {
  TORCH_CHECK(size <= static_cast<int>(ucx_tag::kSourceMask) + 1,
      "UCX tags have room for ", ucx_tag::kSourceMask + 1, " ranks, not ", size);

  // The context: which UCX features we use (tagged messages, and an event
  // file descriptor to sleep on while nothing moves). Transports and
  // tuning come from UCX_* environment variables (UCX_TLS, ...), read here.
  ucp_config_t* config = nullptr;
  checkUcx(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  const ucs_status_t initialized = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  checkUcx(initialized, "ucp_init");

  // The worker: several of our threads use it, one at a time (mutex_).
  ucp_worker_params_t workerParams{};
  workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  workerParams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  const ucs_status_t created = ucp_worker_create(context_, &workerParams, &worker_);
  if (created != UCS_OK) {
    ucp_cleanup(context_);
    checkUcx(created, "ucp_worker_create");
  }

  try {
    checkUcx(ucp_worker_get_efd(worker_, &eventFd_), "ucp_worker_get_efd");

    // Publish this worker's address, read everyone's, and connect.
    ucp_address_t* address = nullptr;
    size_t addressLength = 0;
    checkUcx(ucp_worker_get_address(worker_, &address, &addressLength), "ucp_worker_get_address");
    const auto* bytes = reinterpret_cast<const uint8_t*>(address);
    store.set(addressKey(rank_), std::vector<uint8_t>(bytes, bytes + addressLength));
    ucp_worker_release_address(worker_, address);

    for (int peer = 0; peer < size_; ++peer) {
      const std::vector<uint8_t> peerAddress = store.get(addressKey(peer));
      ucp_ep_params_t epParams{};
      epParams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      epParams.address = reinterpret_cast<const ucp_address_t*>(peerAddress.data());
      // No peer-failure handling: in UCX 1.13 asking for it rules out the
      // shared-memory transports (only TCP is left on one host). A peer that
      // dies is noticed by the op's timeout instead (UcxMessages::wait).
      epParams.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      ucp_ep_h ep = nullptr;
      checkUcx(ucp_ep_create(worker_, &epParams, &ep), "ucp_ep_create");
      endpoints_.push_back(ep);
    }
  } catch (...) {
    for (ucp_ep_h ep : endpoints_) {
      ucp_ep_destroy(ep);
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    throw;
  }
  helper_ = std::thread([this] { progressAbandoned(); });
}

UcxComm::~UcxComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  helper_.join();

  std::lock_guard<std::mutex> lock(mutex_);
  // Messages nobody will finish: cancel the receives, give the rest a moment
  // (one for all of them: a rank may have abandoned thousands of sends to a
  // peer that never received them), and free the requests (UCX finishes or
  // drops what is still in flight).
  for (UcxRequest& r : abandoned_) {
    if (r.receive) {
      ucp_request_cancel(worker_, r.request);
    }
  }
  const auto giveUp = Clock::now() + std::chrono::milliseconds(100);
  for (UcxRequest& r : abandoned_) {
    waitBriefly(worker_, r.request, giveUp);
  }
  // Force-close: peers may be gone. Progress while closing may still move
  // what is left of those messages.
  ucp_request_param_t closeParams{};
  closeParams.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  closeParams.flags = UCP_EP_CLOSE_FLAG_FORCE;
  for (ucp_ep_h ep : endpoints_) {
    waitBriefly(worker_, ucp_ep_close_nbx(ep, &closeParams), Clock::now() + std::chrono::seconds(1));
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
  // Only now, with the endpoints and the worker gone, may the tensors of
  // those messages go: until then UCX could read or write them.
  abandoned_.clear();
}

UcxRequest UcxComm::send(const at::Tensor& tensor, int dst, uint64_t tag) {
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  params.datatype = ucp_dt_make_contig(1);  // count in bytes
  std::lock_guard<std::mutex> lock(mutex_);
  void* request = ucp_tag_send_nbx(endpoints_[dst], tensor.const_data_ptr(), tensor.nbytes(), tag, &params);
  TORCH_CHECK(!UCS_PTR_IS_ERR(request),
      "UCX could not send to rank ", dst, ": ", ucs_status_string(UCS_PTR_STATUS(request)));
  return UcxRequest{request, tensor, dst, false};
}

UcxRequest UcxComm::recv(at::Tensor& tensor, int src, uint64_t tag, uint64_t mask) {
  ucp_request_param_t params{};
  // Always a request, even for a message that is already here: done() reads
  // the sender and the length from it.
  params.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  params.datatype = ucp_dt_make_contig(1);
  std::lock_guard<std::mutex> lock(mutex_);
  void* request = ucp_tag_recv_nbx(worker_, tensor.mutable_data_ptr(), tensor.nbytes(), tag, mask, &params);
  TORCH_CHECK(!UCS_PTR_IS_ERR(request),
      "UCX could not post a receive: ", ucs_status_string(UCS_PTR_STATUS(request)));
  return UcxRequest{request, tensor, src, true};
}

bool UcxComm::progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ucp_worker_progress(worker_) != 0;
}

bool UcxComm::sleepUntilEvent(const UcxRequest& awaited, std::chrono::microseconds limit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) {
      return false;
    }
    checkUcx(armed, "ucp_worker_arm");
    if (awaited.request != nullptr && ucp_request_check_status(awaited.request) != UCS_INPROGRESS) {
      return true;  // another thread's progress completed it
    }
  }
  pollfd event{eventFd_, POLLIN, 0};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limit);
  const timespec timeout{static_cast<time_t>(seconds.count()),
      static_cast<long>(std::chrono::nanoseconds(limit - seconds).count())};
  ::ppoll(&event, 1, &timeout, nullptr);
  return true;
}

bool UcxComm::done(UcxRequest& r, ucs_status_t& status) {
  if (r.request == nullptr) {
    status = UCS_OK;  // completed when posted
    return true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ucp_tag_recv_info_t info{};
  status = r.receive ? ucp_tag_recv_request_test(r.request, &info) : ucp_request_check_status(r.request);
  if (status == UCS_INPROGRESS) {
    return false;
  }
  ucp_request_free(r.request);
  r.request = nullptr;
  r.senderTag = info.sender_tag;
  r.length = info.length;
  return true;
}

bool UcxComm::cancel(UcxRequest& r) {
  if (r.request == nullptr) {
    return false;  // complete
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // A receive UCX has not matched is cancelled at once; one it has matched
  // goes on (or is complete), and check_status says so.
  ucp_request_cancel(worker_, r.request);
  return ucp_request_check_status(r.request) != UCS_ERR_CANCELED;
}

void UcxComm::abandon(std::vector<UcxRequest> requests) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (UcxRequest& r : requests) {
      if (r.request == nullptr) {
        continue;
      }
      if (r.receive) {
        ucp_request_cancel(worker_, r.request);  // completes it (UCS_ERR_CANCELED) on progress
      }
      abandoned_.push_back(std::move(r));
    }
  }
  wake_.notify_all();
}

void UcxComm::progressAbandoned() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto nap = kFirstSleep;
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !abandoned_.empty(); });
    if (stopping_) {
      return;
    }
    const bool moved = ucp_worker_progress(worker_) != 0;
    auto finished = [](const UcxRequest& r) {
      if (ucp_request_check_status(r.request) == UCS_INPROGRESS) {
        return false;
      }
      ucp_request_free(r.request);
      return true;
    };
    abandoned_.erase(std::remove_if(abandoned_.begin(), abandoned_.end(), finished), abandoned_.end());
    if (abandoned_.empty()) {
      continue;
    }
    // Nobody waits for these messages: sleep on the worker's events, longer
    // each time nothing moved, so that a peer slow to take them costs no core.
    // The op threads have the worker meanwhile.
    nap = moved ? kFirstSleep : std::min(2 * nap, kAbandonedSleep);
    const bool armed = ucp_worker_arm(worker_) == UCS_OK;  // else UCX has work no event announces
    lock.unlock();
    if (armed) {
      pollfd event{eventFd_, POLLIN, 0};
      const timespec timeout{0, static_cast<long>(std::chrono::nanoseconds(nap).count())};
      ::ppoll(&event, 1, &timeout, nullptr);
    } else {
      std::this_thread::sleep_for(nap);
    }
    lock.lock();
  }
}

// ---------------------------------------------------------------------------
// UcxMessages

UcxMessages::UcxMessages(const OpContext& ctx, UcxComm& comm, int64_t count)
    : ctx_(ctx), comm_(comm), count_(count), lastMoved_(Clock::now()), sleep_(kFirstSleep) {}

UcxMessages::~UcxMessages() {
  if (!pending_.empty()) {
    comm_.abandon(std::move(pending_));
  }
}

void UcxMessages::send(const at::Tensor& tensor, int dst) {
  const int64_t count = count_ == kAnyCount ? 0 : count_;
  pending_.push_back(comm_.send(tensor, dst, ucx_tag::collective(ctx_.collective, count, comm_.rank())));
}

void UcxMessages::recv(at::Tensor& tensor, int src) {
  pending_.push_back(comm_.recv(tensor, src, ucx_tag::collective(ctx_.collective, 0, src), ucx_tag::kCollective));
}

void UcxMessages::sendTagged(const at::Tensor& tensor, int dst, int tag) {
  pending_.push_back(comm_.send(tensor, dst, ucx_tag::pointToPoint(tag, comm_.rank())));
}

void UcxMessages::recvTagged(at::Tensor& tensor, int src, int tag) {
  if (src < 0) {
    pending_.push_back(comm_.recv(tensor, -1, ucx_tag::pointToPoint(tag, 0), ucx_tag::kFromAny));
  } else {
    pending_.push_back(comm_.recv(tensor, src, ucx_tag::pointToPoint(tag, src), ucx_tag::kFromOne));
  }
}

// Throws unless the completed receive `r` brought what this rank expects.
void UcxMessages::checkReceived(const UcxRequest& r, ucs_status_t status) const {
  const int sender = ucx_tag::source(r.senderTag);
  if (count_ != kAnyCount) {
    const int64_t mine = count_ & ((int64_t{1} << ucx_tag::kCountBits) - 1);
    TORCH_CHECK(ucx_tag::count(r.senderTag) == mine || status == UCS_ERR_CANCELED,
        "rank ", sender, " sent ", ucx_tag::count(r.senderTag), " elements, but this rank expects ", count_);
  }
  TORCH_CHECK(status != UCS_ERR_MESSAGE_TRUNCATED, "rank ", sender, " sent ", r.length,
      " bytes, more than the ", r.tensor.nbytes(), " this rank expects");
  TORCH_CHECK(status == UCS_OK, "a message from rank ", r.peer, " failed: ", ucs_status_string(status));
  TORCH_CHECK(r.length == r.tensor.nbytes(), "rank ", sender, " sent ", r.length,
      " bytes, but this rank expects ", r.tensor.nbytes());
}

int UcxMessages::wait() {
  lastMoved_ = Clock::now();
  sleep_ = kFirstSleep;
  while (!waitFor(std::chrono::hours(1))) {  // test() throws once the op expired
  }
  return lastSource_;
}

bool UcxMessages::waitFor(Clock::duration limit) {
  // Progress while data moves, and for kIdleSpin after, which catches a peer
  // that is nearly there. Then sleep until UCX has an event, as gloo's threads
  // sleep on their sockets: a rank whose peer is late, or shares its core,
  // gives the core away and wakes when a message comes. (sched_yield() is no
  // substitute: on a busy core it waits out every other thread's time slice.)
  const auto until = Clock::now() + limit;
  bool moved = false;
  while (!test(&moved)) {
    const auto now = Clock::now();
    if (moved) {
      lastMoved_ = now;
      sleep_ = kFirstSleep;
    }
    if (now >= until) {
      return false;
    }
    if (!moved && now - lastMoved_ > kIdleSpin) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - now);
      if (!comm_.sleepUntilEvent(pending_[finished_], std::min(sleep_, left))) {
        std::this_thread::sleep_for(kBusyPause);
      }
      sleep_ = std::min(2 * sleep_, kMaxSleep);
    }
  }
  return true;
}

bool UcxMessages::test(bool* moved) {
  const bool progressed = comm_.progress();
  if (moved != nullptr) {
    *moved = progressed;
  }
  ucs_status_t status = UCS_OK;
  while (finished_ < pending_.size() && comm_.done(pending_[finished_], status)) {
    const UcxRequest& r = pending_[finished_];
    if (r.receive) {
      checkReceived(r, status);
      lastSource_ = ucx_tag::source(r.senderTag);
    } else {
      TORCH_CHECK(status == UCS_OK, "a message to rank ", r.peer, " failed: ", ucs_status_string(status));
    }
    ++finished_;
  }
  if (finished_ == pending_.size()) {
    pending_.clear();
    finished_ = 0;
    return true;
  }
  if (ctx_.expired() || comm_.aborted()) {
    TORCH_CHECK(!ctx_.group.aborted.load(), "the process group was destroyed");
    TORCH_CHECK(!comm_.aborted(), "the process group was aborted");
    std::ostringstream from;
    std::ostringstream to;
    for (size_t i = finished_; i < pending_.size(); ++i) {
      std::ostringstream& list = pending_[i].receive ? from : to;
      list << (list.tellp() > 0 ? ", " : "") << (pending_[i].peer < 0 ? "any" : std::to_string(pending_[i].peer));
    }
    TORCH_CHECK(from.tellp() == 0, "nothing from rank(s) ", from.str(), " within the op's ",
        ctx_.timeout.count(), " ms timeout (has a rank died, or called another op?)");
    TORCH_CHECK(false, "rank(s) ", to.str(), " did not take this rank's messages within the op's ",
        ctx_.timeout.count(), " ms timeout (has a rank died, or called another op?)");
  }
  return false;
}

bool UcxMessages::cancelReceives() {
  bool matched = false;
  for (size_t i = finished_; i < pending_.size(); ++i) {
    if (pending_[i].receive && comm_.cancel(pending_[i])) {
      matched = true;
    }
  }
  return matched;
}

} // namespace NEW_BACKEND_NAMESPACE

// StoreExchange: see store_exchange.hpp.
#include "store_exchange.hpp"

#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "context.hpp"

namespace NEW_BACKEND_NAMESPACE {
namespace {

using Clock = std::chrono::steady_clock;
using Blob = std::vector<uint8_t>;

// Every value starts with this header, so a receiver can check that the
// sender agrees on the dtype and the number of elements before it copies.
struct Header {
  uint32_t magic;
  int32_t dtype;
  int64_t numel;
};
static_assert(sizeof(Header) == 16, "the payload must stay 16-byte aligned");
constexpr uint32_t kTensorMagic = 0x31584e42;  // "BNX1"
// What abort() puts under a key its rank waits for, to wake it: a store
// wait cannot be interrupted otherwise. The header's dtype is the rank that
// wrote it, so a peer that reads it first knows who destroyed its group.
constexpr uint32_t kAbortMagic = 0x21584e42;  // "BNX!"

Blob encode(const at::Tensor& tensor) {
  const at::Tensor bytes = tensor.cpu().contiguous();
  const size_t size = bytes.nbytes();
  Blob blob(sizeof(Header) + size);
  const Header header{kTensorMagic, static_cast<int32_t>(bytes.scalar_type()), bytes.numel()};
  std::memcpy(blob.data(), &header, sizeof(Header));
  if (size > 0) {
    std::memcpy(blob.data() + sizeof(Header), bytes.data_ptr(), size);
  }
  return blob;
}

// The store only moves host memory: tensors on a device are staged through it
// (on the current stream, which is the backend's stream for CUDA ops).
at::Tensor onHost(const at::Tensor& tensor) {
  return tensor.is_cpu() ? tensor : tensor.cpu();
}

// The TCPStore server refuses a value over 8 MiB, so a longer message is
// stored in parts of at most kMaxPart bytes: the first part under the key
// itself, the others under "key#1", "key#2"... The parts go first and the key
// last, so a reader that sees the key finds every part; the header in the
// first part says how long the message is, so how many parts there are.
constexpr size_t kMaxPart = size_t{4} << 20;

size_t partsOf(size_t bytes) {
  return bytes <= kMaxPart ? 1 : (bytes + kMaxPart - 1) / kMaxPart;
}

std::string partKey(const std::string& key, size_t part) {
  return key + "#" + std::to_string(part);
}

// The length of the message whose first part is `first`.
size_t messageBytes(const Blob& first) {
  Header header;
  if (first.size() < kMaxPart || first.size() < sizeof(Header)) {
    return first.size();
  }
  std::memcpy(&header, first.data(), sizeof(Header));
  if (header.magic != kTensorMagic || header.numel < 0) {
    return first.size();
  }
  const auto dtype = static_cast<c10::ScalarType>(header.dtype);
  return sizeof(Header) + static_cast<size_t>(header.numel) * c10::elementSize(dtype);
}

// A request that carries several values gets slow once it totals more than
// about a megabyte (3 x 4 MiB in one multiSet took a second here, in three
// sets 50 ms), so larger messages go one value per request.
constexpr size_t kMaxBatch = size_t{1} << 20;

void setMessages(c10d::Store& store, const std::vector<std::string>& keys, std::vector<Blob> blobs) {
  size_t total = 0;
  for (const Blob& blob : blobs) {
    total += blob.size();
  }
  if (total <= kMaxBatch) {
    store.multiSet(keys, blobs);
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Blob& blob = blobs[i];
    for (size_t part = 1; part < partsOf(blob.size()); ++part) {
      const size_t begin = part * kMaxPart;
      const size_t end = std::min(blob.size(), begin + kMaxPart);
      store.set(
          partKey(keys[i], part),
          Blob(
              blob.begin() + static_cast<std::ptrdiff_t>(begin),
              blob.begin() + static_cast<std::ptrdiff_t>(end)));
    }
    blob.resize(std::min(blob.size(), kMaxPart));
    store.set(keys[i], blob);
  }
}

// The messages under `keys`, which should total about `expectedBytes`.
std::vector<Blob> getMessages(
    c10d::Store& store,
    const std::vector<std::string>& keys,
    size_t expectedBytes) {
  std::vector<Blob> blobs;
  if (expectedBytes <= kMaxBatch) {
    blobs = store.multiGet(keys);
  } else {
    for (const std::string& key : keys) {
      blobs.push_back(store.get(key));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t bytes = messageBytes(blobs[i]);
    blobs[i].reserve(bytes);
    for (size_t part = 1; part < partsOf(bytes); ++part) {
      const Blob rest = store.get(partKey(keys[i], part));
      blobs[i].insert(blobs[i].end(), rest.begin(), rest.end());
    }
  }
  return blobs;
}

// Deletes the messages under `keys`, bytes[i] long, with all their parts.
void deleteMessages(
    c10d::Store& store,
    const std::vector<std::string>& keys,
    const std::vector<size_t>& bytes) {
  for (size_t i = 0; i < keys.size(); ++i) {
    store.deleteKey(keys[i]);
    for (size_t part = 1; part < partsOf(bytes[i]); ++part) {
      store.deleteKey(partKey(keys[i], part));
    }
  }
}

std::vector<size_t> sizesOf(const std::vector<Blob>& blobs) {
  std::vector<size_t> sizes;
  for (const Blob& blob : blobs) {
    sizes.push_back(blob.size());
  }
  return sizes;
}

std::string ranksText(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out << (i ? ", " : "") << ranks[i];
  }
  return out.str();
}

// A flat CPU tensor that owns `blob`'s payload (no copy), after checking that
// it holds `numel` elements of `like`'s dtype.
at::Tensor decode(Blob blob, const at::Tensor& like, int64_t numel, int fromRank) {
  TORCH_CHECK(blob.size() >= sizeof(Header), "rank ", fromRank, " sent a malformed message");
  Header header;
  std::memcpy(&header, blob.data(), sizeof(Header));
  TORCH_CHECK(
      header.magic != kAbortMagic,
      "rank ", header.dtype, " destroyed its process group while this rank waited for rank ", fromRank);
  TORCH_CHECK(header.magic == kTensorMagic, "rank ", fromRank, " sent a malformed message");
  const auto dtype = static_cast<c10::ScalarType>(header.dtype);
  TORCH_CHECK(
      dtype == like.scalar_type(),
      "rank ", fromRank, " sent ", dtype, " data, but this rank's tensor is ", like.scalar_type());
  TORCH_CHECK(
      header.numel == numel,
      "rank ", fromRank, " sent ", header.numel, " elements, but this rank expects ", numel);
  auto* owner = new Blob(std::move(blob));
  return at::from_blob(
      owner->data() + sizeof(Header),
      {numel},
      [owner](void*) { delete owner; },
      like.options().device(c10::kCPU));
}

// A store of one file per key in a folder: what the exchange uses in place of
// a FileStore (file://). A FileStore only appends to its file, a deleted key
// being one more record, so every message would stay in it for good (100
// all_reduces of 1 MiB left 200 MB). Here a deleted key is a removed file, so
// the folder holds only the messages not yet read, on whatever file system
// holds the FileStore's file (a shared one, across hosts). A value is written
// to a file of its own and renamed into place, so readers see all of it or
// none; counters are read and written under an flock(), as FileStore does.
class FolderStore : public c10d::Store {
 public:
  explicit FolderStore(std::string folder) : folder_(std::move(folder)) {
    for (size_t slash = folder_.find('/', 1); ; slash = folder_.find('/', slash + 1)) {
      const std::string part = folder_.substr(0, slash);
      TORCH_CHECK(::mkdir(part.c_str(), 0700) == 0 || errno == EEXIST,
          "could not create ", part, " for the messages of file:// groups: ", std::strerror(errno));
      if (slash == std::string::npos) {
        break;
      }
    }
  }

  c10::intrusive_ptr<c10d::Store> clone() override {
    return c10::make_intrusive<FolderStore>(folder_);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    static std::atomic<uint64_t> writes{0};
    const std::string partial =
        folder_ + "/.partial." + std::to_string(::getpid()) + "." + std::to_string(writes++);
    {
      std::ofstream file(partial, std::ios::binary | std::ios::trunc);
      file.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
      file.close();
      TORCH_CHECK(!file.fail(), "could not write ", partial, ": ", std::strerror(errno));
    }
    TORCH_CHECK(std::rename(partial.c_str(), path(key).c_str()) == 0,
        "could not rename ", partial, " to ", path(key), ": ", std::strerror(errno));
  }

  std::vector<uint8_t> compareSet(
      const std::string& key,
      const std::vector<uint8_t>& expected,
      const std::vector<uint8_t>& desired) override {
    const Locked locked(*this);
    const std::optional<Blob> current = read(key);
    if ((!current && expected.empty()) || (current && *current == expected)) {
      set(key, desired);
      return desired;
    }
    return current ? *current : expected;
  }

  std::vector<uint8_t> get(const std::string& key) override {
    for (;;) {
      wait({key});
      if (std::optional<Blob> value = read(key)) {
        return std::move(*value);
      }
    }
  }

  int64_t add(const std::string& key, int64_t value) override {
    const Locked locked(*this);
    const std::optional<Blob> current = read(key);
    const int64_t sum = value + (current ? std::stoll(std::string(current->begin(), current->end())) : 0);
    const std::string text = std::to_string(sum);
    set(key, Blob(text.begin(), text.end()));
    return sum;
  }

  bool deleteKey(const std::string& key) override {
    return ::unlink(path(key).c_str()) == 0;
  }

  bool check(const std::vector<std::string>& keys) override {
    return std::all_of(keys.begin(), keys.end(), [this](const std::string& key) {
      return ::access(path(key).c_str(), F_OK) == 0;
    });
  }

  int64_t getNumKeys() override {
    int64_t keys = 0;
    if (DIR* dir = ::opendir(folder_.c_str())) {
      while (const dirent* entry = ::readdir(dir)) {
        keys += entry->d_name[0] != '.';
      }
      ::closedir(dir);
    }
    return keys;
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }

  // Looks every 50 us at first, then less often, up to every 5 ms.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    const auto until = Clock::now() + timeout;
    auto nap = std::chrono::microseconds(50);
    while (!check(keys)) {
      if (Clock::now() >= until) {
        C10_THROW_ERROR(DistStoreError, "Wait timeout for keys in " + folder_);
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(2 * nap, std::chrono::microseconds(5000));
    }
  }

 private:
  // An flock() on the folder's lock file while it lives: counters change one at a time.
  class Locked {
   public:
    explicit Locked(const FolderStore& store)
        : fd_(::open((store.folder_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
      TORCH_CHECK(fd_ >= 0 && ::flock(fd_, LOCK_EX) == 0,
          "could not lock ", store.folder_, "/.lock: ", std::strerror(errno));
    }
    ~Locked() {
      ::close(fd_);  // unlocks
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    int fd_;
  };

  // The file of `key`: its characters but letters, digits, '.', '_' and '-' as %XX.
  std::string path(const std::string& key) const {
    static const char* hex = "0123456789ABCDEF";
    std::string name = folder_ + "/k";
    for (const unsigned char c : key) {
      if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
        name += static_cast<char>(c);
      } else {
        name += {'%', hex[c >> 4], hex[c & 15]};
      }
    }
    return name;
  }

  std::optional<Blob> read(const std::string& key) const {
    std::ifstream file(path(key), std::ios::binary);
    if (!file) {
      return std::nullopt;
    }
    return Blob(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }

  const std::string folder_;
};

// The store the exchange moves messages through: the group's, or, for a
// FileStore, a FolderStore beside its file.
c10::intrusive_ptr<c10d::Store> messageStore(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::string& backend,
    const std::string& group) {
  c10::intrusive_ptr<c10d::Store> under = store;
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(under.get())) {
    under = prefixed->getUnderlyingStore();
  }
  const auto* file = dynamic_cast<const c10d::FileStore*>(under.get());
  if (file == nullptr) {
    return store;
  }
  // A folder of this group's own, named by the first rank to ask: a file:// left
  // by an earlier run (its ranks killed) holds folders no new group reads.
  std::ostringstream mine;
  mine << std::hex << std::random_device{}() << std::random_device{}();
  const std::string proposed = mine.str();
  const Blob agreed = store->compareSet("store_exchange/folder", {}, Blob(proposed.begin(), proposed.end()));
  auto folder = c10::make_intrusive<FolderStore>(
      file->getPath() + "." + backend + "/group" + group + "-" + std::string(agreed.begin(), agreed.end()));
  folder->setTimeout(store->getTimeout());
  return folder;
}

} // namespace

StoreExchange::StoreExchange(Bootstrap& store, const std::string& backend, const std::string& group)
    : store_(messageStore(store.c10dStore(), backend, group)) {}

StoreExchange::~StoreExchange() = default;

c10d::Store& StoreExchange::connection(Channel& channel) {
  if (!channel.store) {
    // A connection of our own: a TCPStore client serves one request at a
    // time, and an exchange may block in wait() for a long time. (A store
    // that cannot clone itself is shared, and a waiting receive then holds
    // up the worker thread's exchanges until its data arrives.)
    std::lock_guard<std::mutex> lock(connectMutex_);
    try {
      channel.store = store_->clone();
    } catch (const std::exception&) {
      channel.store = store_;
    }
  }
  return *channel.store;
}

c10d::Store& StoreExchange::traffic() {
  return connection(ops_);
}

c10d::Store& StoreExchange::receiving() {
  return connection(receives_);
}

std::string StoreExchange::collectiveKey(const OpContext& ctx, const std::string& name) {
  std::ostringstream key;
  key << ctx.group.backend << "/c" << ctx.collective << "." << step_ << "/" << name;
  return key.str();
}

std::string StoreExchange::p2pKey(int src, int dst, int tag, uint64_t n) const {
  std::ostringstream key;
  key << "p2p/" << src << ">" << dst << "/t" << tag << "/" << n;
  return key.str();
}

void StoreExchange::take(at::Tensor& tensor, int src, int me, int tag) {
  uint64_t& next = inboxes_[{src, tag}].next;
  const std::string key = p2pKey(src, me, tag, next);
  Blob blob = std::move(getMessages(receiving(), {key}, sizeof(Header) + tensor.nbytes()).front());
  deleteMessages(receiving(), {key}, {blob.size()});
  ++next;
  tensor.copy_(decode(std::move(blob), tensor, tensor.numel(), src).view(tensor.sizes()));
}

void StoreExchange::put(const std::vector<std::string>& keys, std::vector<Blob> blobs) {
  for (size_t i = 0; i < keys.size(); ++i) {
    written_.emplace_back(keys[i], blobs[i].size());
  }
  setMessages(traffic(), keys, std::move(blobs));
}

void StoreExchange::await(
    const OpContext& ctx,
    const std::vector<std::string>& keys,
    const std::vector<int>& fromRanks) {
  c10d::Store& store = traffic();
  {
    std::lock_guard<std::mutex> lock(waitMutex_);
    rank_ = ctx.group.rank;
    TORCH_CHECK(!aborted_, "the process group was destroyed");
    waiting_ = keys;
  }
  const auto remaining =
      std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now());
  bool timedOut = remaining.count() <= 0;
  if (!timedOut) {
    try {
      store.wait(keys, remaining);
      // Reads that follow give up at the deadline too, should a key vanish.
      store.setTimeout(std::max(
          std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now()),
          std::chrono::milliseconds(1)));
    } catch (const c10::DistStoreError&) {
      timedOut = true;
    }
  }
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(waitMutex_);
    waiting_.clear();
    aborted = aborted_;
    if (aborted) {  // the markers that woke this thread: nobody else needs them
      deleteMessages(store, marked_, std::vector<size_t>(marked_.size(), 0));
      marked_.clear();
    }
  }
  if (!aborted && !timedOut) {
    return;
  }
  std::vector<int> missing;
  for (size_t i = 0; !aborted && i < keys.size(); ++i) {
    if (!store.check({keys[i]})) {
      missing.push_back(fromRanks[i]);
    }
  }
  {
    // The collective failed here, and the group with it: what this rank put
    // for it goes when the group is destroyed (a peer may still be reading it).
    std::lock_guard<std::mutex> lock(waitMutex_);
    leftovers_.insert(leftovers_.end(), written_.begin(), written_.end());
    written_.clear();
    if (aborted_) {
      deleteLeftovers(store);
    }
  }
  TORCH_CHECK(!aborted, "the process group was destroyed");
  TORCH_CHECK(
      false,
      "nothing from rank(s) ", ranksText(missing), " within the op's ", ctx.timeout.count(),
      " ms timeout (a rank that never calls ", ctx.op, ", or that died, blocks the others)");
}

void StoreExchange::deleteLeftovers(c10d::Store& store) {
  for (const auto& [key, bytes] : leftovers_) {
    try {
      deleteMessages(store, {key}, {bytes});
    } catch (const std::exception&) {
      return;  // the store is gone, and the keys with it
    }
  }
  leftovers_.clear();
}

void StoreExchange::close() {
  std::lock_guard<std::mutex> lock(waitMutex_);
  deleteLeftovers(*store_);
}

void StoreExchange::abort() {
  std::lock_guard<std::mutex> lock(waitMutex_);
  aborted_ = true;
  Blob marker(sizeof(Header));
  const Header header{kAbortMagic, rank_, 0};
  std::memcpy(marker.data(), &header, sizeof(Header));
  for (const std::string& key : waiting_) {
    try {
      // Sets only keys that do not exist: compareSet with an empty expected value.
      if (store_->compareSet(key, {}, marker) == marker) {
        marked_.push_back(key);
      }
    } catch (const std::exception&) {
      // The store is gone as well: the thread's wait fails on its own.
    }
  }
}

void StoreExchange::dropWhenAllRead(
    const std::string& counter,
    int64_t readers,
    const std::vector<std::string>& keys,
    size_t bytes) {
  if (traffic().add(counter, 1) == readers) {
    deleteMessages(traffic(), keys, std::vector<size_t>(keys.size(), bytes));
    traffic().deleteKey(counter);
  }
}

std::vector<at::Tensor> StoreExchange::allgather(const OpContext& ctx, const at::Tensor& tensor) {
  const int me = ctx.group.rank;
  const int size = ctx.group.size;
  if (size == 1) {
    return {onHost(tensor)};
  }
  beginExchange(ctx);
  std::vector<std::string> keys;
  std::vector<int> from;
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) {
    all.push_back(collectiveKey(ctx, "r" + std::to_string(r)));
    if (r != me) {
      keys.push_back(all.back());
      from.push_back(r);
    }
  }
  put({all[me]}, {encode(tensor)});
  await(ctx, keys, from);
  const size_t bytes = sizeof(Header) + tensor.nbytes();
  std::vector<Blob> blobs = getMessages(traffic(), keys, keys.size() * bytes);
  // Every rank's message is as long as this one's: the sizes were checked to match.
  dropWhenAllRead(collectiveKey(ctx, "read"), size, all, bytes);
  std::vector<at::Tensor> result;
  for (int r = 0, i = 0; r < size; ++r) {
    result.push_back(
        r == me ? onHost(tensor)
                : decode(std::move(blobs[i++]), tensor, tensor.numel(), r).view(tensor.sizes()));
  }
  return result;
}

std::vector<at::Tensor> StoreExchange::gather(
    const OpContext& ctx,
    const at::Tensor& tensor,
    int root) {
  const int me = ctx.group.rank;
  const int size = ctx.group.size;
  if (size == 1) {
    return {onHost(tensor)};
  }
  beginExchange(ctx);
  if (me != root) {
    put({collectiveKey(ctx, "r" + std::to_string(me))}, {encode(tensor)});
    return {};
  }
  std::vector<std::string> keys;
  std::vector<int> from;
  for (int r = 0; r < size; ++r) {
    if (r != me) {
      keys.push_back(collectiveKey(ctx, "r" + std::to_string(r)));
      from.push_back(r);
    }
  }
  await(ctx, keys, from);
  std::vector<Blob> blobs =
      getMessages(traffic(), keys, keys.size() * (sizeof(Header) + tensor.nbytes()));
  deleteMessages(traffic(), keys, sizesOf(blobs));  // the root is the only reader
  std::vector<at::Tensor> result;
  for (int r = 0, i = 0; r < size; ++r) {
    result.push_back(
        r == me ? onHost(tensor)
                : decode(std::move(blobs[i++]), tensor, tensor.numel(), r).view(tensor.sizes()));
  }
  return result;
}

void StoreExchange::broadcast(const OpContext& ctx, at::Tensor& tensor, int root) {
  const int size = ctx.group.size;
  if (size == 1) {
    return;
  }
  beginExchange(ctx);
  const std::string key = collectiveKey(ctx, "b");
  if (ctx.group.rank == root) {
    put({key}, {encode(tensor)});
    return;
  }
  await(ctx, {key}, {root});
  Blob blob = std::move(getMessages(traffic(), {key}, sizeof(Header) + tensor.nbytes()).front());
  dropWhenAllRead(collectiveKey(ctx, "read"), size - 1, {key}, blob.size());
  tensor.copy_(decode(std::move(blob), tensor, tensor.numel(), root).view(tensor.sizes()));
}

at::Tensor StoreExchange::scatter(
    const OpContext& ctx,
    const std::vector<at::Tensor>& chunks,
    int root,
    const at::Tensor& like) {
  const int me = ctx.group.rank;
  const int size = ctx.group.size;
  if (size == 1) {
    return chunks.at(0);
  }
  beginExchange(ctx);
  if (me == root) {
    std::vector<std::string> keys;
    std::vector<Blob> blobs;
    for (int r = 0; r < size; ++r) {
      if (r != me) {
        keys.push_back(collectiveKey(ctx, "s" + std::to_string(r)));
        blobs.push_back(encode(chunks[r]));
      }
    }
    put(keys, std::move(blobs));
    return chunks[me];
  }
  const std::string key = collectiveKey(ctx, "s" + std::to_string(me));
  await(ctx, {key}, {root});
  Blob blob = std::move(getMessages(traffic(), {key}, sizeof(Header) + like.nbytes()).front());
  deleteMessages(traffic(), {key}, {blob.size()});
  return decode(std::move(blob), like, like.numel(), root).view(like.sizes());
}

std::vector<at::Tensor> StoreExchange::alltoall(
    const OpContext& ctx,
    const std::vector<at::Tensor>& chunks,
    const std::vector<int64_t>& counts) {
  const int me = ctx.group.rank;
  const int size = ctx.group.size;
  const at::Tensor& like = chunks.at(me);
  TORCH_CHECK(
      like.numel() == counts.at(me),
      "this rank sends itself ", like.numel(), " elements but expects ", counts.at(me));
  if (size == 1) {
    return {onHost(like).reshape(-1)};
  }
  beginExchange(ctx);
  std::vector<std::string> outgoing;
  std::vector<Blob> blobs;
  std::vector<std::string> incoming;
  std::vector<int> from;
  std::vector<int64_t> expected;
  for (int r = 0; r < size; ++r) {
    if (r == me) {
      continue;
    }
    outgoing.push_back(collectiveKey(ctx, std::to_string(me) + ">" + std::to_string(r)));
    blobs.push_back(encode(chunks[r]));
    incoming.push_back(collectiveKey(ctx, std::to_string(r) + ">" + std::to_string(me)));
    from.push_back(r);
    expected.push_back(counts[r]);
  }
  put(outgoing, std::move(blobs));
  await(ctx, incoming, from);
  size_t expectedBytes = 0;
  for (const int64_t count : expected) {
    expectedBytes += sizeof(Header) + static_cast<size_t>(count) * like.element_size();
  }
  std::vector<Blob> received = getMessages(traffic(), incoming, expectedBytes);
  deleteMessages(traffic(), incoming, sizesOf(received));  // each chunk has one reader: this rank
  std::vector<at::Tensor> result;
  for (int r = 0, i = 0; r < size; ++r) {
    if (r == me) {
      result.push_back(onHost(like).reshape(-1));
    } else {
      result.push_back(decode(std::move(received[i]), like, expected[i], r));
      ++i;
    }
  }
  return result;
}

void StoreExchange::barrier(const OpContext& ctx) {
  const int me = ctx.group.rank;
  const int size = ctx.group.size;
  if (size == 1) {
    return;
  }
  beginExchange(ctx);
  std::vector<std::string> all;
  std::vector<std::string> others;
  std::vector<int> from;
  for (int r = 0; r < size; ++r) {
    all.push_back(collectiveKey(ctx, "r" + std::to_string(r)));
    if (r != me) {
      others.push_back(all.back());
      from.push_back(r);
    }
  }
  put({all[me]}, {Blob{}});
  await(ctx, others, from);
  dropWhenAllRead(collectiveKey(ctx, "read"), size, all, 0);
}

void StoreExchange::send(const OpContext& ctx, const at::Tensor& tensor, int dst, int tag) {
  Blob blob = encode(tensor);
  std::lock_guard<std::mutex> lock(sendMutex_);
  uint64_t& n = sent_[{dst, tag}];
  // The receiver deletes it.
  setMessages(connection(sends_), {p2pKey(ctx.group.rank, dst, tag, n)}, {std::move(blob)});
  ++n;
}

uint64_t StoreExchange::postRecv(int src, int tag) {
  (src == kAnySource ? anysource_[tag] : inboxes_[{src, tag}].waiting).push_back(tickets_);
  return tickets_++;
}

std::optional<int> StoreExchange::tryRecv(
    const OpContext& ctx,
    at::Tensor& tensor,
    int src,
    int tag,
    uint64_t ticket) {
  std::deque<uint64_t>& line = src == kAnySource ? anysource_[tag] : inboxes_[{src, tag}].waiting;
  const auto giveUp = [&line, ticket] { line.erase(std::remove(line.begin(), line.end(), ticket), line.end()); };
  try {
    if (!ctx.expired()) {
      const std::optional<int> from = line.front() == ticket ? arrived(ctx, src, tag, ticket) : std::nullopt;
      if (from) {
        line.pop_front();
        take(tensor, *from, ctx.group.rank, tag);
      }
      return from;
    }
  } catch (...) {
    giveUp();
    throw;
  }
  // Given up: the next receive that matches takes the message.
  giveUp();
  TORCH_CHECK(!ctx.group.aborted.load(), "the process group was destroyed");
  TORCH_CHECK(src != kAnySource,
      "no rank sent a message with tag ", tag, " within the op's ", ctx.timeout.count(),
      " ms timeout (is a matching send missing?)");
  TORCH_CHECK(false,
      "nothing from rank ", src, " with tag ", tag, " within the op's ", ctx.timeout.count(),
      " ms timeout (is the matching send missing, or did rank ", src, " die?)");
}

std::optional<int> StoreExchange::arrived(const OpContext& ctx, int src, int tag, uint64_t ticket) {
  const auto earlier = [ticket](const std::deque<uint64_t>& line) {
    return !line.empty() && line.front() < ticket;
  };
  const auto ready = [&](int from) {
    const uint64_t n = inboxes_[{from, tag}].next;
    return receiving().check({p2pKey(from, ctx.group.rank, tag, n)});
  };
  if (src != kAnySource) {
    return earlier(anysource_[tag]) || !ready(src) ? std::nullopt : std::optional<int>(src);
  }
  for (int from = 0; from < ctx.group.size; ++from) {
    if (from != ctx.group.rank && !earlier(inboxes_[{from, tag}].waiting) && ready(from)) {
      return from;
    }
  }
  return std::nullopt;
}

void StoreExchange::beginExchange(const OpContext& ctx) {
  if (ctx.collective != collective_) {
    collective_ = ctx.collective;
    step_ = 0;
    written_.clear();
  } else {
    ++step_;
  }
}

} // namespace NEW_BACKEND_NAMESPACE

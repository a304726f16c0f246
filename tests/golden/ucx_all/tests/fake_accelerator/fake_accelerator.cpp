// A fake accelerator for the tests: a PrivateUse1 device that behaves like a
// real one wherever a communication backend can get streams or memory wrong,
// on a machine without an accelerator. Python names it and loads it
// (__init__.py); torch.distributed then sees an out-of-tree device.
//
// - Memory the host cannot read. Each allocation is address space mapped
//   PROT_NONE (the pointers tensors hold) plus a second, writable mapping of
//   the same pages that only the device's kernels use: host code that reads
//   device memory directly faults, as it would on a GPU.
// - Streams that run asynchronously: each stream is a queue of tasks that a
//   thread of its own runs in order. Stream 0 is the default stream, 1 to
//   kPoolStreams the pool, higher ids are new streams.
// - Events mark a point in a stream (a task of their own, which notes the
//   time it ran): record, query, block, synchronize and elapsed time, as
//   c10::Event expects.
// - A caching allocator that honours recordStream: a block freed while
//   streams other than its own were recorded on it is reused only once those
//   streams reached the free (a deferred free); otherwise a freed block is
//   reused at once, but only by its own stream, which is safe in stream order.
// - Copies: host to device takes a snapshot of the host data and queues the
//   write on the current stream (it may land later, as a pageable cudaMemcpy
//   may); device to host is queued on the current stream and waited for;
//   device to device is queued.
// - Ops: fill_, zero_ and copies are kernels queued on the current stream,
//   views only touch metadata, every other op falls back to the CPU (copies
//   to the host, the op, copies back: in stream order, on the calling thread).
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fake_accelerator {
namespace {

constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
constexpr c10::StreamId kPoolStreams = 4;
constexpr size_t kBlockRound = 512;  // allocations are rounded up to this many bytes

const c10::Device kDevice(kType, 0);

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A stream: tasks run in order by a thread of its own, started with the first task.
class Stream {
 public:
  // Queues `task`; returns its number in the stream (1, 2, ...).
  uint64_t push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      std::thread([this] { loop(); }).detach();  // the device is never destroyed: see Device::get
      started_ = true;
    }
    tasks_.push_back(std::move(task));
    cv_.notify_all();
    return ++queued_;
  }
  bool reached(uint64_t seq) const {
    return completed_.load(std::memory_order_acquire) >= seq;
  }
  bool idle() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_.load() == queued_;
  }
  void waitFor(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_.load() >= seq; });
  }
  void synchronize() {
    uint64_t last = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = queued_;
    }
    waitFor(last);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return !tasks_.empty(); });
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it held goes before the stream moves on
      lock.lock();
      completed_.fetch_add(1, std::memory_order_release);
      cv_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  uint64_t queued_ = 0;
  std::atomic<uint64_t> completed_{0};
  bool started_ = false;
};

// A point in a stream: reached once the stream ran the task queued there.
struct Mark {
  Stream* stream = nullptr;
  uint64_t seq = 0;
  std::atomic<int64_t> ns{-1};  // when the stream reached it
  bool reached() const {
    return stream->reached(seq);
  }
};

// What the device's kernels ran into; the next synchronization raises it.
std::mutex errorMutex;
std::string firstError;

void raiseKernelError() {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(errorMutex);
    error.swap(firstError);
  }
  TORCH_CHECK(error.empty(), "fake accelerator: a kernel failed: ", error);
}

// The one device: its streams, and the current stream of each thread.
class Device {
 public:
  // Never destroyed: the streams' threads may run until the process exits.
  static Device& get() {
    static Device* device = new Device();
    return *device;
  }

  Stream& stream(c10::StreamId id) {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(id >= 0 && id < static_cast<c10::StreamId>(streams_.size()), "fake accelerator: no stream ", id);
    return *streams_[id];
  }
  c10::StreamId poolStream() {
    return 1 + nextPool_.fetch_add(1) % kPoolStreams;
  }
  c10::StreamId newStream() {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.push_back(std::make_unique<Stream>());
    return static_cast<c10::StreamId>(streams_.size()) - 1;
  }
  void synchronize() {
    size_t count = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count = streams_.size();
    }
    for (size_t id = 0; id < count; ++id) {
      stream(static_cast<c10::StreamId>(id)).synchronize();
    }
    raiseKernelError();
  }
  // Queues `kernel` on the current stream; an exception it throws is kept
  // for the next synchronization.
  uint64_t launch(std::function<void()> kernel) {
    return stream(current).push([kernel = std::move(kernel)] {
      try {
        kernel();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (firstError.empty()) {
          firstError = e.what();
        }
      }
    });
  }
  // Marks where stream `id` is now.
  std::shared_ptr<Mark> mark(c10::StreamId id) {
    auto mark = std::make_shared<Mark>();
    mark->stream = &stream(id);
    mark->seq = mark->stream->push([mark] { mark->ns.store(nowNs()); });
    return mark;
  }

  static thread_local c10::StreamId current;
  std::atomic<int64_t> copyLatencyMs{0};

 private:
  Device() {
    for (c10::StreamId id = 0; id <= kPoolStreams; ++id) {
      streams_.push_back(std::make_unique<Stream>());
    }
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::atomic<int64_t> nextPool_{0};
};

thread_local c10::StreamId Device::current = 0;

// Device memory: PROT_NONE pages for the host, a writable alias for kernels.
class Memory {
 public:
  static Memory& get() {
    static Memory* memory = new Memory();
    return *memory;
  }

  // `bytes` of new device memory.
  void* map(size_t bytes) {
    const int fd = memfd_create("fake_accelerator", MFD_CLOEXEC);
    TORCH_CHECK(fd >= 0, "fake accelerator: memfd_create failed: ", std::strerror(errno));
    void* device = MAP_FAILED;
    void* kernel = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      device = mmap(nullptr, bytes, PROT_NONE, MAP_SHARED, fd, 0);
      kernel = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    const int error = errno;
    close(fd);
    TORCH_CHECK(
        device != MAP_FAILED && kernel != MAP_FAILED, "fake accelerator: out of memory mapping ", bytes,
        " bytes: ", std::strerror(error));
    std::lock_guard<std::mutex> lock(mutex_);
    segments_[reinterpret_cast<uintptr_t>(device)] = {static_cast<char*>(kernel), bytes};
    return device;
  }

  // Where a kernel reads and writes the device address `p`.
  char* kernelAddress(const void* p) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = segments_.upper_bound(address);
    TORCH_CHECK(it != segments_.begin(), "fake accelerator: ", p, " is not device memory");
    --it;
    TORCH_CHECK(address - it->first <= it->second.bytes, "fake accelerator: ", p, " is not device memory");
    return it->second.kernel + (address - it->first);
  }

 private:
  struct Segment {
    char* kernel;
    size_t bytes;
  };
  std::mutex mutex_;
  std::map<uintptr_t, Segment> segments_;  // by device address
};

// A CPU tensor over the device memory of `t`, for a kernel's use only.
at::Tensor kernelView(const at::Tensor& t) {
  const auto options = t.options().device(at::kCPU);
  if (t.numel() == 0) {
    return at::empty(t.sizes(), options);
  }
  return at::from_blob(Memory::get().kernelAddress(t.data_ptr()), t.sizes(), t.strides(), options);
}

// The caching allocator: blocks are kept by (stream, size) once freed.
class CachingAllocator final : public c10::Allocator {
 public:
  struct Stats {
    int64_t allocations = 0;    // blocks mapped
    int64_t reuses = 0;         // allocations served from the cache
    int64_t frees = 0;          // blocks freed
    int64_t deferredFrees = 0;  // frees that waited for other streams (recordStream)
  };

  static CachingAllocator& get() {
    static CachingAllocator* allocator = new CachingAllocator();
    return *allocator;
  }

  c10::DataPtr allocate(size_t n) override {
    if (n == 0) {
      return {nullptr, kDevice};
    }
    const size_t size = (n + kBlockRound - 1) / kBlockRound * kBlockRound;
    const c10::StreamId stream = Device::current;
    std::lock_guard<std::mutex> lock(mutex_);
    collectDeferred();
    Block* block = nullptr;
    const auto cached = free_.find({stream, size});
    if (cached != free_.end()) {
      block = cached->second;
      free_.erase(cached);
      ++stats_.reuses;
    } else {
      block = new Block{Memory::get().map(size), size, stream, {}, {}};
      ++stats_.allocations;
    }
    return {block->ptr, block, &release, kDevice};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    char* to = Memory::get().kernelAddress(dest);
    const char* from = Memory::get().kernelAddress(src);
    Device::get().launch([to, from, count] { std::memcpy(to, from, count); });
  }

  // The block of `data` is in use on `stream` too (Tensor.record_stream).
  void recordStream(const c10::DataPtr& data, c10::StreamId stream) {
    if (data.get_deleter() != &release) {
      return;  // no memory (an empty tensor)
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Block* block = static_cast<Block*>(data.get_context());
    if (stream != block->stream) {
      block->uses.insert(stream);
    }
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    collectDeferred();
    return stats_;
  }

 private:
  struct Block {
    void* ptr;
    size_t size;
    c10::StreamId stream;                      // the stream it was allocated on
    std::set<c10::StreamId> uses;              // other streams recorded on it
    std::vector<std::shared_ptr<Mark>> waits;  // a deferred free: where those streams were at the free
  };

  static void release(void* context) {
    get().free(static_cast<Block*>(context));
  }

  void free(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.frees;
    if (block->uses.empty()) {
      free_.emplace(std::make_pair(block->stream, block->size), block);
      return;
    }
    for (const c10::StreamId stream : block->uses) {
      block->waits.push_back(Device::get().mark(stream));
    }
    block->uses.clear();
    deferred_.push_back(block);
    ++stats_.deferredFrees;
  }

  // Moves the deferred blocks whose streams reached their free to the cache.
  void collectDeferred() {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      Block* block = *it;
      bool reached = true;
      for (const auto& mark : block->waits) {
        reached = reached && mark->reached();
      }
      if (reached) {
        block->waits.clear();
        free_.emplace(std::make_pair(block->stream, block->size), block);
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::mutex mutex_;
  std::multimap<std::pair<c10::StreamId, size_t>, Block*> free_;
  std::vector<Block*> deferred_;
  Stats stats_;
};

REGISTER_ALLOCATOR(kType, &CachingAllocator::get());

// A c10::Event of this device.
struct Event {
  std::mutex mutex;
  std::shared_ptr<Mark> mark;  // null until recorded

  std::shared_ptr<Mark> get() {
    std::lock_guard<std::mutex> lock(mutex);
    return mark;
  }
};

std::shared_ptr<Mark> markOf(void* event) {
  return event ? static_cast<Event*>(event)->get() : nullptr;
}

c10::Stream streamOf(c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, kDevice, id);
}

void checkDevice(c10::Device device) {
  TORCH_CHECK(
      device.type() == kType && device.index() <= 0, "fake accelerator: there is one device (index 0), not ", device);
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kType;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    checkDevice(device);
    return kDevice;
  }
  c10::Device getDevice() const override {
    return kDevice;
  }
  void setDevice(c10::Device device) const override {
    checkDevice(device);
  }
  void uncheckedSetDevice(c10::Device /*device*/) const noexcept override {}
  c10::Stream getStream(c10::Device /*device*/) const override {
    return streamOf(Device::current);
  }
  c10::Stream getDefaultStream(c10::Device /*device*/) const override {
    return streamOf(0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device /*device*/, bool /*isHighPriority*/) const override {
    return streamOf(Device::get().poolStream());
  }
  c10::Stream getNewStream(c10::Device /*device*/, int /*priority*/) const override {
    return streamOf(Device::get().newStream());
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::Stream previous = streamOf(Device::current);
    Device::current = stream.id();
    return previous;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return 1;
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex /*index*/, const c10::EventFlag /*flag*/)
      const override {
    if (*event == nullptr) {
      *event = new Event();
    }
    auto mark = Device::get().mark(stream.id());
    auto* ours = static_cast<Event*>(*event);
    std::lock_guard<std::mutex> lock(ours->mutex);
    ours->mark = std::move(mark);
  }
  void block(void* event, const c10::Stream& stream) const override {
    std::shared_ptr<Mark> mark = markOf(event);
    if (mark && mark->stream != &Device::get().stream(stream.id())) {
      Device::get().stream(stream.id()).push([mark] { mark->stream->waitFor(mark->seq); });
    }
  }
  bool queryEvent(void* event) const override {
    std::shared_ptr<Mark> mark = markOf(event);
    return !mark || mark->reached();
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*index*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    return Device::get().stream(stream.id()).idle();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    Device::get().stream(stream.id()).synchronize();
    raiseKernelError();
  }
  void synchronizeEvent(void* event) const override {
    if (std::shared_ptr<Mark> mark = markOf(event)) {
      mark->stream->waitFor(mark->seq);
    }
    raiseKernelError();
  }
  void synchronizeDevice(const c10::DeviceIndex /*index*/) const override {
    Device::get().synchronize();
  }
  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    CachingAllocator::get().recordStream(data, stream.id());
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*index*/) const override {
    std::shared_ptr<Mark> from = markOf(start);
    std::shared_ptr<Mark> to = markOf(end);
    TORCH_CHECK(from && to, "fake accelerator: elapsed_time needs two recorded events");
    TORCH_CHECK(from->reached() && to->reached(), "fake accelerator: elapsed_time of events not reached yet");
    return static_cast<double>(to->ns.load() - from->ns.load()) / 1e6;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// What torch asks an accelerator (torch.accelerator, torch.distributed's barrier...).
struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return true;
  }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override {
    return true;
  }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return 1;
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    checkDevice(c10::Device(kType, index));
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return 0;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    checkDevice(c10::Device(kType, index));
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return kDevice;
  }
  bool isPinnedPtr(const void* /*data*/) const override {
    return false;
  }
};

const bool hooksRegistered [[maybe_unused]] = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());  // kept for the life of the process
  return true;
}();

// -- kernels ------------------------------------------------------------------

at::Tensor empty(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pinMemory,
    std::optional<c10::MemoryFormat> memoryFormat) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "fake accelerator: only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pinMemory), "fake accelerator: no pinned memory");
  checkDevice(c10::device_or_default(device));
  return at::detail::empty_generic(
      size, &CachingAllocator::get(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype), memoryFormat);
}

at::Tensor emptyStrided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pinMemory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided, "fake accelerator: only strided tensors");
  TORCH_CHECK(!c10::pinned_memory_or_default(pinMemory), "fake accelerator: no pinned memory");
  checkDevice(c10::device_or_default(device));
  return at::detail::empty_strided_generic(
      size, stride, &CachingAllocator::get(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype));
}

const at::Tensor& resize(
    const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memoryFormat) {
  if (self.sizes() == size && !memoryFormat) {
    return self;
  }
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.itemsize(), impl->storage_offset());
  if (needed > storage->nbytes()) {
    c10::DataPtr fresh = CachingAllocator::get().allocate(needed);
    if (storage->nbytes() > 0) {
      CachingAllocator::get().copy_data(fresh.get(), storage->data(), storage->nbytes());
    }
    storage->set_data_ptr_noswap(std::move(fresh));  // the old block: reused in stream order
    storage->set_nbytes(needed);
  }
  if (memoryFormat) {
    impl->empty_tensor_restride(*memoryFormat);
  }
  return self;
}

at::Tensor& fill(at::Tensor& self, const c10::Scalar& value) {
  Device::get().launch([view = kernelView(self), value]() mutable { view.fill_(value); });
  return self;
}

at::Tensor& zero(at::Tensor& self) {
  Device::get().launch([view = kernelView(self)]() mutable { view.zero_(); });
  return self;
}

// copy_ of `self` into `dst`, one of them or both on the device (with
// broadcasting and dtype conversion, as copy_ does).
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool /*nonBlocking*/) {
  Device& device = Device::get();
  if (dst.is_cpu()) {  // to the host: queued, and waited for
    auto error = std::make_shared<std::exception_ptr>();
    const uint64_t seq = device.stream(Device::current).push([to = dst, from = kernelView(self), error]() mutable {
      try {
        to.copy_(from);
      } catch (...) {
        *error = std::current_exception();
      }
    });
    device.stream(Device::current).waitFor(seq);
    if (*error) {
      std::rethrow_exception(*error);
    }
  } else if (self.is_cpu()) {  // from the host: a snapshot now, the write when the stream gets there
    const int64_t latency = device.copyLatencyMs.load();
    device.launch([to = kernelView(dst), from = self.clone(), latency]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(latency));
      to.copy_(from);
    });
  } else {
    device.launch([to = kernelView(dst), from = kernelView(self)]() mutable { to.copy_(from); });
  }
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_cpu()) {
    dst.resize_(self.sizes());
  } else {
    resize(dst, self.sizes(), std::nullopt);
  }
  return copyFrom(self, dst, false);
}

void recordStream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kType, "fake accelerator: record_stream with a stream of ", stream.device());
  CachingAllocator::get().recordStream(self.storage().data_ptr(), stream.id());
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", emptyStrided);
  m.impl("resize_", resize);
  m.impl("fill_.Scalar", fill);
  m.impl("zero_", zero);
  m.impl("_copy_from", copyFrom);
  m.impl("_copy_from_and_resize", copyFromAndResize);
  m.impl("record_stream", recordStream);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  m.impl("unfold", at::native::unfold);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

// -- what the Python package calls (torch.ops.fake_accelerator.*) -------------

void sleep(int64_t ms) {
  Device::get().launch([ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

void synchronize() {
  Device::get().synchronize();
}

std::vector<int64_t> stats() {
  const CachingAllocator::Stats s = CachingAllocator::get().stats();
  return {s.allocations, s.reuses, s.frees, s.deferredFrees};
}

int64_t setCopyLatency(int64_t ms) {
  return Device::get().copyLatencyMs.exchange(ms);
}

c10::Stream currentStream() {
  return streamOf(Device::current);
}

c10::Stream setStream(c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kType, "fake accelerator: ", stream, " is not a stream of this device");
  return GuardImpl().exchangeStream(stream);
}

c10::Stream newStream() {
  return streamOf(Device::get().newStream());
}

TORCH_LIBRARY(fake_accelerator, m) {
  m.def("sleep(int ms) -> ()", sleep);
  m.def("synchronize() -> ()", synchronize);
  m.def("stats() -> int[]", stats);
  m.def("set_copy_latency(int ms) -> int", setCopyLatency);
  m.def("current_stream() -> Stream", currentStream);
  m.def("set_stream(Stream stream) -> Stream", setStream);
  m.def("new_stream() -> Stream", newStream);
}

} // namespace
} // namespace fake_accelerator

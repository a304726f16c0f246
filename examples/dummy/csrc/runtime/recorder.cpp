// The flight recorder of Backend, and how a rank whose collective
// timed out learns from the others which of them never entered it. See
// "The flight recorder" in backend.hpp.
#include "backend.hpp"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <dlfcn.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

namespace NEW_BACKEND_NAMESPACE {
namespace {

// How often the watcher looks whether an op of the process is stuck, and then
// asks each group's store whether a peer's collective timed out.
constexpr auto kWatchEvery = std::chrono::seconds(1);
// How long a rank whose collective timed out waits for the others to say which
// collective they reached: two of the watcher's periods, and time to spare.
constexpr auto kAnswerWithin = std::chrono::seconds(3);
// How long a dump waits for the Python frames of its ops (symbolized()): the
// first reading in a process imports the Python modules that do it.
constexpr auto kSymbolizeWithin = std::chrono::seconds(10);
// The keys of that conversation, in the group's store.
constexpr char kAskedKey[] = "flight_recorder/asked";  // read by the watcher while the process exits

// The answer of a rank that destroyed its group with ops under way: "destroyed <collectives entered>".
constexpr std::string_view kDestroyed = "destroyed ";

std::string answerKey(int rank) {
  return "flight_recorder/rank" + std::to_string(rank);
}

// The first of `names` that is set, else nullptr.
const char* environment(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) {
      return value;
    }
  }
  return nullptr;
}

bool dumpOnTimeout() {
  static const bool on = [] {
    const char* value = environment({"TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT"});
    return value == nullptr || !(std::string_view(value) == "0" || std::string_view(value) == "false" ||
                                 std::string_view(value) == "False" || std::string_view(value) == "off");
  }();
  return on;
}

int64_t wallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

template <typename F>
void forEachTensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      forEachTensor(item, f);
    }
  }
}

// The plain (untyped) dicts and lists c10d's dumps are made of.
c10::Dict<c10::IValue, c10::IValue> newDict() {
  return c10::Dict<c10::IValue, c10::IValue>(c10::AnyType::get(), c10::AnyType::get());
}

c10::List<c10::IValue> newList() {
  return c10::List<c10::IValue>(c10::AnyType::get());
}

std::vector<uint8_t> bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

// Set by atInterpreterExit: the groups destroyed from then on leave their stores alone.
std::atomic<bool> interpreterExits{false};

// The threads reading Python frames (Recorder::symbolized). A thread that
// waits for the GIL once the interpreter is finalizing brings the process
// down, so the interpreter, at exit (atInterpreterExit, from Python's atexit),
// lets those under way finish and allows no more.
struct FrameReaders {
  static FrameReaders& get() {
    // A forked child starts afresh: the threads reading frames were its parent's.
    static const int forkSafe = pthread_atfork(nullptr, nullptr, [] { instance() = new FrameReaders(); });
    (void)forkSafe;
    return *instance();
  }
  static FrameReaders*& instance() {
    static FrameReaders* readers = new FrameReaders();  // never destroyed: its threads may outlive exit()
    return readers;
  }
  void left() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      --active;
    }
    idle.notify_all();
  }
  std::mutex mutex;
  std::condition_variable idle;
  int active = 0;
  bool closed = false;
};

// The ring of the process's last ops. One mutex, held for a few hundred
// nanoseconds by each op when it is issued, starts and finishes.
class Recorder {
 public:
  // Made by the first op, so that it reads the environment as the program left it.
  static Recorder& get() {
    // A forked child may not find the mutex free: it starts afresh.
    static const int forkSafe = pthread_atfork(nullptr, nullptr, [] { instance() = new Recorder(); });
    (void)forkSafe;
    return *instance();
  }

  bool enabled() const {
    return capacity_ > 0;
  }

  int64_t record(const OpRecord& op) {
    if (capacity_ == 0) {
      return -1;
    }
    const char* name = recordedName(op.method);
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() < capacity_) {
      entries_.emplace_back();
    }
    const int64_t id = next_++;
    Entry& e = entries_[static_cast<size_t>(id) % capacity_];
    e.id = id;
    e.group = op.group;
    e.name = name;
    e.rank = op.rank;
    e.peer = op.peer;
    e.p2p = op.p2p;
    e.collective = op.collective;
    e.p2pNumber = op.p2pNumber;
    e.op = op.op;
    e.timeoutMs = op.timeout.count();
    e.inputDims.clear();
    e.outputDims.clear();
    e.sizes.clear();
    e.inputDtypes.clear();
    e.outputDtypes.clear();
    const auto add = [&e](c10::SmallVector<int64_t, 4>& dims, c10::SmallVector<c10::ScalarType, 4>& dtypes) {
      return [&e, &dims, &dtypes](const at::Tensor& tensor) {
        dims.push_back(tensor.dim());
        e.sizes.append(tensor.sizes().begin(), tensor.sizes().end());
        dtypes.push_back(tensor.scalar_type());
      };
    };
    forEachTensor(op.inputs, add(e.inputDims, e.inputDtypes));
    if (e.inputDims.empty()) {
      forEachTensor(op.outputs, add(e.inputDims, e.inputDtypes));  // it reads what it writes
    }
    forEachTensor(op.outputs, add(e.outputDims, e.outputDtypes));
    e.createdNs = wallClockNs();
    e.startedNs.reset();
    e.completedNs.reset();
    e.durationMs.reset();
    e.state = "scheduled";
    e.error.clear();
    e.thread = std::this_thread::get_id();
    e.retired = false;
    e.frames = op.frames;  // the one it replaces goes under the lock: it frees no Python object there
    return id;
  }

  std::string describe(uint64_t groupUid, uint64_t number) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t first = std::max<int64_t>(0, next_ - static_cast<int64_t>(capacity_));
    for (int64_t id = next_ - 1; id >= first; --id) {
      const Entry& e = entries_[static_cast<size_t>(id) % capacity_];
      if (e.p2p || e.group->uid != groupUid || e.collective != number) {
        continue;
      }
      std::ostringstream text;
      text << e.name;
      if (!e.inputDims.empty()) {
        text << " of " << e.inputDtypes[0] << "[";
        for (int64_t d = 0; d < e.inputDims[0]; ++d) {
          text << (d ? ", " : "") << e.sizes[static_cast<size_t>(d)];
        }
        text << "]" << (e.inputDims.size() > 1 ? " and " + std::to_string(e.inputDims.size() - 1) + " more" : "");
      }
      return text.str();
    }
    return "";
  }

  void started(int64_t id) {
    if (id < 0) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (Entry* e = find(id)) {
      e->startedNs = wallClockNs();
      e->state = "started";
    }
  }

  void finished(int64_t id, const char* state, std::optional<float> durationMs, const std::string& error) {
    if (id < 0) {
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (Entry* e = find(id)) {
      e->completedNs = wallClockNs();
      e->durationMs = durationMs;
      e->state = state;
      e->error = error;
      e->retired = true;
    }
  }

  // The record as c10d's FlightRecorder dumps it (its version 2.10).
  c10::IValue dump() {
    auto entries = newList();
    auto groups = newDict();
    std::map<uint64_t, std::array<int64_t, 3>> progress;  // per group: last enqueued, started, completed
    const std::vector<Entry> copy = live();
    const std::vector<c10::List<c10::IValue>> frames = symbolized(copy);
    for (size_t i = 0; i < copy.size(); ++i) {
      const Entry& e = copy[i];
      entries.push_back(toDict(e, frames[i]));
      const RecordedGroup& group = *e.group;
      if (!groups.contains(group.name)) {
        std::ostringstream ranks;
        ranks << "[";
        for (size_t i = 0; i < group.ranks.size(); ++i) {
          ranks << (i ? ", " : "") << group.ranks[i];
        }
        ranks << "]";
        auto config = newDict();
        config.insert("name", group.name);
        config.insert("desc", group.desc);
        config.insert("ranks", ranks.str());
        groups.insert(group.name, config);
      }
      auto& last = progress.try_emplace(group.uid, std::array<int64_t, 3>{-1, -1, -1}).first->second;
      if (!e.p2p) {
        const auto n = static_cast<int64_t>(e.collective);
        last[0] = std::max(last[0], n);
        last[1] = e.startedNs ? std::max(last[1], n) : last[1];
        last[2] = std::string_view(e.state) == "completed" ? std::max(last[2], n) : last[2];
      }
    }
    auto status = newDict();
    for (const auto& [uid, last] : progress) {
      auto of = newDict();
      of.insert("last_enqueued_collective", last[0]);
      of.insert("last_started_collective", last[1]);
      of.insert("last_completed_collective", last[2]);
      status.insert(std::to_string(uid), of);
    }
    auto result = newDict();
    result.insert("version", "2.10");
    result.insert("comm_lib_version", NEW_BACKEND_NAME);
    result.insert("pg_config", groups);
    result.insert("pg_status", status);
    result.insert("entries", entries);
    return result;
  }

 private:
  struct Entry {
    int64_t id = -1;
    std::shared_ptr<const RecordedGroup> group;
    const char* name = "";
    int rank = 0;
    int peer = -1;
    bool p2p = false;
    uint64_t collective = 0;
    uint64_t p2pNumber = 0;
    uint64_t op = 0;
    int64_t timeoutMs = 0;
    c10::SmallVector<int64_t, 4> inputDims;   // each input's number of dimensions
    c10::SmallVector<int64_t, 4> outputDims;  // each output's
    c10::SmallVector<int64_t, 8> sizes;       // the inputs' sizes, then the outputs'
    c10::SmallVector<c10::ScalarType, 4> inputDtypes;
    c10::SmallVector<c10::ScalarType, 4> outputDtypes;
    int64_t createdNs = 0;
    std::optional<int64_t> startedNs;
    std::optional<int64_t> completedNs;
    std::optional<float> durationMs;
    const char* state = "scheduled";
    std::string error;
    std::thread::id thread;
    bool retired = false;
    Frames frames;
  };

  // Each entry's frames as c10d's dumps give them: [{"name", "filename", "line"}], innermost
  // first. Reading Python frames takes the GIL, which a thread stuck outside the backend may
  // hold: on a thread of its own, and empty lists past kSymbolizeWithin, on any error, or
  // while the interpreter is not there (it exits, or never was).
  static std::vector<c10::List<c10::IValue>> symbolized(const std::vector<Entry>& entries) {
    std::vector<c10::List<c10::IValue>> result;  // a list each (c10::List copies share theirs)
    std::vector<Frames> held;
    std::vector<size_t> of;  // the entry of each traceback in `held`
    for (size_t i = 0; i < entries.size(); ++i) {
      result.push_back(newList());
      if (entries[i].frames) {
        held.push_back(entries[i].frames);
        of.push_back(i);
      }
    }
    if (held.empty() || !pythonIsThere()) {
      return result;
    }
    FrameReaders& readers = FrameReaders::get();
    {
      std::lock_guard<std::mutex> lock(readers.mutex);
      if (readers.closed) {
        return result;  // the interpreter exits
      }
      ++readers.active;
    }
    auto promise = std::make_shared<std::promise<torch::SymbolizedTracebacks>>();
    std::future<torch::SymbolizedTracebacks> reading = promise->get_future();
    try {
      std::thread([held, promise, &readers] {
        std::vector<torch::CapturedTraceback*> tracebacks;
        for (const Frames& frames : held) {
          tracebacks.push_back(frames.get());
        }
        try {
          promise->set_value(torch::symbolize(tracebacks));
        } catch (...) {
          promise->set_exception(std::current_exception());
        }
        readers.left();
      }).detach();
    } catch (const std::system_error&) {
      readers.left();
      return result;  // no thread to read them on
    }
    torch::SymbolizedTracebacks read;
    try {
      if (reading.wait_for(kSymbolizeWithin) != std::future_status::ready) {
        return result;
      }
      read = reading.get();
    } catch (...) {
      return result;
    }
    std::vector<c10::IValue> frames;
    frames.reserve(read.all_frames.size());
    for (const auto& frame : read.all_frames) {
      auto dict = newDict();
      dict.insert("name", frame.funcname);
      dict.insert("filename", frame.filename);
      dict.insert("line", static_cast<int64_t>(frame.lineno));
      frames.push_back(std::move(dict));
    }
    for (size_t t = 0; t < read.tracebacks.size() && t < of.size(); ++t) {
      for (const uint64_t frame : read.tracebacks[t]) {
        result[of[t]].push_back(frames.at(frame));
      }
    }
    return result;
  }

  // Whether a thread may take the GIL to read Python frames: an interpreter is there, and it
  // does not exit (a thread that asks for the GIL then never returns). Looked up, not linked:
  // the runtime runs without Python too (its sanitizer harness).
  static bool pythonIsThere() {
    using Query = int (*)();
    static const auto initialized = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    static const auto finalizing = [] {
      void* since313 = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
      return reinterpret_cast<Query>(since313 != nullptr ? since313 : dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
    }();
    return initialized != nullptr && finalizing != nullptr && initialized() != 0 && finalizing() == 0;
  }

  // A copy of the ring, oldest first: ops go on while it is made into dicts.
  std::vector<Entry> live() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t first = std::max<int64_t>(0, next_ - static_cast<int64_t>(capacity_));
    std::vector<Entry> copy;
    copy.reserve(static_cast<size_t>(next_ - first));
    for (int64_t id = first; id < next_; ++id) {
      copy.push_back(entries_[static_cast<size_t>(id) % capacity_]);
    }
    return copy;
  }

  Recorder() {
    const char* size = environment({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"});
    try {
      capacity_ = size != nullptr && *size != '\0' ? static_cast<size_t>(std::max(0LL, std::stoll(size))) : 2000;
    } catch (const std::exception&) {
      TORCH_WARN("Backend " NEW_BACKEND_NAME ": TORCH_FR_BUFFER_SIZE=\"", size, "\" is not a number; the flight recorder keeps 2000 ops");
      capacity_ = 2000;
    }
  }

  // The entry of record `id`, unless later ones took its place. Under mutex_.
  Entry* find(int64_t id) {
    const size_t slot = static_cast<size_t>(id) % capacity_;
    return slot < entries_.size() && entries_[slot].id == id ? &entries_[slot] : nullptr;
  }

  static c10::IValue toDict(const Entry& e, const c10::List<c10::IValue>& frames) {
    std::string profilingName = std::string(NEW_BACKEND_NAME ":") + e.name;
    if (e.p2p) {  // as NCCL's: "send 0->1", "recv 1<-0"; "recv 1<-?" from any source
      const std::string peer = e.peer < 0 ? "?" : std::to_string(e.peer);
      const bool sends = std::string_view(e.name) == "send";
      profilingName += " " + std::to_string(e.rank) + (sends ? "->" : "<-") + peer;
    }
    const auto sizes = [&e](const c10::SmallVector<int64_t, 4>& dims, size_t from) {
      c10::List<c10::List<int64_t>> result;
      for (const int64_t n : dims) {
        result.push_back(c10::List<int64_t>(std::vector<int64_t>(e.sizes.begin() + from, e.sizes.begin() + from + n)));
        from += static_cast<size_t>(n);
      }
      return result;
    };
    const auto dtypes = [](const c10::SmallVector<c10::ScalarType, 4>& types) {
      c10::List<std::string> result;
      for (const c10::ScalarType type : types) {
        result.push_back(c10::toString(type));
      }
      return result;
    };
    size_t inputElements = 0;
    for (const int64_t n : e.inputDims) {
      inputElements += static_cast<size_t>(n);
    }
    const auto optional = [](const auto& value) { return value ? c10::IValue(*value) : c10::IValue(); };
    std::ostringstream thread;
    thread << e.thread;
    auto dict = newDict();
    dict.insert("record_id", e.id);
    dict.insert("pg_id", static_cast<int64_t>(e.group->uid));
    dict.insert("process_group", c10::ivalue::Tuple::create(e.group->name, e.group->desc));
    dict.insert("collective_seq_id", static_cast<int64_t>(e.collective));
    dict.insert("p2p_seq_id", static_cast<int64_t>(e.p2pNumber));
    dict.insert("op_id", static_cast<int64_t>(e.op));
    dict.insert("profiling_name", profilingName);
    dict.insert("time_created_ns", e.createdNs);
    dict.insert("duration_ms", e.durationMs ? c10::IValue(static_cast<double>(*e.durationMs)) : c10::IValue());
    dict.insert("timeout_ms", e.timeoutMs);
    dict.insert("is_p2p", e.p2p);
    dict.insert("input_sizes", sizes(e.inputDims, 0));
    dict.insert("input_dtypes", dtypes(e.inputDtypes));
    dict.insert("output_sizes", sizes(e.outputDims, inputElements));
    dict.insert("output_dtypes", dtypes(e.outputDtypes));
    dict.insert("state", e.state);
    dict.insert("time_discovered_started_ns", optional(e.startedNs));
    dict.insert("time_discovered_completed_ns", optional(e.completedNs));
    dict.insert("retired", e.retired);
    dict.insert("frames", frames);
    dict.insert("thread_id", thread.str());
    dict.insert("thread_name", "");
    dict.insert("error", e.error.empty() ? c10::IValue() : c10::IValue(e.error));  // this backend's own field
    return dict;
  }

  static Recorder*& instance() {
    static Recorder* recorder = new Recorder();  // never destroyed: ops may record while the process exits
    return recorder;
  }

  size_t capacity_ = 0;
  std::mutex mutex_;
  std::vector<Entry> entries_;  // entries_[id % capacity_] is record `id`
  int64_t next_ = 0;            // the id of the next record
};

// One thread for the process, started with the first group of more than one
// rank: once a second, while an op of the process is stuck
// (GroupMonitor::stuck), asks each group's store whether a peer's collective
// timed out (GroupMonitor::poll). A rank waiting in any group of the backend
// answers for all of them; one that waits for none says nothing.
class Watcher {
 public:
  static Watcher& get() {
    static const int forkSafe = pthread_atfork(nullptr, nullptr, [] { instance = new Watcher(); });
    (void)forkSafe;
    return *instance;
  }

  void add(const std::shared_ptr<GroupMonitor>& monitor) {
    std::lock_guard<std::mutex> lock(mutex_);
    monitors_.push_back(monitor);
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
  }

 private:
  [[noreturn]] void loop() {
    for (;;) {
      std::this_thread::sleep_for(kWatchEvery);
      std::vector<std::shared_ptr<GroupMonitor>> live;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        monitors_.erase(
            std::remove_if(monitors_.begin(), monitors_.end(), [](const auto& m) { return m.expired(); }),
            monitors_.end());
        for (const auto& monitor : monitors_) {
          if (auto held = monitor.lock()) {
            live.push_back(std::move(held));
          }
        }
      }
      bool stuck = false;
      for (const auto& monitor : live) {
        stuck = monitor->stuck() || stuck;  // each monitor looks
      }
      for (const auto& monitor : live) {
        if (stuck) {
          monitor->poll();
        }
      }
    }
  }

  static Watcher* instance;
  std::mutex mutex_;
  std::vector<std::weak_ptr<GroupMonitor>> monitors_;
  bool started_ = false;
};

Watcher* Watcher::instance = new Watcher();  // never destroyed: its thread outlives exit()

} // namespace

const char* recordedName(const char* op) {
  // c10d's names, which its analyser matches ops by (torch/distributed/flight_recorder).
  // Never destroyed: ops may record while the process exits.
  static const auto* names = new std::map<std::string_view, const char*>{
      {"allreduce", "all_reduce"},
      {"allreduce_coalesced", "allreduce_coalesced"},
      {"broadcast", "broadcast"},
      {"reduce", "reduce"},
      {"allgather", "all_gather"},
      {"_allgather_base", "_all_gather_base"},
      {"all_gather_single", "_all_gather_base"},
      {"allgather_coalesced", "allgather_coalesced"},
      {"allgather_into_tensor_coalesced", "all_gather_into_tensor_coalesced"},
      {"gather", "gather"},
      {"gather_single", "gather"},
      {"scatter", "scatter"},
      {"reduce_scatter", "reduce_scatter"},
      {"_reduce_scatter_base", "_reduce_scatter_base"},
      {"reduce_scatter_single", "_reduce_scatter_base"},
      {"reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_coalesced"},
      {"alltoall_base", "all_to_all"},
      {"alltoall", "all_to_all"},
      {"barrier", "barrier"},
      {"send", "send"},
      {"recv", "recv"},
      {"recvAnysource", "recv"},
  };
  const auto it = names->find(op);
  return it == names->end() ? op : it->second;
}

void atInterpreterExit() {
  interpreterExits.store(true);
  FrameReaders& readers = FrameReaders::get();
  std::unique_lock<std::mutex> lock(readers.mutex);
  readers.closed = true;
  readers.idle.wait_for(lock, kSymbolizeWithin + std::chrono::seconds(1), [&readers] { return readers.active == 0; });
}

Frames callersFrames() {
  if (!Recorder::get().enabled()) {
    return nullptr;
  }
  return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
}

int64_t recordOp(const OpRecord& op) {
  return Recorder::get().record(op);
}

void recordStarted(int64_t id) {
  Recorder::get().started(id);
}

void recordFinished(int64_t id, const char* state, std::optional<float> durationMs, const std::string& error) {
  Recorder::get().finished(id, state, durationMs, error);
}

std::string recordedCollective(uint64_t groupUid, uint64_t number) {
  return Recorder::get().describe(groupUid, number);
}

std::string pickledRecord() {
  const c10::IValue record = Recorder::get().dump();
  std::string result;
  // As c10d pickles its dumps: plain Python lists and dicts, no TorchScript tags.
  torch::jit::Pickler pickler(
      [&result](const char* data, size_t size) { result.append(data, size); }, nullptr, nullptr, nullptr, nullptr,
      false);
  pickler.protocol();
  pickler.pushIValue(record);
  pickler.stop();
  return result;
}

std::string dumpRecord(int64_t globalRank) {
  const char* prefix = environment({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"});
  const std::string path = std::string(prefix != nullptr ? prefix : "/tmp/nccl_trace_rank_") + std::to_string(globalRank);
  // Each dump writes its own file, then renames it into place: dumps at the
  // same time (groups timing out together) each leave a whole record.
  static std::atomic<uint64_t> dumps{0};
  const std::string partial = path + ".partial" + std::to_string(::getpid()) + "." + std::to_string(dumps++);
  const std::string record = pickledRecord();
  std::ofstream file(partial, std::ios::binary | std::ios::trunc);
  file << record;
  file.close();
  const bool written = !file.fail() && std::rename(partial.c_str(), path.c_str()) == 0;
  if (!written) {
    std::remove(partial.c_str());
  }
  TORCH_CHECK(written, "Backend " NEW_BACKEND_NAME ": could not write the flight recorder's dump to ", path);
  return path;
}

// ---------------------------------------------------------------------------
// GroupMonitor

namespace {

// A connection of its own to `store`, where it can make one.
c10::intrusive_ptr<c10d::Store> ownConnection(const std::shared_ptr<Bootstrap>& store) {
  c10::intrusive_ptr<c10d::Store> shared = store->c10dStore();
  try {
    return shared->clone();
  } catch (const std::exception&) {
    return shared;  // a store written in Python, say
  }
}

// Runs `job` on a thread of its own; false, with a warning, where the system has none to give.
template <typename Job>
bool detached(Job job) {
  try {
    std::thread(std::move(job)).detach();
    return true;
  } catch (const std::system_error& e) {
    TORCH_WARN("Backend " NEW_BACKEND_NAME ": could not start a thread: ", e.what());
    return false;
  }
}

} // namespace

GroupMonitor::GroupMonitor(std::shared_ptr<Group> group, std::shared_ptr<Bootstrap> store, uint64_t uid)
    : group_(std::move(group)), bootstrap_(std::move(store)), uid_(uid) {}

c10d::Store& GroupMonitor::store() {
  std::lock_guard<std::mutex> lock(storeMutex_);
  if (!store_) {
    store_ = group_->size > 1 ? ownConnection(bootstrap_) : bootstrap_->c10dStore();
    if (store_ != bootstrap_->c10dStore()) {
      store_->setTimeout(kAnswerWithin);  // a get of a key a peer deleted meanwhile gives up
    }
  }
  return *store_;
}

bool GroupMonitor::stuck() {
  const bool outstanding = outstanding_.load(std::memory_order_relaxed) > 0;
  const uint64_t finished = finished_.load(std::memory_order_relaxed);
  const bool stuck = outstanding && wasOutstanding_ && finished == finishedBefore_;
  wasOutstanding_ = outstanding;
  finishedBefore_ = finished;
  return stuck;
}

std::shared_ptr<GroupMonitor> GroupMonitor::watched(
    std::shared_ptr<Group> group, std::shared_ptr<Bootstrap> store, uint64_t uid) {
  auto monitor = std::make_shared<GroupMonitor>(std::move(group), std::move(store), uid);
  if (monitor->group_->size > 1) {
    Watcher::get().add(monitor);
  }
  return monitor;
}

void GroupMonitor::answer(uint64_t number) {
  const std::lock_guard<std::mutex> lock(keysMutex_);  // close() deletes what is here by then
  if (!closed_.load() && !answered_.exchange(true)) {
    // "<collectives entered> <what this rank entered as `number`>"
    const uint64_t entered = entered_.load();
    const std::string what = entered > number ? recordedCollective(uid_, number) : "";
    store().set(answerKey(group_->rank), bytes(std::to_string(entered) + " " + what));
  }
}

std::string GroupMonitor::explain(uint64_t number) {
  struct Talk {
    std::mutex mutex;
    std::condition_variable done;
    bool over = false;
    std::string said;
  };
  auto talk = std::make_shared<Talk>();
  explaining_.fetch_add(1);
  asked_.store(true);
  // On a thread of its own, so that a store that does not answer (its host
  // stopped) holds up nobody past kAnswerWithin.
  const bool asking = detached([talk, group = group_, number, self = shared_from_this()] {
    std::string said;
    try {
      c10d::Store* store = &self->store();
      {
        const std::lock_guard<std::mutex> lock(self->keysMutex_);
        TORCH_CHECK(!self->closed_.load(), "the group was destroyed");
        store->set(kAskedKey, bytes(std::to_string(number)));
      }
      self->answer(number);
      const std::string mine = recordedCollective(self->uid_, number);
      std::vector<int> others;
      std::vector<std::string> keys;
      for (int rank = 0; rank < group->size; ++rank) {
        if (rank != group->rank) {
          others.push_back(rank);
          keys.push_back(answerKey(rank));
        }
      }
      const auto until = Clock::now() + kAnswerWithin;
      bool all = store->check(keys);
      while (!all && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        all = store->check(keys);
      }
      std::string entered;
      for (size_t i = 0; i < others.size(); ++i) {
        const std::string who = "rank " + std::to_string(others[i]);
        if (!all && !store->check({keys[i]})) {
          said += "; " + who + " did not say which collective it reached within " +
              std::to_string(std::chrono::seconds(kAnswerWithin).count()) +
              " s (a rank answers while it waits in an op of this backend: it may be busy outside the backend, "
              "stopped, or gone)";
          continue;
        }
        std::vector<uint8_t> value;
        try {
          value = store->get(keys[i]);  // within kAnswerWithin (store())
        } catch (const std::exception&) {
          said += "; " + who + " answered, then destroyed the group before its answer was read";
          continue;
        }
        std::string answer(value.begin(), value.end());
        const bool destroyed = answer.rfind(kDestroyed, 0) == 0;
        if (destroyed) {
          answer = answer.substr(kDestroyed.size());
        }
        const size_t space = answer.find(' ');
        uint64_t entered = 0;
        try {
          entered = std::stoull(answer.substr(0, space));
        } catch (const std::exception&) {
          said += "; " + who + " gave an answer this rank cannot read: \"" + answer + "\"";
          continue;
        }
        const std::string theirs = space == std::string::npos ? "" : answer.substr(space + 1);
        if (destroyed) {
          said += "; " + who + " destroyed its process group " +
              (entered > number ? std::string("after it entered it")
                                : entered == 0 ? std::string("before it entered any collective")
                                               : "after its collective #" + std::to_string(entered - 1));
        } else if (entered <= number) {
          said += "; " + who + " never entered it (" +
              (entered == 0 ? std::string("it entered none")
                            : "its last collective was #" + std::to_string(entered - 1)) +
              ")";
        } else if (!theirs.empty() && !mine.empty() && theirs != mine) {
          said += "; " + who + " entered " + theirs + " as #" + std::to_string(number) +
              ", where this rank entered " + mine + " (the ranks call different collectives)";
        }
      }
      said = "it is collective #" + std::to_string(number) + " of the group" +
          (said.empty() ? std::string(", and every rank entered it") : said);
    } catch (const std::exception& e) {
      said = "the other ranks could not be asked which collective they reached: " + std::string(e.what());
    }
    std::lock_guard<std::mutex> lock(talk->mutex);
    talk->said = std::move(said);
    talk->over = true;
    talk->done.notify_all();
  });
  std::unique_lock<std::mutex> lock(talk->mutex);
  const auto within = kAnswerWithin + std::chrono::seconds(1);
  const bool over = asking && talk->done.wait_for(lock, within, [&talk] { return talk->over; });
  explaining_.fetch_sub(1);
  if (!asking) {
    return "the other ranks could not be asked which collective they reached: no thread to ask them on";
  }
  return over ? talk->said
              : "the other ranks could not be asked which collective they reached: the group's store did not answer "
                "within " + std::to_string(std::chrono::seconds(within).count()) + " s";
}

void GroupMonitor::dumpSoon() const {
  if (!dumpOnTimeout()) {
    return;
  }
  detached([rank = group_->globalRanks.at(group_->rank)] {
    try {
      dumpRecord(rank);
    } catch (const std::exception& e) {
      TORCH_WARN("Backend " NEW_BACKEND_NAME ": ", e.what());
    }
  });
}

void GroupMonitor::poll() {
  if (answered_.load() || closed_.load()) {
    return;
  }
  try {
    if (!store().check({kAskedKey})) {
      return;
    }
    const std::vector<uint8_t> asked = store().get(kAskedKey);
    answer(std::stoull(std::string(asked.begin(), asked.end())));
  } catch (const c10::DistNetworkError&) {
    closed_.store(true);  // the store is gone (its host exited): nobody is left to ask
    return;
  } catch (const std::exception&) {
    return;  // the question went (its ranks destroyed the group) between the check and the get
  }
  if (explaining_.load() == 0) {
    dumpSoon();  // not here: the watcher answers every group of the process
  }
}

void GroupMonitor::close(bool underWay) {
  const std::lock_guard<std::mutex> lock(keysMutex_);
  // Peers may wait for this rank's collectives: it says it destroyed the group,
  // unless it answered already (what it entered says more: that stays).
  const bool peersWait = underWay && group_->size > 1;
  const bool answered = answered_.load();
  const bool asked = asked_.load();  // the question is this rank's own
  if (closed_.exchange(true) || interpreterExits.load() || !(peersWait || answered || asked)) {
    return;
  }
  // Without waiting: the store may not answer (its host stopped).
  detached([self = shared_from_this(), rank = group_->rank, peersWait, answered, asked, entered = entered_.load()] {
    try {
      if (peersWait && !answered) {
        self->store().set(answerKey(rank), bytes(std::string(kDestroyed) + std::to_string(entered)));
      } else if (!peersWait) {
        self->store().deleteKey(answerKey(rank));
      }
      if (asked) {
        self->store().deleteKey(kAskedKey);
      }
    } catch (const std::exception&) {
      // the store went first
    }
  });
}

void GroupMonitor::addCompletionHook(int64_t id, CompletionHook hook) {
  std::lock_guard<std::mutex> lock(hooksMutex_);
  hooks_.emplace_back(id, std::move(hook));
  hasHooks_.store(true);
}

void GroupMonitor::removeCompletionHook(int64_t id) {
  std::lock_guard<std::mutex> lock(hooksMutex_);
  hooks_.erase(
      std::remove_if(hooks_.begin(), hooks_.end(), [id](const auto& hook) { return hook.first == id; }), hooks_.end());
  hasHooks_.store(!hooks_.empty());
}

void GroupMonitor::completed(uint64_t key, std::optional<float> durationMs) {
  if (!hasHooks_.load(std::memory_order_relaxed)) {
    return;
  }
  std::lock_guard<std::mutex> lock(hooksMutex_);
  for (const auto& [id, hook] : hooks_) {
    try {
      hook(key, durationMs);
    } catch (const std::exception& e) {
      TORCH_WARN("Backend " NEW_BACKEND_NAME ": a completion hook failed: ", e.what());
    }
  }
}

} // namespace NEW_BACKEND_NAMESPACE

// How a group of Backend comes to be: its options from the
// environment, the Store its ranks bootstrap through, and its communicator
// (ops::init or ops::split). See backend.hpp.
#include "backend.hpp"

#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cctype>
#include <cstdlib>
#include <type_traits>
#include <utility>

namespace NEW_BACKEND_NAMESPACE {
namespace {

// The group's c10d Store as ops::init sees it: every key under "bootstrap/"
// (torch.distributed already scopes the store to the group), waits bounded
// by the group's timeout.
class StoreBootstrap : public Bootstrap {
 public:
  StoreBootstrap(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {
    TORCH_CHECK(store_, "Backend " NEW_BACKEND_NAME ": torch.distributed passed no store");
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_->set(scoped(key), value);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    store_->wait({scoped(key)}, timeout_);
    return store_->get(scoped(key));
  }
  bool check(const std::vector<std::string>& keys) override {
    return store_->check(scoped(keys));
  }
  void wait(const std::vector<std::string>& keys) override {
    store_->wait(scoped(keys), timeout_);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return store_->add(scoped(key), delta);
  }
  void deleteKey(const std::string& key) override {
    store_->deleteKey(scoped(key));
  }
  c10::intrusive_ptr<c10d::Store> c10dStore() override {
    return store_;
  }

 private:
  static std::string scoped(const std::string& key) {
    return "bootstrap/" + key;
  }
  static std::vector<std::string> scoped(const std::vector<std::string>& keys) {
    std::vector<std::string> result;
    result.reserve(keys.size());
    for (const std::string& key : keys) {
      result.push_back(scoped(key));
    }
    return result;
  }

  const c10::intrusive_ptr<c10d::Store> store_;
  const std::chrono::milliseconds timeout_;
};

// Parses an environment variable's `text` into a field of Options.
template <typename T>
T parseOption(const std::string& variable, const std::string& text) {
  const auto fail = [&](const char* type) {
    TORCH_CHECK(
        false, "Backend " NEW_BACKEND_NAME ": environment variable ", variable, "=\"", text,
        "\" is not ", type);
  };
  if constexpr (std::is_same_v<T, bool>) {
    for (const char* yes : {"1", "true", "yes", "on", "TRUE", "True", "YES", "ON"}) {
      if (text == yes) {
        return true;
      }
    }
    for (const char* no : {"0", "false", "no", "off", "FALSE", "False", "NO", "OFF", ""}) {
      if (text == no) {
        return false;
      }
    }
    fail("a boolean (1, 0, true, false, yes, no, on, off)");
  } else if constexpr (std::is_integral_v<T>) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(text, &used, 0);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      fail("an integer");
    }
    return static_cast<T>(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      fail("a number");
    }
    return static_cast<T>(value);
  } else {
    static_assert(std::is_same_v<T, std::string>, "Options fields are bool, integers, floating point or std::string");
    return text;
  }
  return T{};
}

} // namespace

Options optionsFromEnvironment() {
  Options options;
  describeOptions([&options](const char* name, auto member, const char* /* doc */) {
    std::string variable = NEW_BACKEND_ENV_PREFIX;
    for (const char* c = name; *c != '\0'; ++c) {
      variable += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
    }
    if (const char* text = std::getenv(variable.c_str())) {
      using Field = std::decay_t<decltype(options.*member)>;
      options.*member = parseOption<Field>(variable, text);
    }
  });
  return options;
}

std::shared_ptr<Group> makeGroup(int rank, int size, const std::string& id, std::vector<int64_t> globalRanks) {
  auto group = std::make_shared<Group>();
  group->backend = NEW_BACKEND_NAME;
  group->rank = rank;
  group->size = size;
  group->id = id;
  group->globalRanks = std::move(globalRanks);
  if (group->globalRanks.empty()) {  // the default group: global ranks are group ranks
    for (int r = 0; r < size; ++r) {
      group->globalRanks.push_back(r);
    }
  }
  return group;
}

// The group's communicator: ops::split from `parent` when there is one and it
// gives one, else ops::init. Runs on the caller's thread.
std::shared_ptr<Library> makeLibrary(
    const Group& group,
    const c10::intrusive_ptr<c10d::Store>& store,
    std::chrono::milliseconds timeout,
    const Options& options,
    bool isWorld,
    const std::shared_ptr<Library>& parent) {
  auto bootstrap = std::make_shared<StoreBootstrap>(store, timeout);
  const GroupInfo info{
      group.backend, group.rank, group.size, group.globalRanks, group.id, timeout, options,
      *bootstrap, isWorld};
  std::shared_ptr<Communicator> comm;
  try {
    if (parent && parent->take()) {  // the parent's communicator stays alive meanwhile
      const auto held = c10::make_scope_exit([&parent] { parent->release(); });
      comm = ops::split(parent->comm(), info);
    }
    if (!comm) {
      comm = ops::init(info);
    }
  } catch (const std::exception& e) {
    C10_THROW_ERROR(
        DistBackendError,
        "Backend " NEW_BACKEND_NAME " (rank " + std::to_string(group.rank) + "): creating the communicator of group " +
            group.id + " failed: " + (dynamic_cast<const c10::Error*>(&e)
                                          ? dynamic_cast<const c10::Error*>(&e)->what_without_backtrace()
                                          : e.what()));
  }
  TORCH_CHECK(comm, "Backend " NEW_BACKEND_NAME ": ops::", parent ? "split" : "init", " returned no communicator");
  return std::make_shared<Library>(std::move(bootstrap), std::move(comm));
}

} // namespace NEW_BACKEND_NAMESPACE

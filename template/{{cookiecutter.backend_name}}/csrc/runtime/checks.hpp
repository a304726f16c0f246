// The argument checks of every call, on the caller's thread, before anything
// is queued: a bad call fails at once, naming the backend, the rank, the op
// and what is wrong. backend.cpp (and through it collectives.hpp) includes it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <iterator>
#include <vector>

#include "ops.hpp"

namespace NEW_BACKEND_NAMESPACE {

// The argument checks of one call. Each failure raises a RuntimeError that
// names the backend, the rank, the op and what is wrong.
class Check {
 public:
  Check(const Group& group, const char* op) : group_(group), op_(op) {}

  int size() const {
    return group_.size;
  }

  // A usable tensor: defined, dense, on a device this build supports, of a
  // dtype the backend supports. A PrivateUse1 device (an out-of-tree
  // accelerator, or the tests' fake one) is served once the package is
  // registered for it (the package's register()).
  void tensor(const at::Tensor& t, const char* what) const {
    require(t.defined(), what, " is an undefined tensor");
    require(t.layout() == c10::kStrided, what, " must be a dense tensor, got layout ", t.layout());
    const auto type = t.device().type();
    require(
        std::find(std::begin(kDevices), std::end(kDevices), type) != std::end(kDevices),
        what, " is on ", t.device(), "; this backend is registered for " NEW_BACKEND_DEVICES " tensors");
#ifndef WITH_CUDA
    require(
        !t.is_cuda(), what, " is a CUDA tensor, but this build of " NEW_BACKEND_PACKAGE " has no CUDA support "
        "(rebuild it against a CUDA build of torch, or with FORCE_CUDA=1)");
#endif
    require(supportsDtype(t.scalar_type()), what, " has dtype ", t.scalar_type(), ", which this backend does not support");
  }

  // Exactly one tensor, checked.
  at::Tensor& one(std::vector<at::Tensor>& tensors, const char* what) const {
    require(tensors.size() == 1, what, " must hold exactly one tensor, got ", tensors.size());
    tensor(tensors.front(), what);
    return tensors.front();
  }

  // At least one tensor, all checked, all of one dtype and on one device.
  void many(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(!tensors.empty(), what, " is empty");
    for (const at::Tensor& t : tensors) {
      tensor(t, what);
      sameDtype(t, tensors.front(), what);
    }
  }

  // Exactly one tensor list.
  std::vector<at::Tensor>& oneList(std::vector<std::vector<at::Tensor>>& lists, const char* what) const {
    require(lists.size() == 1, what, " must hold exactly one tensor list, got ", lists.size());
    return lists.front();
  }

  // One tensor per rank of the group, each like `like` (dtype, device, numel).
  void perRank(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* what) const {
    require(static_cast<int>(tensors.size()) == size(), what, " must hold one tensor per rank (", size(), "), got ", tensors.size());
    for (const at::Tensor& t : tensors) {
      tensor(t, what);
      sameDtype(t, like, what);
      require(t.numel() == like.numel(), what, " holds a tensor of ", t.numel(), " elements, expected ", like.numel());
    }
  }

  // One tensor per rank of the group, of any size, all of one dtype.
  void perRankAnyShape(const std::vector<at::Tensor>& tensors, const char* what) const {
    require(static_cast<int>(tensors.size()) == size(), what, " must hold one tensor per rank (", size(), "), got ", tensors.size());
    many(tensors, what);
  }

  // For gather and scatter: on the root, one list with a tensor per rank like
  // `like`; on the other ranks, no list or one empty list. Returns the root's
  // list, empty elsewhere.
  std::vector<at::Tensor> rootList(std::vector<std::vector<at::Tensor>>& lists, int root, const at::Tensor& like, const char* what) const {
    if (group_.rank != root) {
      require(lists.empty() || (lists.size() == 1 && lists.front().empty()), what, " must be empty on ranks other than the root (", root, ")");
      return {};
    }
    std::vector<at::Tensor>& list = oneList(lists, what);
    perRank(list, like, what);
    return list;
  }

  // allgather_coalesced: one list per rank, each matching `inputs` tensor for tensor.
  void coalescedPerRank(const std::vector<std::vector<at::Tensor>>& lists, const std::vector<at::Tensor>& inputs, const char* what) const {
    require(static_cast<int>(lists.size()) == size(), what, " must hold one list per rank (", size(), "), got ", lists.size());
    for (const std::vector<at::Tensor>& list : lists) {
      require(list.size() == inputs.size(), what, " lists must hold one tensor per input (", inputs.size(), "), got ", list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        tensor(list[i], what);
        sameDtype(list[i], inputs[i], what);
        require(list[i].numel() == inputs[i].numel(), what, " tensor ", i, " has ", list[i].numel(), " elements, expected ", inputs[i].numel());
      }
    }
  }

  // `big` holds `factor` times the elements of `small`, same dtype.
  void scaled(const at::Tensor& big, const at::Tensor& small, int64_t factor, const char* what) const {
    tensor(big, what);
    sameDtype(big, small, what);
    require(big.numel() == small.numel() * factor, what, " must hold ", small.numel() * factor, " elements (", factor, " x ", small.numel(), "), got ", big.numel());
  }

  // `big` as scaled() on the root; ignored elsewhere.
  void scaledOnRoot(const at::Tensor& big, const at::Tensor& small, int root, const char* what) const {
    if (group_.rank == root) {
      scaled(big, small, size(), what);
    }
  }

  // The same for lists of tensors, pair by pair.
  void scaledPairs(const std::vector<at::Tensor>& bigs, const std::vector<at::Tensor>& smalls, int64_t factor, const char* what) const {
    require(bigs.size() == smalls.size(), what, " must hold ", smalls.size(), " tensors, got ", bigs.size());
    for (size_t i = 0; i < bigs.size(); ++i) {
      scaled(bigs[i], smalls[i], factor, what);
    }
  }

  void sameDtype(const at::Tensor& t, const at::Tensor& like, const char* what) const {
    require(t.scalar_type() == like.scalar_type(), what, " has dtype ", t.scalar_type(), " but the op's tensors are ", like.scalar_type());
    require(t.device() == like.device(), what, " is on ", t.device(), " but the op's tensors are on ", like.device());
  }

  // Split sizes of an all_to_all_single along dimension 0; even splits when
  // none are given.
  std::vector<int64_t> splits(const std::vector<int64_t>& sizes, const at::Tensor& t, const char* what) const {
    require(t.dim() > 0, what, ": all_to_all_single needs tensors with at least one dimension");
    const int64_t rows = t.size(0);
    if (sizes.empty()) {
      require(rows % size() == 0, what, " is empty, so dimension 0 (", rows, ") must split evenly across ", size(), " ranks");
      return std::vector<int64_t>(size(), rows / size());
    }
    require(static_cast<int>(sizes.size()) == size(), what, " must hold one size per rank (", size(), "), got ", sizes.size());
    int64_t total = 0;
    for (int64_t s : sizes) {
      require(s >= 0, what, " holds a negative size ", s);
      total += s;
    }
    require(total == rows, what, " sums to ", total, " but dimension 0 has ", rows, " rows");
    return sizes;
  }

  int root(int64_t rootRank, int64_t rootTensor = 0) const {
    require(rootRank >= 0 && rootRank < size(), "root rank ", rootRank, " is out of range for a group of ", size());
    require(rootTensor == 0, "root tensor must be 0, got ", rootTensor);
    return static_cast<int>(rootRank);
  }

  int peer(int rank, const char* what) const {
    require(rank >= 0 && rank < size(), what, " ", rank, " is out of range for a group of ", size());
    return rank;
  }

  Reduction reduction(const c10d::ReduceOp& reduceOp, const at::Tensor& t) const {
    Reduction op = Reduction::kSum;
    switch (reduceOp.op_) {
      case c10d::ReduceOp::SUM: op = Reduction::kSum; break;
      case c10d::ReduceOp::AVG: op = Reduction::kAvg; break;
      case c10d::ReduceOp::PRODUCT: op = Reduction::kProduct; break;
      case c10d::ReduceOp::MIN: op = Reduction::kMin; break;
      case c10d::ReduceOp::MAX: op = Reduction::kMax; break;
      case c10d::ReduceOp::BAND: op = Reduction::kBand; break;
      case c10d::ReduceOp::BOR: op = Reduction::kBor; break;
      case c10d::ReduceOp::BXOR: op = Reduction::kBxor; break;
      default:
        require(false, "reduce op ", static_cast<int>(reduceOp.op_), " (e.g. PREMUL_SUM) is not supported");
    }
    require(supportsReduction(op, t.scalar_type()), "reduce op ", reductionName(op), " is not supported for dtype ", t.scalar_type());
    return op;
  }

 private:
  template <typename... Args>
  void require(bool ok, const Args&... reason) const {
    TORCH_CHECK(ok, "Backend ", group_.backend, " (rank ", group_.rank, "): ", op_, ": ", reason...);
  }

  const Group& group_;
  const char* const op_;
};

} // namespace NEW_BACKEND_NAMESPACE

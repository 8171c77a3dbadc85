// The test device's c10d backend, and the Python module of the extension.
//
// torch's ProcessGroupGloo refuses PrivateUse1 tensors, and DTensor and the functional
// collectives look a backend up per device type in C++, so the device needs a c10d::Backend of
// its own. This one stages every collective through the host: it copies the device tensors to
// CPU tensors, runs the collective on a ProcessGroupGloo of the same ranks, waits for it, copies
// the results back, and returns a completed Work. The ProcessGroupGloo is made in Python
// (stratgen_testdevice/__init__.py) because torch's wheels ship no gloo headers.
#include <torch/extension.h>

#include <mutex>
#include <set>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "testdevice.h"

namespace testdevice {
namespace {

using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<Tensors>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using c10d::OpType;

// A collective that has finished: its result tensors, and a completed future holding them.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, OpType type, Tensors result, int source_rank)
      : c10d::Work(rank, type), result_(std::move(result)), source_rank_(source_rank) {
    std::set<c10::DeviceIndex> indices;
    for (const auto& t : result_) {
      if (t.is_privateuseone()) {
        indices.insert(t.device().index());
      }
    }
    std::vector<c10::Device> devices;
    for (const auto index : indices) {
      devices.emplace_back(c10::DeviceType::PrivateUse1, index);
    }
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
    future_->markCompleted(c10::IValue(result_));
    finish();
  }
  Tensors result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  int sourceRank() const override { return source_rank_; }

 private:
  Tensors result_;
  int source_rank_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// A send or a receive in flight: gloo's operation on host copies, finished (a receive copied
// back to the device tensors) when it is waited for. Point-to-point operations are not finished
// at once as the collectives are: a pipeline's batch_isend_irecv posts each rank's send before
// its receive, and a send waited for at once would wait for a receive its peer has not posted.
class PendingWork final : public c10d::Work {
 public:
  PendingWork(int rank, OpType type, WorkPtr host, Tensors device, Tensors host_tensors)
      : c10d::Work(rank, type),
        host_(std::move(host)),
        device_(std::move(device)),
        host_tensors_(std::move(host_tensors)) {}
  bool isCompleted() override { return host_->isCompleted(); }
  bool isSuccess() const override { return host_->isSuccess(); }
  std::exception_ptr exception() const override { return host_->exception(); }
  int sourceRank() const override { return host_->sourceRank(); }
  Tensors result() override { return device_; }
  void synchronize() override { wait(); }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    const bool done = host_->wait(timeout);
    std::call_once(copied_, [this] {
      // The received values are data, not an operation on the tensors (a pipeline's receive
      // buffers are leaves that require grad).
      const at::NoGradGuard no_grad;
      for (size_t i = 0; i < device_.size(); ++i) {
        if (!device_[i].is_same(host_tensors_[i])) {
          device_[i].copy_(host_tensors_[i]);
        }
      }
    });
    return done;
  }

 private:
  WorkPtr host_;
  Tensors device_;       // a receive's tensors (a send's stay as they are)
  Tensors host_tensors_;  // their host copies
  std::once_flag copied_;
};

// Host copies of tensors (a CPU tensor is its own), and the way back.
at::Tensor to_host(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU).contiguous(); }
template <typename T>
std::vector<T> to_host(const std::vector<T>& items) {
  std::vector<T> out;
  for (const auto& item : items) {
    out.push_back(to_host(item));
  }
  return out;
}
void copy_back(const at::Tensor& dst, const at::Tensor& host) {
  const at::NoGradGuard no_grad;  // the result is data, not an operation on the tensor
  if (!dst.is_same(host)) {
    dst.copy_(host);
  }
}
template <typename T>
void copy_back(const std::vector<T>& dst, const std::vector<T>& host) {
  for (size_t i = 0; i < dst.size(); ++i) {
    copy_back(dst[i], host[i]);
  }
}
Tensors flat(const at::Tensor& t) { return {t}; }
Tensors flat(const Tensors& ts) { return ts; }
Tensors flat(const TensorLists& lists) {
  Tensors out;
  for (const auto& ts : lists) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  return out;
}

// gloo has neither AVG nor PREMUL_SUM: both run as a SUM, of scaled inputs (PREMUL_SUM, whose
// inputs are then copies, never the caller's CPU tensors) or into outputs divided afterwards (AVG).
c10d::ReduceOp host_op(const c10d::ReduceOp& op) {
  const bool sum = op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM;
  return sum ? c10d::ReduceOp(c10d::ReduceOp::SUM) : op;
}
Tensors premultiplied(const c10d::ReduceOp& op, Tensors host, const Tensors& original) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) {
    return host;
  }
  const auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor != nullptr, "testdevice: PREMUL_SUM without a factor");
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = host[i].is_same(original[i]) ? host[i].clone() : host[i];
    if (factor->tensor_factor.defined()) {
      host[i].mul_(factor->tensor_factor.to(at::kCPU));
    } else {
      host[i].mul_(factor->double_factor);
    }
  }
  return host;
}
TensorLists premultiplied(const c10d::ReduceOp& op, TensorLists host, const TensorLists& original) {
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = premultiplied(op, host[i], original[i]);
  }
  return host;
}
void averaged(const c10d::ReduceOp& op, int size, const Tensors& outputs) {
  if (op.op_ == c10d::ReduceOp::AVG) {
    for (const auto& t : outputs) {
      t.div_(size);
    }
  }
}

class HostStagedBackend final : public c10d::Backend {
 public:
  HostStagedBackend(c10::intrusive_ptr<c10d::Backend> host, int rank, int size, std::string name)
      : c10d::Backend(rank, size), host_(std::move(host)), name_(std::move(name)) {}

  const std::string getBackendName() const override { return name_; }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }

  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    Tensors none;
    return staged(OpType::BROADCAST, ts, none,
                  [&](auto& h, auto&) { return host_->broadcast(h, o); });
  }
  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    return reduced(OpType::ALLREDUCE, ts, ts, o,
                   [&](auto& h, auto&, const auto& ho) { return host_->allreduce(h, ho); });
  }
  WorkPtr allreduce_coalesced(Tensors& ts, const c10d::AllreduceCoalescedOptions& o) override {
    return reduced(OpType::ALLREDUCE_COALESCED, ts, ts, o, [&](auto& h, auto&, const auto& ho) {
      return host_->allreduce_coalesced(h, ho);
    });
  }
  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    // Only the root's tensors take the result: elsewhere they keep their values, as with NCCL.
    const bool root = getRank() == o.rootRank;
    return reduced(
        OpType::REDUCE, ts, ts, o,
        [&](auto& h, auto&, const auto& ho) { return host_->reduce(h, ho); }, root);
  }
  WorkPtr allgather(TensorLists& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    return staged(OpType::ALLGATHER, out, in,
                  [&](auto& ho, auto& hi) { return host_->allgather(ho, hi, o); });
  }
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in,
                          const c10d::AllgatherOptions& o) override {
    return staged(OpType::_ALLGATHER_BASE, out, in,
                  [&](auto& ho, auto& hi) { return host_->_allgather_base(ho, hi, o); });
  }
  WorkPtr allgather_coalesced(TensorLists& out, Tensors& in,
                              const c10d::AllgatherOptions& o) override {
    return staged(OpType::ALLGATHER_COALESCED, out, in,
                  [&](auto& ho, auto& hi) { return host_->allgather_coalesced(ho, hi, o); });
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& out, Tensors& in,
                                          const c10d::AllgatherOptions& o) override {
    return staged(OpType::COALESCED, out, in, [&](auto& ho, auto& hi) {
      return host_->allgather_into_tensor_coalesced(ho, hi, o);
    });
  }
  WorkPtr gather(TensorLists& out, Tensors& in, const c10d::GatherOptions& o) override {
    return staged(OpType::GATHER, out, in,
                  [&](auto& ho, auto& hi) { return host_->gather(ho, hi, o); });
  }
  WorkPtr scatter(Tensors& out, TensorLists& in, const c10d::ScatterOptions& o) override {
    return staged(OpType::SCATTER, out, in,
                  [&](auto& ho, auto& hi) { return host_->scatter(ho, hi, o); });
  }
  WorkPtr reduce_scatter(Tensors& out, TensorLists& in,
                         const c10d::ReduceScatterOptions& o) override {
    return reduced(OpType::REDUCE_SCATTER, out, in, o, [&](auto& ho, auto& hi, const auto& opts) {
      return host_->reduce_scatter(ho, hi, opts);
    });
  }
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                               const c10d::ReduceScatterOptions& o) override {
    Tensors outs{out}, ins{in};
    return reduced(OpType::_REDUCE_SCATTER_BASE, outs, ins, o,
                   [&](auto& ho, auto& hi, const auto& opts) {
                     return host_->_reduce_scatter_base(ho[0], hi[0], opts);
                   });
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& out, Tensors& in,
                                          const c10d::ReduceScatterOptions& o) override {
    return reduced(OpType::COALESCED, out, in, o, [&](auto& ho, auto& hi, const auto& opts) {
      return host_->reduce_scatter_tensor_coalesced(ho, hi, opts);
    });
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                        std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& o) override {
    return staged(OpType::ALLTOALL_BASE, out, in, [&](auto& ho, auto& hi) {
      return host_->alltoall_base(ho, hi, out_splits, in_splits, o);
    });
  }
  WorkPtr alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions& o) override {
    return staged(OpType::ALLTOALL, out, in,
                  [&](auto& ho, auto& hi) { return host_->alltoall(ho, hi, o); });
  }
  WorkPtr send(Tensors& ts, int dst, int tag) override {
    auto host = to_host(ts);
    auto work = host_->send(host, dst, tag);
    return c10::make_intrusive<PendingWork>(getRank(), OpType::SEND, work, Tensors{}, Tensors{});
  }
  WorkPtr recv(Tensors& ts, int src, int tag) override {
    auto host = to_host(ts);
    auto work = host_->recv(host, src, tag);
    return c10::make_intrusive<PendingWork>(getRank(), OpType::RECV, work, ts, host);
  }
  WorkPtr recvAnysource(Tensors& ts, int tag) override {
    auto host = to_host(ts);
    auto work = host_->recvAnysource(host, tag);
    return c10::make_intrusive<PendingWork>(getRank(), OpType::RECVANYSOURCE, work, ts, host);
  }
  WorkPtr barrier(const c10d::BarrierOptions& o) override {
    host_->barrier(o)->wait();
    return done(OpType::BARRIER, {});
  }

 private:
  // Host copies of the outputs and inputs (in-place collectives pass their tensors as outputs),
  // the collective on them, and the outputs copied back.
  template <typename Out, typename In, typename Run>
  WorkPtr staged(OpType type, Out& out, In& in, Run run) {
    auto host_out = to_host(out);
    auto host_in = to_host(in);
    run(host_out, host_in)->wait();
    copy_back(out, host_out);
    return done(type, flat(out));
  }
  // The same for a reduction, with its reduce op made one that gloo has; out may be in.
  template <typename In, typename Options, typename Run>
  WorkPtr reduced(OpType type, Tensors& out, In& in, Options opts, Run run, bool result = true) {
    const c10d::ReduceOp op = opts.reduceOp;
    opts.reduceOp = host_op(op);
    In host_in = premultiplied(op, to_host(in), in);
    Tensors host_out;
    if constexpr (std::is_same_v<In, Tensors>) {
      host_out = &out == &in ? host_in : to_host(out);
    } else {
      host_out = to_host(out);
    }
    run(host_out, host_in, opts)->wait();
    if (result) {
      averaged(op, getSize(), host_out);
      copy_back(out, host_out);
    }
    return done(type, out);
  }
  WorkPtr done(OpType type, Tensors result, int source_rank = -1) const {
    return c10::make_intrusive<DoneWork>(getRank(), type, std::move(result), source_rank);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  std::string name_;
};

c10::intrusive_ptr<c10d::Backend> make_backend(const py::object& host, int rank, int size,
                                               const std::string& name) {
  auto* raw = host.cast<c10d::Backend*>();
  return c10::make_intrusive<HostStagedBackend>(
      c10::intrusive_ptr<c10d::Backend>::reclaim_copy(raw), rank, size, name);
}

// Autograd runs the backward of device tensors on a thread per device, which may drop its last
// reference to a finished graph after the caller's backward has returned. torch 2.13's graphs hold
// a Python object (the contextvars context that torch.autograd stashes for device threads), whose
// release takes the GIL; once the interpreter is finalizing, taking it ends the thread, and that
// ends the process (std::terminate). A backward through every device, made of C++ tensors alone,
// returns only when each device's thread is done with the graphs before it: run at exit, it
// leaves no graph for those threads to drop during finalization.
void drain_autograd() {
  std::vector<at::Tensor> roots;
  for (int index = 0; index < device_count(); ++index) {
    const auto options = at::TensorOptions().device(c10::DeviceType::PrivateUse1, index);
    roots.push_back((at::ones({1}, options).requires_grad_() * 2).sum());
  }
  torch::autograd::backward(roots);
}

} // namespace
} // namespace testdevice

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace td = testdevice;
  m.doc() = "The stratgen test device (a PrivateUse1 backend) and its c10d backend.";
  m.def("set_device_count", &td::set_device_count);
  m.def("device_count", &td::device_count);
  m.def("current_device", &td::current_device);
  m.def("set_device", &td::set_device);
  m.def("memory_allocated", &td::memory_allocated);
  m.def("max_memory_allocated", &td::max_memory_allocated);
  m.def("reset_peak_memory_stats", &td::reset_peak_memory_stats);
  m.def("default_generator", [](int index) { return td::default_generator(index); });
  m.def("set_keeps_parameters", &td::set_keeps_parameters);
  m.def("keeps_parameters", &td::keeps_parameters);
  m.def("make_backend", &td::make_backend, "A HostStagedBackend over a ProcessGroupGloo");
  m.def("drain_autograd", &td::drain_autograd, py::call_guard<py::gil_scoped_release>());
}

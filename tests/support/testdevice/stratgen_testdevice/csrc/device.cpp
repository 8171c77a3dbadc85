// The stratgen test device: the project's real non-CPU PyTorch device for its own tests.
//
// A PrivateUse1 backend (renamed from Python, "testdev" by default) that meets the runtime the way
// a vendor's extension does: its own dispatch key, allocator, device guard, streams and events,
// generators, autocast key, and a c10d backend (backend.cpp). What it deliberately simplifies:
//   * device memory is host memory, counted in bytes per device;
//   * streams and events are synchronous: all work is done when an operation returns;
//   * kernels run on the CPU: the few below (allocation, copies, views, fills, convolutions,
//     dropout) work on the memory in place, every other op goes through at::native::cpu_fallback,
//     which copies operands to the CPU, runs the CPU kernel and copies results back.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <mutex>

#include "testdevice.h"

namespace testdevice {
namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;
constexpr c10::StreamId kStreamPool = 8; // stream ids 1..8; 0 is each device's default stream

std::atomic<int> g_count{2};
std::atomic<bool> g_keep_parameters{true};
std::atomic<c10::StreamId> g_next_stream{0};
// Like CUDA's, the current device and the current streams belong to the calling thread.
thread_local c10::DeviceIndex t_device = 0;
thread_local std::array<c10::StreamId, kMaxDevices> t_stream{};

c10::DeviceIndex checked(int index) {
  TORCH_CHECK(index >= 0 && index < g_count.load(), "testdevice: no device ", index, " (there are ",
              g_count.load(), ")");
  return static_cast<c10::DeviceIndex>(index);
}
c10::DeviceIndex index_of(c10::Device d) { return d.index() < 0 ? t_device : checked(d.index()); }

// ---- Allocator: host memory. It keeps the device and size of every live block, and each device's
// byte counts in the DeviceStats that torch.accelerator.memory_* read (no cache: reserved bytes
// are the allocated bytes).
struct Block {
  size_t size;
  c10::DeviceIndex device;
};
std::mutex g_mutex; // guards g_blocks and g_stats
std::map<uintptr_t, Block> g_blocks;
std::array<c10::CachingDeviceAllocator::DeviceStats, kMaxDevices> g_stats;
constexpr auto kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);

template <typename F>
void each_stat(c10::DeviceIndex device, F f) {
  auto& stats = g_stats[device];
  f(stats.allocated_bytes[kAll], true);
  f(stats.reserved_bytes[kAll], true);
  f(stats.allocation[kAll], false);
}

void release(void* ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_blocks.find(reinterpret_cast<uintptr_t>(ptr));
  each_stat(it->second.device,
            [&](auto& stat, bool bytes) { stat.decrease(bytes ? it->second.size : 1); });
  g_blocks.erase(it);
  std::free(ptr);
}

struct HostAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t n) override {
    const c10::Device where(kDev, t_device);
    if (n == 0) return {nullptr, where};
    void* ptr = nullptr;
    TORCH_CHECK(posix_memalign(&ptr, 64, n) == 0, "testdevice: cannot allocate ", n, " bytes");
    std::lock_guard<std::mutex> lock(g_mutex);
    g_blocks[reinterpret_cast<uintptr_t>(ptr)] = Block{n, t_device};
    each_stat(t_device, [&](auto& stat, bool bytes) { stat.increase(bytes ? n : 1); });
    return {ptr, ptr, &release, where};
  }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}                   // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {} // streams are synchronous
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_stats[checked(device)];
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    each_stat(checked(device), [](auto& stat, bool) { stat.reset_accumulated(); });
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(g_mutex);
    each_stat(checked(device), [](auto& stat, bool) { stat.reset_peak(); });
  }
};
HostAllocator g_allocator;

c10::Device device_of_pointer(const void* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_blocks.upper_bound(address);
  const bool ours = it != g_blocks.begin() && address < (--it)->first + it->second.size;
  TORCH_CHECK(ours, "testdevice: ", data, " is not device memory");
  return {kDev, it->second.device};
}

// Resizes a storage in place, keeping its bytes: Python's storage.resize_() (FSDP frees with it).
void resize_bytes(c10::StorageImpl* storage, size_t n) {
  TORCH_CHECK(storage->resizable(), "testdevice: this storage is not resizable");
  const c10::DeviceGuard guard(storage->device());
  c10::DataPtr fresh = g_allocator.allocate(n);
  const size_t kept = std::min(n, storage->nbytes());
  if (kept > 0) std::memcpy(fresh.get(), storage->data_ptr().get(), kept);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(n);
}

// ---- Generators: one per device, each drawing from a CPU generator of its own, which the CPU
// kernels of random ops then take (see fallback below).
class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex index,
                           at::Generator host = at::detail::createCPUGenerator())
      : c10::GeneratorImpl({kDev, index}, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host_(std::move(host)) {}
  static c10::DeviceType device_type() { return kDev; }
  const at::Generator& host() const { return host_; }

  void set_current_seed(uint64_t seed) override { host_.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { host_.set_offset(offset); }
  uint64_t get_offset() const override { return host_.get_offset(); }
  uint64_t current_seed() const override { return host_.current_seed(); }
  uint64_t seed() override { return host_.seed(); }
  void set_state(const c10::TensorImpl& s) override { impl()->set_state(s); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return impl()->get_state(); }

 private:
  c10::GeneratorImpl* impl() const { return host_.unsafeGetGeneratorImpl(); }
  DeviceGenerator* clone_impl() const override {
    return new DeviceGenerator(device_.index(), host_.clone());
  }
  at::Generator host_;
};

// ---- Device guard: the current device, streams, and events (an event is the time it was last
// recorded: all work before it is done by then).
using Clock = std::chrono::steady_clock;
c10::Stream stream_on(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, index), id);
}

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return {kDev, t_device}; }
  void setDevice(c10::Device device) const override { t_device = index_of(device); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_count.load()) t_device = d.index();
  }
  c10::DeviceIndex deviceCount() const noexcept override { return g_count.load(); }
  c10::Stream getStream(c10::Device d) const override {
    return stream_on(index_of(d), t_stream[index_of(d)]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return stream_on(index_of(d), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return stream_on(index_of(d), 1 + g_next_stream++ % kStreamPool);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return getStreamFromGlobalPool(d, false);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::Stream old = getStream(stream.device());
    t_stream[old.device_index()] = stream.id();
    return old;
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new Clock::time_point();
    *static_cast<Clock::time_point*>(*event) = Clock::now();
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Clock::time_point*>(event);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "testdevice: both events must be recorded before elapsed_time");
    const auto span =
        *static_cast<Clock::time_point*>(end) - *static_cast<Clock::time_point*>(start);
    return std::chrono::duration<double, std::milli>(span).count();
  }
};

// ---- Hooks: what at::globalContext() and torch.accelerator ask of the PrivateUse1 backend.
// Pinned (page-locked) host memory, which DCP's staging and `Tensor.pin_memory()` ask the device
// for: the device's memory is host memory already, so pinned memory is plain host memory whose
// pointers are remembered, for isPinnedPtr.
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* data = n == 0 ? nullptr : std::malloc(n);
    TORCH_CHECK(n == 0 || data != nullptr, "test device: out of host memory for ", n, " bytes");
    if (data != nullptr) {
      const std::lock_guard<std::mutex> lock(mutex_);
      live_.insert(data);
    }
    return {data, data, &PinnedAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &PinnedAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool pinned(const void* data) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(data) != 0;
  }

 private:
  static void release(void* data);
  mutable std::mutex mutex_;
  std::set<const void*> live_;
};
PinnedAllocator g_pinned;
void PinnedAllocator::release(void* data) {
  if (data == nullptr) return;
  {
    const std::lock_guard<std::mutex> lock(g_pinned.mutex_);
    g_pinned.live_.erase(data);
  }
  std::free(data);
}

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_count.load() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return g_count.load(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return t_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = t_device;
    set_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex i) const override {
    return exchangeDevice(i);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<DeviceGenerator>(index < 0 ? t_device : checked(index));
  }
  at::Device getDeviceFromPtr(void* data) const override { return device_of_pointer(data); }
  bool isPinnedPtr(const void* data) const override { return g_pinned.pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t n) const override {
    resize_bytes(storage.unsafeGetStorageImpl(), n);
  }
};
Hooks g_hooks;

C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);
const bool g_registered = [] {
  c10::SetAllocator(kDev, &g_allocator);
  at::RegisterPrivateUse1HooksInterface(&g_hooks);
  return true;
}();

// ---- Kernels of our own. Device memory is host memory, so a kernel may run the CPU op on a CPU
// tensor over the same bytes (an alias made with from_blob) instead of copying.
at::Tensor host(const at::Tensor& t) {
  if (!t.is_privateuseone()) return t;
  at::Tensor h = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  h._set_conj(t.is_conj());
  h._set_neg(t.is_neg());
  return h;
}
at::Tensor to_device(const at::Tensor& t, const at::Tensor& like) {
  return t.defined() ? t.to(like.device()) : t;
}

const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                 std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "testdevice: strided tensors only");
  const c10::DeviceGuard guard(device.value_or(c10::Device(kDev)));
  return at::detail::empty_generic(size, &g_allocator, kKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool>) {
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "testdevice: strided tensors only");
  const c10::DeviceGuard guard(device.value_or(c10::Device(kDev)));
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kKeys,
                                           c10::dtype_or_default(dtype));
}

// Host to device, device to host, and between devices: one CPU copy over the same bytes.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  if (dst.numel() > 0) host(dst).copy_(host(self));
  return dst;
}
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device()); // the storage grows on its own device
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  const c10::DeviceGuard guard(source.device());
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}
at::Tensor& set_whole_storage(at::Tensor& self, c10::Storage source) {
  const auto numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}
// set_(tensor) takes the source's storage and layout (FSDP1 swaps its flat parameter's so); the
// CPU fallback cannot, as it would set a host copy's storage.
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                     source.strides());
}
at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  return set_storage(self, c10::Storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true), 0,
                     {0}, {});
}

at::Tensor& fill(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() > 0) host(self).fill_(value);
  return self;
}
at::Tensor& zero(at::Tensor& self) {
  if (self.numel() > 0) host(self).zero_();
  return self;
}
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(host(self));
}
void record_stream(at::Tensor&, c10::Stream) {} // streams are synchronous

// native_dropout takes no generator (its CPU kernel would draw from the CPU's default one), so it
// is written here on bernoulli_, which does get this device's generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  if (input.numel() == 0 || !train.value_or(true)) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1.0 - p;
  const at::Tensor kept = at::empty_like(input).bernoulli_(keep);
  return {input * kept * (keep == 0.0 ? 0.0 : 1.0 / keep), kept.to(at::kBool)};
}

// On a backend other than CPU or CUDA, at::convolution calls these two, which have no CPU kernels
// of their own: they run the CPU convolution over the same bytes.
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  const auto host_bias = bias && bias->defined() ? std::optional(host(*bias)) : std::nullopt;
  const at::Tensor out = at::convolution(host(input), host(weight), host_bias, stride, padding,
                                         dilation, transposed, output_padding, groups);
  return to_device(out, input);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  const auto [gi, gw, gb] =
      at::convolution_backward(host(grad_output), host(input), host(weight), bias_sizes, stride,
                               padding, dilation, transposed, output_padding, groups, output_mask);
  return {to_device(gi, input), to_device(gw, input), to_device(gb, input)};
}

// Module.to() keeps Parameter objects (param.data = moved) only where this says the two tensors'
// impls are compatible; TensorImpl's own answer is no for PrivateUse1 (c10/core/TensorImpl.h).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.is_cpu() || t.is_privateuseone());
  };
  if (g_keep_parameters.load() && dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// ---- Everything else: the CPU fallback. Random ops get this device's generator: cpu_fallback
// would hand a device generator to a CPU kernel (which refuses it), or, without one, let the CPU
// kernel take the CPU's default generator, so seeding the device would not reproduce its numbers.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto args = stack->end() - static_cast<std::ptrdiff_t>(arguments.size());
  std::optional<c10::DeviceIndex> device;
  for (auto it = args; it != stack->end() && !device; ++it) {
    if (it->isTensor() && it->toTensor().is_privateuseone()) device = it->toTensor().get_device();
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::TypePtr type = arguments[i].type();
    if (const auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    if (type->kind() != c10::TypeKind::GeneratorType) continue;
    const at::Generator generator =
        args[i].isNone() ? default_generator(device.value_or(t_device)) : args[i].toGenerator();
    if (generator.device().type() == kDev) {
      args[i] =
          c10::IValue(static_cast<DeviceGenerator*>(generator.unsafeGetGeneratorImpl())->host());
    }
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

} // namespace

void set_device_count(int count) {
  TORCH_CHECK(count >= 1 && count <= kMaxDevices, "testdevice: 1 to ", kMaxDevices, " devices");
  g_count = count;
}
int device_count() { return g_count.load(); }
int current_device() { return t_device; }
void set_device(int index) { t_device = checked(index); }
int64_t memory_allocated(int index) {
  return g_allocator.getDeviceStats(checked(index)).allocated_bytes[kAll].current;
}
int64_t max_memory_allocated(int index) {
  return g_allocator.getDeviceStats(checked(index)).allocated_bytes[kAll].peak;
}
void reset_peak_memory_stats(int index) { g_allocator.resetPeakStats(checked(index)); }
void set_keeps_parameters(bool keep) { g_keep_parameters = keep; }
bool keeps_parameters() { return g_keep_parameters.load(); }

const at::Generator& default_generator(int index) {
  static std::array<at::Generator, kMaxDevices> generators;
  static std::array<std::once_flag, kMaxDevices> made;
  const c10::DeviceIndex device = index < 0 ? t_device : checked(index);
  std::call_once(made[device],
                 [device] { generators[device] = at::make_generator<DeviceGenerator>(device); });
  return generators[device];
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_whole_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("fill_.Scalar", TORCH_FN(fill));
  m.impl("zero_", TORCH_FN(zero));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  // Views share the storage: the CPU fallback would return copies (error_on_views refuses them).
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  // These have a composite kernel that calls their out= variant, whose CPU kernel then resizes the
  // out tensor and warns; the CPU fallback runs their own CPU kernels instead.
  for (const char* name : {"mse_loss", "smooth_l1_loss", "huber_loss"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&fallback>());
  }
}

// ---- Autocast on this device's key, with the policy of CUDA's autocast as torch's AMP docs list
// it ("CUDA Op-Specific Behavior"): matrix products and convolutions in the lower precision dtype
// (fp16 or bf16, as torch.autocast asks), pointwise transcendentals, norms, reductions and losses
// in fp32, a few ops of several inputs in the widest of their dtypes; any other op runs as it is.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

#define LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define FP32_UNLESS_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define WIDEST(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define FP32_NORM(overload, signature, with_dtype)                                           \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(at::norm, "norm." overload, signature, \
                                                      with_dtype, fp32_append_dtype)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::IntArrayRef, at::Scalar, at::ScalarType, at::Tensor, std::optional;
  // clang-format off
  LOW(mm) LOW(bmm) LOW(mv) LOW(matmul) LOW(linear) LOW(addmm) LOW(addmv) LOW(addr) LOW(addbmm)
  LOW(baddbmm) LOW(chain_matmul) LOW(linalg_multi_dot) LOW(prelu) LOW(conv1d) LOW(conv2d)
  LOW(conv3d) LOW(conv_transpose1d) LOW(conv_transpose2d, input) LOW(conv_transpose3d, input)
  LOW(lstm_cell) LOW(gru_cell) LOW(rnn_tanh_cell) LOW(rnn_relu_cell)

  FP32(acos) FP32(asin) FP32(cosh) FP32(sinh) FP32(tan) FP32(erfinv) FP32(exp) FP32(expm1)
  FP32(log) FP32(log10) FP32(log1p) FP32(log2) FP32(reciprocal) FP32(rsqrt) FP32(softplus)
  FP32(pow, Tensor_Scalar) FP32(pow, Tensor_Tensor) FP32(pow, Scalar) FP32(layer_norm)
  FP32(group_norm) FP32(renorm) FP32(dist) FP32(cdist) FP32(pdist) FP32(cosine_similarity)
  FP32(nll_loss) FP32(nll_loss2d) FP32(mse_loss) FP32(l1_loss) FP32(smooth_l1_loss) FP32(kl_div)
  FP32(binary_cross_entropy_with_logits) FP32(poisson_nll_loss) FP32(cosine_embedding_loss)
  FP32(hinge_embedding_loss) FP32(margin_ranking_loss) FP32(multilabel_margin_loss)
  FP32(multi_margin_loss) FP32(soft_margin_loss) FP32(triplet_margin_loss)
  FP32_NORM("Scalar", Tensor(const Tensor&, const Scalar&),
            Tensor(const Tensor&, const optional<Scalar>&, ScalarType))
  FP32_NORM("ScalarOpt_dim", Tensor(const Tensor&, const optional<Scalar>&, IntArrayRef, bool),
            Tensor(const Tensor&, const optional<Scalar>&, IntArrayRef, bool, ScalarType))

  FP32_UNLESS_DTYPE(softmax, int) FP32_UNLESS_DTYPE(log_softmax, int) FP32_UNLESS_DTYPE(sum)
  FP32_UNLESS_DTYPE(sum, dim_IntList) FP32_UNLESS_DTYPE(prod) FP32_UNLESS_DTYPE(prod, dim_int)
  FP32_UNLESS_DTYPE(cumsum) FP32_UNLESS_DTYPE(cumprod)
  FP32_UNLESS_DTYPE(linalg_vector_norm) FP32_UNLESS_DTYPE(linalg_matrix_norm)  // torch.norm's

  WIDEST(addcdiv) WIDEST(addcmul) WIDEST(atan2) WIDEST(bilinear) WIDEST(cross) WIDEST(dot)
  WIDEST(index_put) WIDEST(scatter_add) WIDEST(tensordot)
  // clang-format on
}

} // namespace testdevice

// What device.cpp (the device) offers backend.cpp (the c10d backend and the Python module).
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>

namespace testdevice {

constexpr int kMaxDevices = 16;

void set_device_count(int count);
int device_count();
int current_device();
void set_device(int index);

// The allocator's byte counter of one device: bytes live now, and the peak since the last reset.
int64_t memory_allocated(int index);
int64_t max_memory_allocated(int index);
void reset_peak_memory_stats(int index);

// The default generator of a device (index -1: the current device).
const at::Generator& default_generator(int index);

// Whether Module.to() keeps Parameter objects (see _has_compatible_shallow_copy_type).
void set_keeps_parameters(bool keep);
bool keeps_parameters();

} // namespace testdevice

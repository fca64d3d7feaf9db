// UP_HOST_DEVICE: marks inline functions that the host and CUDA kernels share (one formula, one
// place), and expands to nothing in host-only builds.
#pragma once

#if defined(__CUDACC__)
#define UP_HOST_DEVICE __host__ __device__
#else
#define UP_HOST_DEVICE
#endif

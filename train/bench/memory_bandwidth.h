// The machine's memory bandwidth, measured, the yardstick of the profile's GB/s column as the FMA
// peak is of its GFLOP/s: an op that only moves data (BatchNorm, an elementwise op, a reduction)
// can go no faster than the bytes it moves over this rate once its tensors are larger than the
// caches.
#pragma once

#include <cstdint>

namespace qkv::bench {

// The bytes a pass of a[i] = b[i] + c[i] moves (two read, one written) over the time it takes, in
// GB/s: the best of passes run for about `seconds` by `threads` threads (the qkv pool, a stretch
// of the arrays each; the pages are first touched, in the same stretches, before the timed
// passes). Each array holds `bytes_per_array` bytes.
double measured_stream_gbs(int threads, int64_t bytes_per_array, double seconds = 0.1);

// The size of each array for a measurement of main memory: four times the last-level cache this
// CPU reports (so that no pass finds the last one's data there), between 64 and 128 MiB: a
// virtual machine may report a whole socket's L3 (320 MiB on the Zen 4 here) of which a core
// reaches one slice (32 MiB), and first touching memory is slow there (0.75 s for 3 x 128 MiB).
// On a CPU whose cores share more than about 100 MiB of L3 the rate is partly the cache's.
int64_t stream_bytes_per_array();

// measured_stream_gbs(threads, stream_bytes_per_array()): main memory's rate, the profile's
// yardstick.
double measured_memory_gbs(int threads);

}  // namespace qkv::bench

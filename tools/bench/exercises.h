#pragma once
// The seed's four exercises (d2l 6.7.5), each a measurement on every device tessera sees.
// Each prints a table as it goes, appends rows to ctx.report and draws its chart.
#include <vector>

#include "bench/method.h"
#include "tessera/device.h"

namespace tessera::tools::bench {

// 1. float32 matmul for n = 16 ... 8192 on every GPU and up to --max-n-cpu (4096) on the CPU;
//    on GPUs also with the operands copied in and the result copied out; where the GPU
//    starts to win.
void run_matmul(Context& ctx);
// 2. A model of ~100 MB of parameters saved from and loaded onto try_gpu() as a checkpoint,
//    against the pinned-copy bandwidth.
void run_checkpoint(Context& ctx);
// 3. 1000 matmuls of 100x100 logging the Frobenius norm: read every step, logged on the
//    device and read once, and that captured as a graph (GPUs).
void run_norm_log(Context& ctx);
// 4. Two matmuls at once on two devices (two GPUs, two streams on one GPU, or two logical
//    CPU devices) against one after the other on one.
void run_parallel(Context& ctx);

// The CPU and every GPU, each once.
std::vector<Device> bench_devices();
// Waits for `device` (the bench's deliberate reads).
void wait_for(Device device);

}  // namespace tessera::tools::bench

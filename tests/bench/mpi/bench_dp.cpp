// Data-parallel training steps: bench_step's toy translation transformer (d_model 128, 4 heads,
// 2+2 layers, feed-forward 256, global batch 64 of length 20, Adam) with the global batch cut
// into equal shares over the ranks of mpirun and the gradients reduced by nn::DataParallel.
// Prints what it runs on (the MPI library, ranks, threads per rank, cores), the median step time
// and tokens/s of the global batch, and where the reduction's time went (DataParallel's timings):
// time inside the group's calls, how much of it ran before backward returned, the time after
// backward until every bucket was reduced, and when the last reduction ended against the end of
// backward. Built with MPI only:
//   build/bench_dp [threads] [steps] [dropout] [on|off] [bucket KiB, 4096]   one process
//   mpirun -np 2 build/bench_dp 1 20 0.1 on 256                              two ranks
// tests/bench/mpi/bench_dp.sh runs the comparison of docs/DISTRIBUTED.md.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/process_group.h"
#include "models/seq2seq.h"
#include "nn/data_parallel.h"
#include "nn/optim.h"
#include "tests/bench/bench_step_model.h"

using namespace qkv;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The first line of the MPI library's own description ("Open MPI v4.1.4, ...").
std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, size_t(length));
  return s.substr(0, s.find_first_of("\n,"));
}

}  // namespace

int main(int argc, char** argv) {
  auto group = ProcessGroup::from_environment();  // initialises MPI under mpirun
  const int ranks = group->size(), rank = group->rank();
  set_num_threads(argc > 1 ? std::atoi(argv[1]) : 1);
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const double dropout = argc > 3 ? std::atof(argv[3]) : 0.1;
  const std::string overlap = argc > 4 ? argv[4] : "on";
  const int64_t bucket_kib = argc > 5 ? std::atoll(argv[5]) : 4096;
  const int64_t batch = bench::kStepBatch, len = bench::kStepLength, vocab = bench::kStepVocab,
                pad = bench::kStepPad;
  if (steps < 1 || (overlap != "on" && overlap != "off") || bucket_kib < 0 || batch % ranks != 0) {
    std::fprintf(
        stderr,
        "bench_dp: usage: bench_dp [threads] [steps >= 1] [dropout] [on|off] [bucket KiB], under "
        "mpirun with a number of ranks that divides %lld\n",
        (long long)batch);
    return 2;
  }
  if (rank == 0)
    std::printf("bench_dp: %s; %d rank%s (%s group), %d thread%s each, %u cores\n",
                mpi_library().c_str(), ranks, ranks == 1 ? "" : "s", group->name().c_str(),
                num_threads(), num_threads() == 1 ? "" : "s", std::thread::hardware_concurrency());

  manual_seed(0);
  const models::Seq2SeqConfig cfg = bench::step_model_config(dropout);
  models::Seq2SeqTransformer model(cfg);
  model.train();
  nn::Adam opt(model.parameters(), 1e-3);
  if (rank == 0)
    std::printf("model: %lld parameters, %.2f MB of float32 gradients\n",
                (long long)model.num_parameters(), double(model.num_parameters()) * 4 / 1e6);
  nn::DataParallel dp(
      model.parameters(), group,
      nn::DataParallelOptions{
          .bucket_bytes = size_t(bucket_kib) << 10, .overlap = overlap == "on", .average = true});
  dp.broadcast_parameters();

  // The global batch (bench_step's), and this rank's contiguous share of its rows.
  const bench::StepBatch step_batch = bench::step_batch();
  const int64_t share = batch / ranks;
  Tensor src = narrow(step_batch.source, 0, rank * share, share).contiguous();
  Tensor tgt = narrow(step_batch.target, 0, rank * share, share);
  Tensor tgt_in = contiguous(narrow(tgt, 1, 0, len)), tgt_out = contiguous(narrow(tgt, 1, 1, len));
  Tensor src_mask = eq(src, double(pad)), tgt_mask = eq(tgt_in, double(pad));

  Tensor together = zeros({1});
  auto barrier = [&] { group->allreduce_sum(together); };  // the ranks start each step together
  std::vector<double> step_ms, backward_ms, in_calls_ms, during_ms, after_ms, margin_ms;
  const int warm_up = 3;
  for (int it = 0; it < warm_up + steps; ++it) {
    barrier();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor logits = model.forward(src, tgt_in, src_mask, tgt_mask);
    Tensor loss = cross_entropy(reshape(logits, {-1, vocab}), reshape(tgt_out, {-1}), pad);
    dp.backward(loss);
    opt.step();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (it < warm_up) continue;
    const nn::DataParallel::Timings& t = dp.last_timings();
    step_ms.push_back(ms);
    backward_ms.push_back(t.backward * 1e3);
    in_calls_ms.push_back(t.in_collectives * 1e3);
    during_ms.push_back(t.in_collectives_during_backward * 1e3);
    after_ms.push_back(t.after_backward * 1e3);
    margin_ms.push_back(t.last_reduction_before_backward_end * 1e3);
  }
  // The slowest rank's median step: a step is as fast as its last rank.
  Tensor all = group->allgather(tensor({median(step_ms)}, {1}, {DType::f64}));
  const std::vector<double> per_rank = all.to_vector<double>();
  const double step = *std::max_element(per_rank.begin(), per_rank.end());
  if (rank == 0) {
    std::printf(
        "np %d x %d thread%s, overlap %s, dropout %g: %.1f ms/step (median of %d, slowest rank), "
        "%.0f tokens/s; %zu gradient bucket%s, %zu started during backward\n",
        ranks, num_threads(), num_threads() == 1 ? "" : "s", overlap.c_str(), dropout, step, steps,
        double(batch * len) / (step * 1e-3), dp.buckets().size(),
        dp.buckets().size() == 1 ? "" : "s", dp.buckets_started_during_backward());
    std::printf(
        "rank 0 medians: backward %.2f ms; in collectives %.2f ms, %.2f of them during backward; "
        "after backward %.2f ms; the last reduction ended %.2f ms %s backward ended\n",
        median(backward_ms), median(in_calls_ms), median(during_ms), median(after_ms),
        std::abs(median(margin_ms)), median(margin_ms) >= 0 ? "before" : "after");
  }
  return 0;
}

// The toy next-token task cc/torch's FSDP tests train on, which every rank
// reproduces alone: each rank's token batch of a step (and micro-batch), its
// targets and loss, and the loss on the global batch (every rank's at once)
// that single-process training computes.
// Header-only: a unit that includes LibTorch compiles in 15-20 s.

#ifndef DISTKIT_CC_TORCH_TOKEN_TASK_TEST_UTIL_H_
#define DISTKIT_CC_TORCH_TOKEN_TASK_TEST_UTIL_H_

#include <torch/nn/functional/loss.h>
#include <torch/types.h>

#include <vector>

namespace distkit {
namespace testing {

constexpr int kVocab = 11, kBatch = 3, kSeq = 4;

// Rank `rank`'s tokens at `step`, micro-batch `micro`: [kBatch, kSeq].
inline torch::Tensor Tokens(int rank, int step, int micro = 0) {
  return (torch::arange(kBatch * kSeq, torch::kLong).reshape({kBatch, kSeq}) *
              7 +
          rank * 3 + step * 5 + micro) %
         kVocab;
}
inline torch::Tensor Targets(const torch::Tensor& tokens) {
  return (tokens * 2 + 1) % kVocab;
}
inline torch::Tensor TokenLoss(const torch::Tensor& logits,
                               const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat).reshape({-1, kVocab}), targets.reshape({-1}));
}

// `net` (a module holder whose forward maps tokens to logits) on rank
// `rank`'s batch.
template <typename Net>
torch::Tensor RankLoss(Net& net, int rank, int step, int micro = 0) {
  const torch::Tensor tokens = Tokens(rank, step, micro);
  return TokenLoss(net->forward(tokens), Targets(tokens));
}

// `net` on the batches of ranks 0..world-1 at once, in rank order.
template <typename Net>
torch::Tensor GlobalLoss(Net& net, int world, int step, int micro = 0) {
  std::vector<torch::Tensor> tokens;
  for (int r = 0; r < world; ++r) tokens.push_back(Tokens(r, step, micro));
  const torch::Tensor all = torch::cat(tokens);
  return TokenLoss(net->forward(all), Targets(all));
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_TOKEN_TASK_TEST_UTIL_H_

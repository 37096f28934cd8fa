// Embedding: a table of num_embeddings vectors of embedding_dim, looked up by index, as PyTorch's
// (weight [num_embeddings, embedding_dim] ~ N(0, 1)). The lookup is index_select on the table,
// whose gradient adds each looked-up row's gradient back at its index (repeated indices add up).
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  KILN_ARG(int64_t, num_embeddings);
  KILN_ARG(int64_t, embedding_dim);
};

// The rows of weight at indices (i32, any shape; each in [0, rows)): indices' shape + [dim].
Tensor embedding(const Tensor& indices, const Tensor& weight);

class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options_);
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  void reset_parameters();
  EmbeddingOptions options;
  Tensor weight;  // [num_embeddings, embedding_dim]
};

}  // namespace kiln::nn

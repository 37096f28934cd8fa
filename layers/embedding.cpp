#include "kiln/layers/embedding.h"

#include "kiln/layers/init.h"

namespace kiln::nn {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  KILN_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be [rows, dim], got ", weight.shape());
  KILN_CHECK(indices.dtype() == DType::i32, DTypeError, "embedding: indices must be i32, got ", indices.dtype());
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

Embedding::Embedding(const EmbeddingOptions& options_) : options(options_) {
  KILN_CHECK(options.num_embeddings() > 0 && options.embedding_dim() > 0, ValueError,
             "Embedding: num_embeddings and embedding_dim must be positive, got ", options.num_embeddings(), " and ",
             options.embedding_dim());
  weight = register_parameter("weight", empty({options.num_embeddings(), options.embedding_dim()}));
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight); }

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight); }

std::string Embedding::extra_repr() const {
  return detail::concat(options.num_embeddings(), ", ", options.embedding_dim());
}

}  // namespace kiln::nn

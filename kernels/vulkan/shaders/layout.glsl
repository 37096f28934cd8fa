// How a shader walks a strided tensor (included by the elementwise shaders; the host side is
// kernels/vulkan/elementwise.cpp's Layout): element i of the row-major index space of a tensor
// of up to 8 dimensions sits at offset + sum_d index_d * stride[d]. The host drops size-1
// dimensions and merges dimensions that lie back to back, so a contiguous tensor is one flat
// row (`contiguous`: offset + i, no division) and only real views and broadcasts (stride 0)
// pay for the divisions. Indices are 32-bit: the host refuses tensors of 2^31 elements or more.
struct Layout {
  int rank;
  int offset;
  int contiguous;
  int unused;
  int size[8];
  int stride[8];
};

int at(Layout l, int i) {
  if (l.contiguous != 0) return l.offset + i;
  int off = l.offset;
  for (int d = l.rank - 1; d >= 0; --d) {
    off += (i % l.size[d]) * l.stride[d];
    i /= l.size[d];
  }
  return off;
}

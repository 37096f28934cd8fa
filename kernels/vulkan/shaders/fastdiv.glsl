// Division by a number the host knows, without a divide: n / d = (umulhi(n, magic) + n) >> shift
// for 0 <= n < 2^31, where the host (kernels/vulkan/vulkan_backend.h's divisor) gives
// shift = ceil(log2 d) and magic = floor(2^32 (2^shift - d) / d) + 1 (Granlund and Montgomery's
// method, as in CUTLASS's FastDivmod). A GPU has no integer divide instruction: `n / d` by a
// value known only at run time compiles to some twenty instructions, this to three. The
// convolutions' index arithmetic divides on every load, by the image's and the filter's sizes.
struct Divisor {
  int d;
  uint magic;
  uint shift;
};

int div_by(int n, Divisor q) {
  uint hi, lo;
  umulExtended(uint(n), q.magic, hi, lo);
  return int((hi + uint(n)) >> q.shift);
}

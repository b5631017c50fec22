// scripts/golden/iq4_quantize_oracle.c: quantizes a float32 file with ggml's own IQ4_NL and
// IQ4_XS encoders (quantize_iq4_nl / quantize_iq4_xs without an importance matrix, what
// llama-quantize writes), for tests/data/iq4 (make_iq4_golden.sh builds and runs it against
// llama.cpp's ggml-quants.c). Not part of Sluice.
//   iq4_quantize_oracle IN.f32 OUT_NL.bin OUT_XS.bin   (IN: a whole number of 256-value rows)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

size_t quantize_iq4_nl(const float* src, void* dst, int64_t nrow, int64_t n_per_row, const float* imatrix);
size_t quantize_iq4_xs(const float* src, void* dst, int64_t nrow, int64_t n_per_row, const float* imatrix);

// ggml-quants.c references these for its asserts and other types; none runs here.
void ggml_abort(const char* file, int line, const char* fmt, ...) {
  fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
  abort();
}
size_t ggml_row_size(int type, int64_t n) { abort(); }
const char* ggml_type_name(int type) { abort(); }
size_t ggml_type_size(int type) { abort(); }

static void write_file(const char* path, const void* p, size_t n) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) abort();
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 1;
  fseek(f, 0, SEEK_END);
  const int64_t n = ftell(f) / 4;
  fseek(f, 0, SEEK_SET);
  float* x = malloc(n * 4);
  uint8_t* y = malloc(n);
  if (fread(x, 4, n, f) != (size_t)n || n % 256) return 1;
  fclose(f);
  // Rows of 256: the XS encoder's super-block, and a whole number of NL blocks.
  write_file(argv[2], y, quantize_iq4_nl(x, y, n / 256, 256, NULL));
  write_file(argv[3], y, quantize_iq4_xs(x, y, n / 256, 256, NULL));
  return 0;
}

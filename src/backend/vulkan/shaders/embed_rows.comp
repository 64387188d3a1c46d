#version 450
// Prompt chunks' embedding rows decoded on the device (GEMMA_VULKAN_GPU_ROWS): the host copies
// each token's row as stored in the checkpoint (its packed codes, then its f32 scale blocks for the
// quantized kinds) into the staging buffer, one record of `rec_words` u32 words per token, and this
// kernel writes y[t][i] = row(t)[i] * embed_scale as ref::EmbeddingRowFast computes it on the host:
// dense kinds f32(value) * embed_scale; quantized kinds (f32(code - offset) * scale[block]) rounded
// to f32, then times embed_scale (int8: the signed byte). The same two f32 products: the same bits.
// Grid: (blocks of 256 x PER columns, tokens).
// Kinds (the constant KIND): 1 bf16, 2 f16, 3 int2, 4 int4, 5 int8 (codes LSB first in each word).
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 4;

layout(std430, binding = 0) readonly buffer R { uint raw[]; };
layout(std430, binding = 0) readonly buffer RF { float rawf[]; };  // the records' scale blocks
layout(std430, binding = 3) writeonly buffer Y { float y[]; };

layout(push_constant) uniform P {
  uint cols;
  uint rec_words;   // u32 words per token's record
  uint rec0;        // first record word (the staging region's offset / 4)
  uint scale_word;  // quantized kinds: the record's first scale word
  uint block;       // quantized kinds: columns per scale block
  uint y_stride;    // floats per token row of y
  float embed_scale;
} p;

// f16 bits -> f32, exactly (subnormals included), by integer operations.
float F16Bits(uint h) {
  const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0u) {
    const float v = float(m) * (1.0 / 16777216.0);  // m * 2^-24: exact
    return s != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(s | 0x7F800000u | (m << 13));
  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

void main() {
  const uint t = gl_WorkGroupID.y;
  const uint base = p.rec0 + t * p.rec_words;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.cols; i += stride) {
    precise float v;
    if (KIND == 1 || KIND == 2) {
      const uint h = (raw[base + i / 2] >> (16u * (i & 1u))) & 0xFFFFu;
      const float f = KIND == 1 ? uintBitsToFloat(h << 16) : F16Bits(h);
      v = f * p.embed_scale;
    } else {
      const uint per = KIND == 3 ? 16u : KIND == 4 ? 8u : 4u;  // codes per word
      const uint bits = 32u / per;
      const uint w = raw[base + i / per];
      const int off = int(bits * (i % per));
      const int c = KIND == 5 ? bitfieldExtract(int(w), off, 8)
                              : int(bitfieldExtract(w, off, int(bits))) - int(1u << (bits - 1u));
      const float s = rawf[base + p.scale_word + i / p.block];
      precise float q = float(c) * s;
      v = q * p.embed_scale;
    }
    y[t * p.y_stride + i] = v;
  }
}

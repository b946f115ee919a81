__kernel void ct_fill(__global float *x, const float v, const unsigned n) { size_t i = get_global_id(0); if (i < n) x[i] = v; }

// mmvq kernel instantiations for the F32, F16, BF16 (one file per type group so they compile in parallel).
#include "cuda/mmvq_impl.cuh"

int st_mmvq_launch_float(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    switch (type) {
        ST_MMVQ_CASE(ST_TYPE_F32)
        ST_MMVQ_CASE(ST_TYPE_F16)
        ST_MMVQ_CASE(ST_TYPE_BF16)
    default: return 0;
    }
}

// mmvq kernel instantiations for the 32-element block types (one file per type group so they compile in parallel).
#include "cuda/mmvq_impl.cuh"

int st_mmvq_launch_legacy(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    switch (type) {
        ST_MMVQ_CASE(ST_TYPE_Q4_0)
        ST_MMVQ_CASE(ST_TYPE_Q4_1)
        ST_MMVQ_CASE(ST_TYPE_Q5_0)
        ST_MMVQ_CASE(ST_TYPE_Q5_1)
        ST_MMVQ_CASE(ST_TYPE_Q8_0)
        ST_MMVQ_CASE(ST_TYPE_IQ4_NL)
        ST_MMVQ_CASE(ST_TYPE_MXFP4)
    default: return 0;
    }
}

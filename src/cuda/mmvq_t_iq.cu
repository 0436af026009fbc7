// mmvq kernel instantiations for the 256-element I-quants (one file per type group so they compile in parallel).
#include "cuda/mmvq_impl.cuh"

int st_mmvq_launch_iq(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    switch (type) {
        ST_MMVQ_CASE(ST_TYPE_IQ1_S)
        ST_MMVQ_CASE(ST_TYPE_IQ1_M)
        ST_MMVQ_CASE(ST_TYPE_IQ2_XXS)
        ST_MMVQ_CASE(ST_TYPE_IQ2_XS)
        ST_MMVQ_CASE(ST_TYPE_IQ2_S)
        ST_MMVQ_CASE(ST_TYPE_IQ3_XXS)
        ST_MMVQ_CASE(ST_TYPE_IQ3_S)
        ST_MMVQ_CASE(ST_TYPE_IQ4_XS)
    default: return 0;
    }
}

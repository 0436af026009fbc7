// mmvq kernel instantiations for the K-quants (one file per type group so they compile in parallel).
#include "cuda/mmvq_impl.cuh"

int st_mmvq_launch_kquant(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    // The types whose block fields are not 16-byte aligned: rows staged in shared memory when they fit.
    const size_t staged = st_mmvq_staged_smem(type, a, n_tok, glu);
    if (staged) switch (type) {
        ST_MMVQ_STAGED_CASE(ST_TYPE_Q2_K)
        ST_MMVQ_STAGED_CASE(ST_TYPE_Q3_K)
        ST_MMVQ_STAGED_CASE(ST_TYPE_Q6_K)
        default: break;
        }
    switch (type) {
        ST_MMVQ_CASE(ST_TYPE_Q2_K)
        ST_MMVQ_CASE(ST_TYPE_Q3_K)
        ST_MMVQ_CASE(ST_TYPE_Q4_K)
        ST_MMVQ_CASE(ST_TYPE_Q5_K)
        ST_MMVQ_CASE(ST_TYPE_Q6_K)
    default: return 0;
    }
}

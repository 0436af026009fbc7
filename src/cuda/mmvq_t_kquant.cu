// mmvq kernel instantiations for the K-quants (one file per type group so they compile in parallel).
#include "cuda/mmvq_impl.cuh"

int st_mmvq_launch_kquant(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    // The types whose block fields are not 16-byte aligned: rows staged in shared memory when they fit.
    const size_t staged = st_mmvq_staged_smem(type, a, n_tok, glu);
    const int halves = staged ? st_mmvq_hb_halves(type, a) : 0;
    if (halves) {  // Q6_K, a half block per lane (STRATA_MMVQ_HB=1)
        const int rw = ST_WARP_SIZE / halves;  // rows per warp
        const dim3 g((unsigned)((a.n_out + MMVQ_WARPS * rw - 1) / (MMVQ_WARPS * rw))), b(ST_WARP_SIZE, MMVQ_WARPS);
        const size_t smem = (size_t)MMVQ_WARPS * rw * (size_t)a.row_bytes;
        if (halves == 16) st_dec_launch_if(st_mmvq_pdl(), st_k_mmvq_q6k_hb<16>, g, b, smem, s, a);
        else st_dec_launch_if(st_mmvq_pdl(), st_k_mmvq_q6k_hb<32>, g, b, smem, s, a);
        return 1;
    }
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

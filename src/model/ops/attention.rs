//! Causal multi-head self-attention on a packed `qkv` buffer.
//!
//! `qkv: [b*t, 3c]` holds q | k | v, head `h` in columns `h*hs..(h+1)*hs` of
//! each third (the GPT-2 layout, so export needs no reshuffling). Per batch
//! row and head: S = q k^T / sqrt(hs), P = causal softmax(S), y = P v.
//!
//! Grouped-query attention (Llama's `num_key_value_heads`): with
//! `kv_heads < heads`, k and v have `kv_heads` heads each (rows of
//! `c + 2 kv` values, kv = kv_heads * hs) and query head `h` reads key/value
//! head `h / (heads / kv_heads)`; the backward sums the group's gradients.
//! The probabilities P `[b, heads, t, t]` are kept for the backward.
//! Parallel over batch rows: each task owns whole rows of every buffer.

use super::fastmath::{dot, exp_in_place_sum, max};
use super::matmul::{gemm, Threads, View};
use super::simd::multiversion;
use rayon::prelude::*;

/// Shapes of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Sequences in the batch.
    pub b: usize,
    /// Tokens per sequence.
    pub t: usize,
    /// Model width (all heads together).
    pub c: usize,
    /// Number of (query) heads; `c % heads == 0`.
    pub heads: usize,
    /// Key/value heads; divides `heads` (`heads` itself: plain multi-head).
    pub kv_heads: usize,
}

impl Dims {
    /// Plain multi-head attention: as many key/value heads as query heads.
    pub fn mha(b: usize, t: usize, c: usize, heads: usize) -> Dims {
        Dims { b, t, c, heads, kv_heads: heads }
    }

    /// Values per token of the packed buffer: q, then k and v of `kv_heads` heads.
    pub fn ld(&self) -> usize {
        self.c + 2 * self.kv_heads * (self.c / self.heads)
    }

    /// Columns of query head `h`'s key and value heads in a packed row.
    fn kv_cols(&self, h: usize) -> (usize, usize) {
        let hs = self.c / self.heads;
        let g = h / (self.heads / self.kv_heads);
        (self.c + g * hs, self.c + self.kv_heads * hs + g * hs)
    }
}

/// Query rows per block. Causal attention only needs the lower triangle of
/// S = q k^T: block-row by block-row, each block only against the keys up to
/// its last row, skips the upper triangle except inside the diagonal blocks,
/// leaving (1 + 1/nb) / 2 of the T x T work for nb blocks (5/8 at t = 128,
/// 9/16 at t = 256). Smaller blocks skip more but make each product
/// smaller; `examples/bench_attention.rs` measured 16 and 32 fastest on
/// both bench shapes, 64 (the first choice) 5-10% slower (docs/decisions.md).
pub const BLOCK: usize = 32;

/// Forward: writes `out: [b*t, c]` and `probs: [b, heads, t, t]`. Row `i` of
/// `probs` is written up to the end of its block (entries past `i` exactly
/// 0); the rest of the upper triangle is never written nor read.
pub fn forward(out: &mut [f32], probs: &mut [f32], qkv: &[f32], d: Dims) {
    forward_blocked(out, probs, qkv, d, BLOCK)
}

/// [`forward`] with query blocks of `block` rows; `block >= t` computes the
/// full T x T products.
pub fn forward_blocked(out: &mut [f32], probs: &mut [f32], qkv: &[f32], d: Dims, block: usize) {
    let Dims { b, t, c, heads, .. } = d;
    let (hs, ld) = (c / heads, d.ld());
    let scale = 1.0 / (hs as f32).sqrt();
    out[..b * t * c]
        .par_chunks_mut(t * c)
        .zip(probs[..b * heads * t * t].par_chunks_mut(heads * t * t))
        .zip(qkv.par_chunks(t * ld))
        .for_each(|((out, probs), qkv)| {
            let mut kt = vec![0.0f32; hs * t];
            for (h, p) in probs.chunks_exact_mut(t * t).enumerate() {
                let (kc, vc) = d.kv_cols(h);
                let (q, k, v) = (&qkv[h * hs..], &qkv[kc..], &qkv[vc..]);
                transpose_head(&mut kt, k, t, ld);
                for i0 in (0..t).step_by(block.max(1)) {
                    // Query rows i0..i1 see keys 0..i1 at most (causal).
                    let i1 = (i0 + block.max(1)).min(t);
                    let pb = &mut p[i0 * t..i1 * t];
                    // S = q k^T, k^T from its copy (`transpose_head`)
                    let qb = View::strided(&q[i0 * ld..], ld, 1);
                    gemm(pb, t, qb, View::rows(&kt, t), i1 - i0, i1, hs, false, Threads::One);
                    causal_softmax_rows(pb, t, i0, i1, scale);
                    // y = P v
                    let ob = &mut out[i0 * c + h * hs..];
                    let vv = View::strided(v, ld, 1);
                    gemm(ob, c, View::rows(pb, t), vv, i1 - i0, hs, i1, false, Threads::One);
                }
            }
        });
}

/// `dst[d * t + j] = head[j * ld + d]` for `j < t`, `d < dst.len() / t`: one
/// head's `[t, hs]` columns of a packed buffer (`k` or `v` of `qkv`), transposed.
///
/// Why: for a row-major product `C = A B`, gemm computes `C^T = B^T A^T` and
/// copies ("packs") `B^T` into panels of contiguous columns; when `B` is
/// `k^T` or `v^T` read in place (one row per token, `ld` apart) that copy
/// gathers value by value, again for every query block. That gather was 30%
/// of attention's time (`perf`, issue 13); from this copy, made once per
/// head, gemm copies whole vectors.
fn transpose_head(dst: &mut [f32], head: &[f32], t: usize, ld: usize) {
    let hs = dst.len() / t;
    // 8 tokens at a time: each write is 8 contiguous values of one row of
    // `dst` (a plain token-by-token loop writes one value per cache line).
    for j0 in (0..t).step_by(8) {
        let j1 = (j0 + 8).min(t);
        for (d, out) in dst.chunks_exact_mut(t).take(hs).enumerate() {
            for (j, y) in (j0..j1).zip(&mut out[j0..j1]) {
                *y = head[j * ld + d];
            }
        }
    }
}

multiversion! {
    /// Rows `i0..` of a causal softmax, one per `t` values of `block`, each
    /// to the block's end `i1`: in row `i`, entries `0..=i` become
    /// softmax(scale * s), entries after `i` (the future) exactly 0.
    fn causal_softmax_rows(block: &mut [f32], t: usize, i0: usize, i1: usize, scale: f32) {
        for (r, row) in block.chunks_exact_mut(t).enumerate() {
            let (past, future) = row[..i1].split_at_mut(i0 + r + 1);
            let m = max(past) * scale;
            let inv = 1.0 / exp_in_place_sum(past, scale, m);
            past.iter_mut().for_each(|x| *x *= inv);
            future.fill(0.0);
        }
    }
}

multiversion! {
    /// Softmax's backward over a block's rows (`t` values each, up to `i1`):
    /// dS = P * (dP - sum_j P dP) * scale, in place of dP; 0 in the future,
    /// since P is.
    fn softmax_backward_rows(ds: &mut [f32], p: &[f32], t: usize, i1: usize, scale: f32) {
        for (dsr, pr) in ds.chunks_exact_mut(t).zip(p.chunks_exact(t)) {
            let (dsr, pr) = (&mut dsr[..i1], &pr[..i1]);
            let d = dot(dsr, pr);
            for (x, pv) in dsr.iter_mut().zip(pr) {
                *x = pv * (*x - d) * scale;
            }
        }
    }
}

/// Backward: overwrites `dqkv: [b*t, 3c]` from `dout: [b*t, c]`, using the
/// saved `probs`; `scratch` has the size of `probs` and holds dP / dS (their
/// causal part only, in the forward's blocks).
pub fn backward(dqkv: &mut [f32], scratch: &mut [f32], dout: &[f32], qkv: &[f32], probs: &[f32], d: Dims) {
    backward_blocked(dqkv, scratch, dout, qkv, probs, d, BLOCK)
}

/// [`backward`] with the forward's query blocks of `block` rows. Every
/// product runs per query block, against the keys that block sees: dq of
/// the block is written whole, while dk and dv of keys `0..i1` are sums over
/// the query blocks that see them, accumulated block after block from 0 (a
/// second pass over key blocks, as the reverted first attempt had, would
/// have to read dS and P back column-block-wise through offset transposed
/// views; here every view starts at a block's first row).
pub fn backward_blocked(
    dqkv: &mut [f32],
    scratch: &mut [f32],
    dout: &[f32],
    qkv: &[f32],
    probs: &[f32],
    d: Dims,
    block: usize,
) {
    let Dims { b, t, c, heads, .. } = d;
    let (hs, ld) = (c / heads, d.ld());
    let scale = 1.0 / (hs as f32).sqrt();
    dqkv[..b * t * ld]
        .par_chunks_mut(t * ld)
        .zip(scratch[..b * heads * t * t].par_chunks_mut(heads * t * t))
        .zip(dout.par_chunks(t * c))
        .zip(qkv.par_chunks(t * ld))
        .zip(probs.par_chunks(heads * t * t))
        .for_each(|((((dqkv, scratch), dout), qkv), probs)| {
            // dk and dv are sums over query blocks (and over the query heads
            // of a group): start them at 0.
            for row in dqkv.chunks_exact_mut(ld) {
                row[c..].fill(0.0);
            }
            let mut vt = vec![0.0f32; hs * t];
            for (h, (ds, p)) in scratch.chunks_exact_mut(t * t).zip(probs.chunks_exact(t * t)).enumerate() {
                let (kc, vc) = d.kv_cols(h);
                let (q, k, v) = (&qkv[h * hs..], &qkv[kc..], &qkv[vc..]);
                let dy = &dout[h * hs..];
                transpose_head(&mut vt, v, t, ld);
                for i0 in (0..t).step_by(block.max(1)) {
                    // Query rows i0..i1 against keys 0..i1 (the forward's block).
                    let i1 = (i0 + block.max(1)).min(t);
                    let (m, dsb, pb) = (i1 - i0, &mut ds[i0 * t..i1 * t], &p[i0 * t..i1 * t]);
                    let dyb = View::strided(&dy[i0 * c..], c, 1);
                    // dP = dy v^T (v^T from its copy) ; dv[0..i1] += P^T dy
                    gemm(dsb, t, dyb, View::rows(&vt, t), m, i1, hs, false, Threads::One);
                    let dv = &mut dqkv[vc..];
                    gemm(dv, ld, View::transposed(pb, t), dyb, i1, hs, m, true, Threads::One);
                    // dS = P * (dP - sum_j P dP) * scale (softmax backward)
                    softmax_backward_rows(dsb, pb, t, i1, scale);
                    // dq = dS k ; dk[0..i1] += dS^T q
                    let dq = &mut dqkv[i0 * ld + h * hs..];
                    gemm(dq, ld, View::rows(dsb, t), View::strided(k, ld, 1), m, hs, i1, false, Threads::One);
                    let dk = &mut dqkv[kc..];
                    let qb = View::strided(&q[i0 * ld..], ld, 1);
                    gemm(dk, ld, View::transposed(dsb, t), qb, i1, hs, m, true, Threads::One);
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn attention_single_head_by_hand() {
        // t = 2, c = 1 (one head, hs = 1, scale 1). q = [1, 1], k = [0, ln 3], v = [10, 20].
        // token 0 sees only itself: y0 = 10. token 1: weights softmax([0, ln 3]) = [1/4, 3/4] -> y1 = 17.5
        let qkv = [1.0, 0.0, 10.0, 1.0, 3f32.ln(), 20.0];
        let (mut y, mut p) = ([0.0; 2], [0.0; 4]);
        forward(&mut y, &mut p, &qkv, Dims::mha(1, 2, 1, 1));
        assert_eq!(p[1], 0.0, "no attention to the future");
        assert!((y[0] - 10.0).abs() < 1e-5 && (y[1] - 17.5).abs() < 1e-5, "{y:?}");
    }

    #[test]
    fn attention_backward_matches_finite_differences() {
        for block in [2, 5] {
            backward_matches_finite_differences(Dims::mha(2, 5, 6, 2), block);
        }
    }

    #[test]
    fn grouped_query_attention_backward_matches_finite_differences() {
        // 4 query heads of 2 sharing 2 key/value heads; and all 4 sharing one
        for kv_heads in [2, 1] {
            backward_matches_finite_differences(Dims { b: 2, t: 5, c: 8, heads: 4, kv_heads }, 2);
        }
    }

    #[test]
    fn grouped_query_attention_by_hand() {
        // Two query heads of width 1 share one key/value head: t = 2,
        // rows [q0, q1, k, v]. Head 0 (q = 1) on keys [0, ln 3] weighs the
        // values [10, 20] 1/4, 3/4 at token 1 -> 17.5; head 1 (q = 0)
        // weighs them equally -> 15. Token 0 sees only itself: 10.
        let qkv = [1.0, 0.0, 0.0, 10.0, 1.0, 0.0, 3f32.ln(), 20.0];
        let (mut y, mut p) = ([0.0; 4], [0.0; 8]);
        forward(&mut y, &mut p, &qkv, Dims { b: 1, t: 2, c: 2, heads: 2, kv_heads: 1 });
        for (a, b) in y.iter().zip([10.0, 10.0, 17.5, 15.0]) {
            assert!((a - b).abs() < 1e-5, "{y:?}");
        }
    }

    /// Block 2 on t = 5: three query blocks, the last one ragged; 5 = t is
    /// the full T x T computation.
    fn backward_matches_finite_differences(d: Dims, block: usize) {
        let qkv = probe(d.b * d.t * d.ld(), 1.7);
        let n_probs = d.b * d.heads * d.t * d.t;
        check_op(
            &[qkv],
            |ins| {
                let (mut y, mut p) = (vec![0.0; d.b * d.t * d.c], vec![0.0; n_probs]);
                forward_blocked(&mut y, &mut p, &ins[0], d, block);
                (y, p)
            },
            |ins, dy, p| {
                let (mut dqkv, mut scratch) = (vec![f32::NAN; ins[0].len()], vec![0.0; n_probs]);
                backward_blocked(&mut dqkv, &mut scratch, dy, &ins[0], p, d, block);
                vec![dqkv]
            },
        );
    }

    /// Forward output and gradients for one block size; the buffers start
    /// as NaN so that reading a never-written (skipped) entry shows.
    fn run_blocked(d: Dims, qkv: &[f32], dy: &[f32], block: usize) -> (Vec<f32>, Vec<f32>) {
        let n_probs = d.b * d.heads * d.t * d.t;
        let (mut y, mut p) = (vec![f32::NAN; d.b * d.t * d.c], vec![f32::NAN; n_probs]);
        forward_blocked(&mut y, &mut p, qkv, d, block);
        let (mut dqkv, mut scratch) = (vec![f32::NAN; qkv.len()], vec![f32::NAN; n_probs]);
        backward_blocked(&mut dqkv, &mut scratch, dy, qkv, &p, d, block);
        (y, dqkv)
    }

    #[test]
    fn softmax_is_the_same_bits_on_both_copies() {
        // a block of 3 query rows from i0 = 37 (past lengths 38..40: two
        // 16-lane vectors and a tail) in rows of t = 45, to i1 = 40
        let (t, i0, i1, scale) = (45, 37, 40, 0.125);
        let s = probe(3 * t, 2.1);
        let dp = probe(3 * t, 0.7);
        let (mut p0, mut p1) = (s.clone(), s.clone());
        causal_softmax_rows::baseline(&mut p0, t, i0, i1, scale);
        let (mut ds0, mut ds1) = (dp.clone(), dp.clone());
        softmax_backward_rows::baseline(&mut ds0, &p0, t, i1, scale);
        let row_sum: f32 = p0[..i0 + 1].iter().sum();
        assert!((row_sum - 1.0).abs() < 1e-6 && p0[i0 + 1..i1].iter().all(|&x| x == 0.0));
        if !super::super::simd::cpu_has_wide() {
            return;
        }
        // SAFETY: the CPU has AVX-512.
        unsafe {
            causal_softmax_rows::wide(&mut p1, t, i0, i1, scale);
            softmax_backward_rows::wide(&mut ds1, &p0, t, i1, scale);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&p0), bits(&p1));
        assert_eq!(bits(&ds0), bits(&ds1));
    }

    #[test]
    fn skipping_the_upper_triangle_changes_nothing_but_rounding() {
        // block = t is the full computation; 3 on t = 7 leaves a ragged last
        // block, 1 skips the most.
        let d = Dims::mha(2, 7, 8, 2);
        let (qkv, dy) = (probe(d.b * d.t * 3 * d.c, 1.3), probe(d.b * d.t * d.c, 0.4));
        let (y_full, g_full) = run_blocked(d, &qkv, &dy, d.t);
        assert!(y_full.iter().chain(&g_full).all(|g| g.is_finite()), "every entry is written");
        for block in [1, 3, 4] {
            let (y, g) = run_blocked(d, &qkv, &dy, block);
            for (a, b) in y.iter().zip(&y_full).chain(g.iter().zip(&g_full)) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "block {block}: {a} vs {b}");
            }
        }
    }
}

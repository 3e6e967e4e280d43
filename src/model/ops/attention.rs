//! Causal multi-head self-attention on a packed `qkv` buffer.
//!
//! `qkv: [b*t, 3c]` holds q | k | v, head `h` in columns `h*hs..(h+1)*hs` of
//! each third (the GPT-2 layout, so export needs no reshuffling). Per batch
//! row and head: S = q k^T / sqrt(hs), P = causal softmax(S), y = P v.
//! The probabilities P `[b, heads, t, t]` are kept for the backward.
//! Parallel over batch rows: each task owns whole rows of every buffer.

use super::fastmath::{dot, exp_in_place_sum, max};
use super::matmul::{gemm, Threads, View};
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
    /// Number of heads; `c % heads == 0`.
    pub heads: usize,
}

/// Forward: writes `out: [b*t, c]` and `probs: [b, heads, t, t]`.
pub fn forward(out: &mut [f32], probs: &mut [f32], qkv: &[f32], d: Dims) {
    let Dims { b, t, c, heads } = d;
    let hs = c / heads;
    let scale = 1.0 / (hs as f32).sqrt();
    out[..b * t * c]
        .par_chunks_mut(t * c)
        .zip(probs[..b * heads * t * t].par_chunks_mut(heads * t * t))
        .zip(qkv.par_chunks(t * 3 * c))
        .for_each(|((out, probs), qkv)| {
            for (h, p) in probs.chunks_exact_mut(t * t).enumerate() {
                let (q, k, v) = (&qkv[h * hs..], &qkv[c + h * hs..], &qkv[2 * c + h * hs..]);
                // S = q k^T (k^T is k read with swapped strides)
                gemm(p, t, View::strided(q, 3 * c, 1), View::strided(k, 1, 3 * c), t, t, hs, false, Threads::One);
                for (i, row) in p.chunks_exact_mut(t).enumerate() {
                    causal_softmax_row(row, i, scale);
                }
                gemm(
                    &mut out[h * hs..],
                    c,
                    View::rows(p, t),
                    View::strided(v, 3 * c, 1),
                    t,
                    hs,
                    t,
                    false,
                    Threads::One,
                );
            }
        });
}

/// Row `i` of a causal softmax: entries `0..=i` become softmax(scale * s),
/// entries after `i` (the future) become exactly 0.
fn causal_softmax_row(row: &mut [f32], i: usize, scale: f32) {
    let (past, future) = row.split_at_mut(i + 1);
    let m = max(past) * scale;
    let inv = 1.0 / exp_in_place_sum(past, scale, m);
    past.iter_mut().for_each(|x| *x *= inv);
    future.fill(0.0);
}

/// Backward: overwrites `dqkv: [b*t, 3c]` from `dout: [b*t, c]`, using the
/// saved `probs`; `scratch` has the size of `probs` and holds dP / dS.
pub fn backward(dqkv: &mut [f32], scratch: &mut [f32], dout: &[f32], qkv: &[f32], probs: &[f32], d: Dims) {
    let Dims { b, t, c, heads } = d;
    let hs = c / heads;
    let scale = 1.0 / (hs as f32).sqrt();
    dqkv[..b * t * 3 * c]
        .par_chunks_mut(t * 3 * c)
        .zip(scratch[..b * heads * t * t].par_chunks_mut(heads * t * t))
        .zip(dout.par_chunks(t * c))
        .zip(qkv.par_chunks(t * 3 * c))
        .zip(probs.par_chunks(heads * t * t))
        .for_each(|((((dqkv, scratch), dout), qkv), probs)| {
            for (h, (ds, p)) in scratch.chunks_exact_mut(t * t).zip(probs.chunks_exact(t * t)).enumerate() {
                let (q, k, v) = (&qkv[h * hs..], &qkv[c + h * hs..], &qkv[2 * c + h * hs..]);
                let dy = &dout[h * hs..];
                // dP = dy v^T ; dv = P^T dy
                gemm(ds, t, View::strided(dy, c, 1), View::strided(v, 1, 3 * c), t, t, hs, false, Threads::One);
                gemm(
                    &mut dqkv[2 * c + h * hs..],
                    3 * c,
                    View::transposed(p, t),
                    View::strided(dy, c, 1),
                    t,
                    hs,
                    t,
                    false,
                    Threads::One,
                );
                // dS = P * (dP - sum_j P dP) * scale (softmax backward; 0 in the future since P is)
                for (dsr, pr) in ds.chunks_exact_mut(t).zip(p.chunks_exact(t)) {
                    let d = dot(dsr, pr);
                    for (x, pv) in dsr.iter_mut().zip(pr) {
                        *x = pv * (*x - d) * scale;
                    }
                }
                // dq = dS k ; dk = dS^T q
                gemm(
                    &mut dqkv[h * hs..],
                    3 * c,
                    View::rows(ds, t),
                    View::strided(k, 3 * c, 1),
                    t,
                    hs,
                    t,
                    false,
                    Threads::One,
                );
                gemm(
                    &mut dqkv[c + h * hs..],
                    3 * c,
                    View::transposed(ds, t),
                    View::strided(q, 3 * c, 1),
                    t,
                    hs,
                    t,
                    false,
                    Threads::One,
                );
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
        forward(&mut y, &mut p, &qkv, Dims { b: 1, t: 2, c: 1, heads: 1 });
        assert_eq!(p[1], 0.0, "no attention to the future");
        assert!((y[0] - 10.0).abs() < 1e-5 && (y[1] - 17.5).abs() < 1e-5, "{y:?}");
    }

    #[test]
    fn attention_backward_matches_finite_differences() {
        let d = Dims { b: 2, t: 5, c: 6, heads: 2 };
        let qkv = probe(d.b * d.t * 3 * d.c, 1.7);
        let n_probs = d.b * d.heads * d.t * d.t;
        check_op(
            &[qkv],
            |ins| {
                let (mut y, mut p) = (vec![0.0; d.b * d.t * d.c], vec![0.0; n_probs]);
                forward(&mut y, &mut p, &ins[0], d);
                (y, p)
            },
            |ins, dy, p| {
                let (mut dqkv, mut scratch) = (vec![0.0; ins[0].len()], vec![0.0; n_probs]);
                backward(&mut dqkv, &mut scratch, dy, &ins[0], p, d);
                vec![dqkv]
            },
        );
    }
}

//! GELU with the exact (erf) form: gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
//!
//! The erf form is what Hugging Face calls `"gelu"`, so an exported model
//! states the function it was trained with. The tanh form costs the same
//! with our vectorised `exp`; erf is chosen for that exactness.

use super::fastmath::{erf_with_exp, exp};
use super::simd::multiversion;
use rayon::prelude::*;

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1 / sqrt(2 pi)
const INV_SQRT_2PI: f32 = 0.398_942_3;
/// Elements per parallel task.
const CHUNK: usize = 1 << 14;

/// Values per parallel task of a row-wise pass over rows of `cols` values:
/// whole rows, about [`CHUNK`] values (gelu's bias pass, `matmul::add_bias`).
pub(crate) fn row_task(cols: usize) -> usize {
    cols * (CHUNK / cols).max(1)
}

/// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    let u = x * FRAC_1_SQRT_2;
    0.5 * x * (1.0 + erf_with_exp(u, exp(-u * u)))
}

/// `out = gelu(inp)`.
pub fn forward(out: &mut [f32], inp: &[f32]) {
    out[..inp.len()].par_chunks_mut(CHUNK).zip(inp.par_chunks(CHUNK)).for_each(|(out, inp)| forward_chunk(out, inp));
}

multiversion! {
    fn forward_chunk(out: &mut [f32], inp: &[f32]) {
        for (y, &x) in out.iter_mut().zip(inp) {
            *y = gelu(x);
        }
    }
}

/// The fc layer's epilogue: `pre += bias` (row-wise; `pre` is `[rows,
/// bias.len()]` and is kept for the backward), then `out = gelu(pre)`, in
/// one pass. The product leaves the bias to this pass instead of writing it
/// over its whole output first (docs/decisions.md, issue 13).
pub fn forward_with_bias(out: &mut [f32], pre: &mut [f32], bias: &[f32]) {
    let task = row_task(bias.len());
    out[..pre.len()]
        .par_chunks_mut(task)
        .zip(pre.par_chunks_mut(task))
        .for_each(|(out, pre)| bias_chunk(out, pre, bias));
}

multiversion! {
    fn bias_chunk(out: &mut [f32], pre: &mut [f32], bias: &[f32]) {
        for (out, pre) in out.chunks_exact_mut(bias.len()).zip(pre.chunks_exact_mut(bias.len())) {
            for ((y, h), b) in out.iter_mut().zip(pre.iter_mut()).zip(bias) {
                *h += b;
                *y = gelu(*h);
            }
        }
    }
}

/// `dinp = dout * gelu'(inp)`, with gelu'(x) = Phi(x) + x phi(x). Overwrites.
pub fn backward(dinp: &mut [f32], inp: &[f32], dout: &[f32]) {
    dinp[..inp.len()]
        .par_chunks_mut(CHUNK)
        .zip(inp.par_chunks(CHUNK))
        .zip(dout.par_chunks(CHUNK))
        .for_each(|((dx, x), dy)| backward_chunk(dx, x, dy));
}

multiversion! {
    fn backward_chunk(dx: &mut [f32], x: &[f32], dy: &[f32]) {
        for ((dx, &x), &dy) in dx.iter_mut().zip(x).zip(dy) {
            let u = x * FRAC_1_SQRT_2;
            // One exponential serves both erf(u) and the density phi(x).
            let e = exp(-u * u);
            let cdf = 0.5 * (1.0 + erf_with_exp(u, e));
            *dx = dy * (cdf + x * INV_SQRT_2PI * e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn gelu_forward_by_hand() {
        // gelu(1) = 0.5 * (1 + erf(0.70710678)) = 0.8413447; gelu(-1) = -0.1586553
        let mut y = [0.0; 3];
        forward(&mut y, &[0.0, 1.0, -1.0]);
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 0.841_344_7).abs() < 1e-6);
        assert!((y[2] + 0.158_655_3).abs() < 1e-6);
    }

    #[test]
    fn bias_then_gelu_by_hand() {
        // rows [0, 2] and [-2, 0] plus bias [1, -1]: pre = [1, 1, -1, -1], out = gelu(pre)
        let (mut pre, mut y) = ([0.0, 2.0, -2.0, 0.0], [0.0; 4]);
        forward_with_bias(&mut y, &mut pre, &[1.0, -1.0]);
        assert_eq!(pre, [1.0, 1.0, -1.0, -1.0]);
        for (y, want) in y.iter().zip([0.841_344_7, 0.841_344_7, -0.158_655_3, -0.158_655_3]) {
            assert!((y - want).abs() < 1e-6, "{y}");
        }
    }

    #[test]
    fn gelu_is_the_same_bits_on_both_copies() {
        // 100 values: six 16-lane vectors and a tail; bias rows of 10
        let x: Vec<f32> = probe(100, 0.9).iter().map(|v| v * 6.0).collect();
        let dy = probe(100, 0.3);
        let bias = probe(10, 0.5);
        let (mut y0, mut y1, mut h0, mut h1) = (vec![0.0; 100], vec![0.0; 100], x.clone(), x.clone());
        let (mut o0, mut o1, mut d0, mut d1) = (vec![0.0; 100], vec![0.0; 100], vec![0.0; 100], vec![0.0; 100]);
        forward_chunk::baseline(&mut y0, &x);
        bias_chunk::baseline(&mut o0, &mut h0, &bias);
        backward_chunk::baseline(&mut d0, &x, &dy);
        for (y, x) in y0.iter().zip(&x) {
            assert_eq!(y.to_bits(), gelu(*x).to_bits(), "the loop computes gelu as written");
        }
        if !super::super::simd::cpu_has_wide() {
            return;
        }
        // SAFETY: the CPU has AVX-512.
        unsafe {
            forward_chunk::wide(&mut y1, &x);
            bias_chunk::wide(&mut o1, &mut h1, &bias);
            backward_chunk::wide(&mut d1, &x, &dy);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y0), bits(&y1));
        assert_eq!((bits(&o0), bits(&h0)), (bits(&o1), bits(&h1)));
        assert_eq!(bits(&d0), bits(&d1));
    }

    #[test]
    fn gelu_backward_matches_finite_differences() {
        let x: Vec<f32> = probe(64, 1.3).iter().map(|v| v * 4.0).collect();
        check_op(
            &[x],
            |ins| {
                let mut y = vec![0.0; ins[0].len()];
                forward(&mut y, &ins[0]);
                (y, ())
            },
            |ins, dy, _| {
                let mut dx = vec![0.0; ins[0].len()];
                backward(&mut dx, &ins[0], dy);
                vec![dx]
            },
        );
    }
}

//! SwiGLU, the gated MLP activation of Llama: on `gu: [rows, 2f]` holding
//! the gate projection in the first `f` columns and the up projection in
//! the last `f` (one product with `gate_proj` and `up_proj` stacked),
//!
//!   h = silu(g) * u,   silu(g) = g * sigmoid(g).
//!
//! Backward: dg = dh * u * silu'(g), du = dh * silu(g), with
//! silu'(g) = s (1 + g (1 - s)) and s = sigmoid(g).

use super::gelu::row_task;
use rayon::prelude::*;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Forward: `out: [rows, f]` from `gu: [rows, 2f]`.
pub fn forward(out: &mut [f32], gu: &[f32], f: usize) {
    let rows = gu.len() / (2 * f);
    out[..rows * f].par_chunks_mut(row_task(f) / f * f).zip(gu.par_chunks(row_task(f) / f * 2 * f)).for_each(
        |(out, gu)| {
            for (h, gu) in out.chunks_exact_mut(f).zip(gu.chunks_exact(2 * f)) {
                let (g, u) = gu.split_at(f);
                for ((h, g), u) in h.iter_mut().zip(g).zip(u) {
                    *h = g * sigmoid(*g) * u;
                }
            }
        },
    );
}

/// Backward: overwrites `dgu: [rows, 2f]` from `dout: [rows, f]` and the
/// forward's input `gu`.
pub fn backward(dgu: &mut [f32], dout: &[f32], gu: &[f32], f: usize) {
    let rows = gu.len() / (2 * f);
    let task = row_task(f) / f;
    dgu[..rows * 2 * f]
        .par_chunks_mut(task * 2 * f)
        .zip(dout.par_chunks(task * f))
        .zip(gu.par_chunks(task * 2 * f))
        .for_each(|((dgu, dh), gu)| {
            for ((dgu, dh), gu) in dgu.chunks_exact_mut(2 * f).zip(dh.chunks_exact(f)).zip(gu.chunks_exact(2 * f)) {
                let (dg, du) = dgu.split_at_mut(f);
                let (g, u) = gu.split_at(f);
                for ((((dg, du), dh), g), u) in dg.iter_mut().zip(du).zip(dh).zip(g).zip(u) {
                    let s = sigmoid(*g);
                    *du = dh * g * s;
                    *dg = dh * u * s * (1.0 + g * (1.0 - s));
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn swiglu_by_hand() {
        // f = 2: g = [0, ln 3], u = [5, 4]. silu(0) = 0; sigmoid(ln 3) = 3/4,
        // silu(ln 3) = 0.75 ln 3 -> h = [0, 3 ln 3]
        let mut h = [9.0; 2];
        forward(&mut h, &[0.0, 3f32.ln(), 5.0, 4.0], 2);
        assert_eq!(h[0], 0.0);
        assert!((h[1] - 3.0 * 3f32.ln()).abs() < 1e-6, "{h:?}");
        // dg at g = 0: dh * u * 1/2 = 5/2; du at g = 0: 0
        let mut d = [0.0; 4];
        backward(&mut d, &[1.0, 0.0], &[0.0, 3f32.ln(), 5.0, 4.0], 2);
        assert_eq!((d[0], d[2]), (2.5, 0.0));
    }

    #[test]
    fn swiglu_backward_matches_finite_differences() {
        let (rows, f) = (3, 5);
        check_op(
            &[probe(rows * 2 * f, 2.3).iter().map(|v| 2.0 * v).collect()],
            |ins| {
                let mut h = vec![0.0; rows * f];
                forward(&mut h, &ins[0], f);
                (h, ())
            },
            |ins, dy, _| {
                let mut d = vec![f32::NAN; rows * 2 * f];
                backward(&mut d, dy, &ins[0], f);
                vec![d]
            },
        );
    }
}

//! Softmax cross-entropy over the vocabulary, fused with its backward.
//!
//! Per row: loss = logsumexp(z) - z[target]. With targets, the logits
//! buffer is overwritten in place by d(loss * scale)/dz = (softmax(z) -
//! onehot) * scale: the 2048 x 4096 logits of a micro step are never copied.

use super::fastmath::{exp_in_place_sum, max};
use rayon::prelude::*;

/// Rows per parallel task.
const ROWS_PER_TASK: usize = 8;

/// Per-row losses into `losses: [rows]`; `logits: [rows, v]` are left as they are.
pub fn forward(losses: &mut [f32], logits: &[f32], targets: &[u32], v: usize) {
    losses.par_iter_mut().zip(logits.par_chunks(v)).zip(targets.par_iter()).for_each(|((l, z), &t)| {
        *l = logsumexp(z) - z[t as usize];
    });
}

/// Per-row losses, and `logits` replaced by `(softmax - onehot) * scale`.
pub fn forward_backward(losses: &mut [f32], logits: &mut [f32], targets: &[u32], v: usize, scale: f32) {
    losses
        .par_chunks_mut(ROWS_PER_TASK)
        .zip(logits.par_chunks_mut(v * ROWS_PER_TASK))
        .zip(targets.par_chunks(ROWS_PER_TASK))
        .for_each(|((losses, z), targets)| {
            for ((l, z), &t) in losses.iter_mut().zip(z.chunks_exact_mut(v)).zip(targets) {
                let m = max(z);
                let z_t = z[t as usize];
                let sum = exp_in_place_sum(z, 1.0, m);
                *l = sum.ln() + m - z_t;
                let k = scale / sum;
                for x in z.iter_mut() {
                    *x *= k;
                }
                z[t as usize] -= scale;
            }
        });
}

fn logsumexp(z: &[f32]) -> f32 {
    let m = max(z);
    let mut buf = z.to_vec(); // evaluation only: one row, not the hot path
    exp_in_place_sum(&mut buf, 1.0, m).ln() + m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_entropy_by_hand() {
        // z = [0, ln 2, ln 3 ... ] -> softmax = [1, 2, 3]/6 ; target 2: loss = ln 6 - ln 3 = ln 2
        let mut z = vec![0.0, 2f32.ln(), 3f32.ln()];
        let mut l = [0.0];
        forward(&mut l, &z, &[2], 3);
        assert!((l[0] - 2f32.ln()).abs() < 1e-6);
        forward_backward(&mut l, &mut z, &[2], 3, 1.0);
        assert!((l[0] - 2f32.ln()).abs() < 1e-6);
        let want = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0 - 1.0];
        for (a, b) in z.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{z:?}");
        }
    }

    #[test]
    fn cross_entropy_gradient_matches_finite_differences() {
        let (rows, v) = (4, 9);
        let z0 = crate::model::ops::gradcheck::probe(rows * v, 2.1).iter().map(|x| x * 3.0).collect::<Vec<_>>();
        let t = [3u32, 0, 8, 5];
        let total = |z: &[f32]| {
            let mut l = vec![0.0; rows];
            forward(&mut l, z, &t, v);
            l.iter().map(|x| *x as f64).sum::<f64>()
        };
        let mut g = z0.clone();
        forward_backward(&mut vec![0.0; rows], &mut g, &t, v, 1.0);
        let eps = 1e-2;
        for i in 0..z0.len() {
            let (mut up, mut down) = (z0.clone(), z0.clone());
            up[i] += eps;
            down[i] -= eps;
            let fd = ((total(&up) - total(&down)) / (2.0 * eps as f64)) as f32;
            assert!((fd - g[i]).abs() < 2e-3, "logit {i}: {fd} vs {}", g[i]);
        }
    }
}

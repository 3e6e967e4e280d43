//! Gradient clipping by global L2 norm (PyTorch's `clip_grad_norm_`).

use rayon::prelude::*;

use super::CHUNK;

/// Lanes of [`sum_of_squares`]'s accumulator within a chunk.
const LANES: usize = 8;

/// The squares of `grads` summed in f64: per chunk of [`CHUNK`] elements
/// over [`LANES`] running sums (element i into lane i mod 8), lanes and
/// then chunk sums added in order, so the result does not depend on thread
/// timing. One running sum is a chain of dependent f64 adds, bound by the
/// add's latency, not by memory: `lowcomm bench --breakdown` prints both
/// over the model's gradients (on this shared 2-core VM, nano's 667k read
/// from memory, five runs: 0.57-0.73 ms with one sum, 0.17-0.38 ms with
/// eight, 1.9x-3.8x, median 3.3x), on every step of every clipping method.
pub fn sum_of_squares(grads: &[f32]) -> f64 {
    grads.par_chunks(CHUNK).map(chunk_sum_of_squares).collect::<Vec<f64>>().iter().sum()
}

fn chunk_sum_of_squares(c: &[f32]) -> f64 {
    let mut lanes = [0.0f64; LANES];
    let mut rows = c.chunks_exact(LANES);
    for row in &mut rows {
        for (acc, &g) in lanes.iter_mut().zip(row) {
            *acc += f64::from(g) * f64::from(g);
        }
    }
    let tail: f64 = rows.remainder().iter().map(|&g| f64::from(g) * f64::from(g)).sum();
    lanes.iter().sum::<f64>() + tail
}

/// L2 norm of `grads` (squares summed in f64, [`sum_of_squares`]).
pub fn global_norm(grads: &[f32]) -> f32 {
    sum_of_squares(grads).sqrt() as f32
}

/// Scales `grads` by `max_norm / (norm + 1e-6)` when their global norm
/// exceeds `max_norm`; returns the norm before clipping. A non-finite norm
/// is returned as is and nothing is scaled (the caller reports it).
pub fn clip_global_norm(grads: &mut [f32], max_norm: f32) -> f32 {
    let norm = global_norm(grads);
    if norm.is_finite() && norm > max_norm {
        let coef = (f64::from(max_norm) / (f64::from(norm) + 1e-6)) as f32;
        grads.par_chunks_mut(CHUNK).for_each(|c| c.iter_mut().for_each(|g| *g *= coef));
    }
    norm
}

/// Scales `g` by `max_norm / (norm + 1e-6)` where `norm = sq_total.sqrt()`
/// exceeds `max_norm` (PyTorch's rule), for gradients held in pieces whose
/// squares were summed across workers: FlexDeMo's node, the sharded
/// optimizers' world.
pub fn scale_to_norm(g: &mut [f32], sq_total: f32, max_norm: f32) {
    let norm = sq_total.sqrt();
    if norm.is_finite() && norm > max_norm {
        let k = max_norm / (norm + 1e-6);
        g.iter_mut().for_each(|x| *x *= k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |(3, 4, 0)| = sqrt(9 + 16) = 5.
    #[test]
    fn global_norm_of_three_four_zero_is_five() {
        assert_eq!(global_norm(&[3.0, 4.0, 0.0]), 5.0);
        assert_eq!(global_norm(&[]), 0.0);
    }

    /// max_norm 1: coef = 1 / (5 + 1e-6) = 0.19999996, so (3, 4, 0) becomes
    /// (0.59999988, 0.79999984, 0) and the returned norm is the pre-clip 5.
    #[test]
    fn clip_scales_to_max_norm_and_returns_pre_clip_norm() {
        let mut g = [3.0, 4.0, 0.0];
        assert_eq!(clip_global_norm(&mut g, 1.0), 5.0);
        let want = [3.0 / 5.000001, 4.0 / 5.000001, 0.0];
        for (a, b) in g.iter().zip(want) {
            assert!((f64::from(*a) - b).abs() < 1e-7, "{g:?}");
        }
        assert!(g[0] < 0.6 && g[1] < 0.8, "eps not applied: {g:?}");
    }

    #[test]
    fn clip_leaves_small_gradients_untouched() {
        let mut g = [3.0, 4.0, 0.0];
        assert_eq!(clip_global_norm(&mut g, 5.0), 5.0);
        assert_eq!(g, [3.0, 4.0, 0.0]);
    }

    #[test]
    fn non_finite_norm_is_returned_and_nothing_scaled() {
        let mut g = [3.0, f32::INFINITY, 1.0];
        assert_eq!(clip_global_norm(&mut g, 1.0), f32::INFINITY);
        assert_eq!(g, [3.0, f32::INFINITY, 1.0]);
        let mut n = [1.0, f32::NAN];
        assert!(clip_global_norm(&mut n, 0.5).is_nan());
        assert_eq!(n[0], 1.0);
    }

    /// Values whose squares overflow f32 still give the right norm thanks to
    /// the f64 accumulation: |(3e20, 4e20)| = 5e20. Across several chunks,
    /// n ones have norm sqrt(n).
    #[test]
    fn norm_accumulates_in_f64_across_chunks() {
        let big = global_norm(&[3e20, 4e20]);
        assert!(big.is_finite() && (f64::from(big) / 5e20 - 1.0).abs() < 1e-6, "{big}");
        let ones = vec![1.0f32; 3 * CHUNK + 7];
        assert_eq!(global_norm(&ones), ((3 * CHUNK + 7) as f64).sqrt() as f32);
    }

    /// Eight lanes and a tail: 1..=11 squared sum to 11 * 12 * 23 / 6 = 506
    /// (lanes 1..8, tail 9, 10, 11), exact in f64; a chunk boundary inside
    /// the input changes nothing for integers.
    #[test]
    fn sum_of_squares_over_lanes_and_tail_by_hand() {
        let g: Vec<f32> = (1..=11).map(|i| i as f32).collect();
        assert_eq!(sum_of_squares(&g), 506.0);
        let twos = vec![2.0f32; CHUNK + 3];
        assert_eq!(sum_of_squares(&twos), 4.0 * (CHUNK + 3) as f64);
    }
}

//! Gradient clipping by global L2 norm (PyTorch's `clip_grad_norm_`).

use rayon::prelude::*;

use super::CHUNK;

/// L2 norm of `grads`: squares summed in f64 per chunk of [`CHUNK`]
/// elements, chunk sums added in order, so the result does not depend on
/// thread timing.
pub fn global_norm(grads: &[f32]) -> f32 {
    let partial: Vec<f64> =
        grads.par_chunks(CHUNK).map(|c| c.iter().map(|&g| f64::from(g) * f64::from(g)).sum::<f64>()).collect();
    partial.iter().sum::<f64>().sqrt() as f32
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
}

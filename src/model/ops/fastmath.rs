//! Branch-free `exp` and `erf` for f32 that the compiler can vectorise.
//!
//! The scalar libm calls were ~40% of a candle training step on this machine
//! (shared/bench/RESULTS.md): one call per element defeats SIMD. These are
//! plain arithmetic on `f32` so loops over slices compile to AVX2 code.
//! Accuracy: `exp` within ~2 ulp on [-87, 88]; `erf` within 2e-7 absolute.

/// e^x for x in [-87.3, 88.3]; inputs outside are clamped (finite results).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split into a part exact in f32 and a remainder (Cody-Waite), so
    // that x - n ln2 keeps its low bits.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5 * 2^23 rounds to an integer inside the float unit and leaves
    // that integer in the low mantissa bits: no float->int conversion, whose
    // saturating semantics would keep the loop from vectorising.
    const SHIFTER: f32 = 12_582_912.0;
    // Upper bound keeps n <= 127 (2^128 would overflow the exponent).
    #[allow(clippy::manual_clamp)] // max/min map NaN to a bound and vectorise; clamp would keep NaN
    let x = x.max(-87.3).min(88.3);
    let shifted = fma(x, LOG2E, SHIFTER);
    let n = shifted - SHIFTER;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, x));
    // Minimax polynomial for e^r on |r| <= ln2/2 (Cephes expf coefficients),
    // in fused multiply-adds: one instruction and one rounding per step.
    let mut p = 1.987_569_1e-4f32;
    p = fma(p, r, 1.398_199_9e-3);
    p = fma(p, r, 8.333_452e-3);
    p = fma(p, r, 4.166_579_6e-2);
    p = fma(p, r, 1.666_666_5e-1);
    #[allow(clippy::excessive_precision)] // Cephes' published coefficient, kept as printed
    {
        p = fma(p, r, 5.000_000_1e-1);
    }
    let er = fma(p * r, r, r + 1.0);
    // 2^n built directly in the exponent bits.
    let n_int = shifted.to_bits().wrapping_sub(SHIFTER.to_bits());
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    er * scale
}

/// `a * b + c` in one instruction and one rounding where the build has FMA
/// (x86-64-v3, `.cargo/config.toml`): a third fewer instructions in `exp`
/// and `erf`, GELU 30% faster (docs/decisions.md, issue 13). Without it, a
/// multiply and an add: `f32::mul_add` there is a libm call per element,
/// which would also keep the loops from vectorising.
#[inline(always)]
fn fma(a: f32, b: f32, c: f32) -> f32 {
    if cfg!(target_feature = "fma") {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// Lanes of the accumulators below: wide enough for AVX2 (and to hide add
/// latency), fixed so results do not depend on the CPU.
const LANES: usize = 16;

/// Sum of a slice, in a fixed order of 16 interleaved partial sums. A plain
/// `iter().sum()` is one serial chain the compiler may not reorder (float
/// addition is not associative), so it runs ~8x slower.
#[inline(always)] // into the AVX-512 copies of `ops::simd` too
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + tail.iter().sum::<f32>()
}

/// Dot product, same fixed lane order as [`sum`].
#[inline(always)] // into the AVX-512 copies of `ops::simd` too
pub fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let tail: f32 = xc.remainder().iter().zip(yc.remainder()).map(|(a, b)| a * b).sum();
    for (cx, cy) in xc.zip(yc) {
        for ((a, u), v) in acc.iter_mut().zip(cx).zip(cy) {
            *a += u * v;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Maximum of a slice (NEG_INFINITY when empty).
#[inline(always)] // into the AVX-512 copies of `ops::simd` too
pub fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a = a.max(*v);
        }
    }
    acc.iter().chain(tail).fold(f32::NEG_INFINITY, |m, v| m.max(*v))
}

/// `x[i] = exp(x[i] * scale - shift)` in place; returns the sum of the results.
#[inline(always)] // into the AVX-512 copies of `ops::simd` too
pub fn exp_in_place_sum(x: &mut [f32], scale: f32, shift: f32) -> f32 {
    for v in x.iter_mut() {
        *v = exp(*v * scale - shift);
    }
    sum(x)
}

/// erf(x) via Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7), given
/// `e = exp(-x*x)` so that GELU's backward can share that exponential.
#[inline(always)]
pub fn erf_with_exp(x: f32, e: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / fma(0.327_591_1, a, 1.0);
    let mut poly = fma(1.061_405_4, t, -1.453_152_1);
    poly = fma(poly, t, 1.421_413_7);
    poly = fma(poly, t, -0.284_496_74);
    poly = fma(poly, t, 0.254_829_6) * t;
    let y = fma(-poly, e, 1.0);
    y.copysign(x)
}

/// erf(x).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_with_exp(x, exp(-x * x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_to_a_few_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.3 {
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.013;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1000.0) < 1e-37 && exp(-1000.0) >= 0.0);
        assert!(exp(1000.0).is_finite());
    }

    #[test]
    fn lane_reductions_match_plain_loops() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.7).sin()).collect();
        let y: Vec<f32> = (0..37).map(|i| (i as f32 * 0.3).cos()).collect();
        let plain_sum: f64 = x.iter().map(|v| *v as f64).sum();
        let plain_dot: f64 = x.iter().zip(&y).map(|(a, b)| (*a as f64) * (*b as f64)).sum();
        assert!((sum(&x) as f64 - plain_sum).abs() < 1e-5);
        assert!((dot(&x, &y) as f64 - plain_dot).abs() < 1e-5);
        assert_eq!(max(&x), x.iter().cloned().fold(f32::MIN, f32::max));
        assert_eq!(sum(&[1.0, 2.0, 3.0]), 6.0);
    }

    #[test]
    fn erf_matches_reference_values() {
        // erf(0.5) = 0.5204998778, erf(1) = 0.8427007929, erf(2) = 0.9953222650
        for (x, want) in [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (2.0, 0.995_322_3), (-1.0, -0.842_700_8)]
        {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {} want {want}", erf(x));
        }
        assert!((erf(10.0) - 1.0).abs() < 1e-7);
    }
}

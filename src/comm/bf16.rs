//! bfloat16 conversion: the top 16 bits of an IEEE f32 (1 sign, 8 exponent,
//! 7 mantissa bits), rounded to nearest, ties to even. Values that round
//! past the largest finite bf16 become infinity, as IEEE rounding requires.

/// The bf16 bit pattern nearest to `x` (ties to even; NaN stays a quiet NaN).
#[inline]
pub fn to_bf16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        // Truncating could clear every mantissa bit and turn NaN into inf:
        // force the quiet bit instead, keeping the sign.
        return ((bits >> 16) as u16) | 0x0040;
    }
    // Adding 0x7fff rounds up iff the dropped half is > 0x8000; the lsb of
    // the kept half breaks the exact tie towards even.
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// The f32 holding the bf16 value `b` exactly.
#[inline]
pub fn from_bf16_bits(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// `x` rounded to the nearest bf16 value, returned as f32.
#[inline]
pub fn round_bf16(x: f32) -> f32 {
    from_bf16_bits(to_bf16_bits(x))
}

/// Rounds every element of `buf` to bf16 in place.
pub fn round_slice_bf16(buf: &mut [f32]) {
    for x in buf {
        *x = round_bf16(*x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_one_is_exact() {
        assert_eq!(to_bf16_bits(1.0), 0x3f80);
        assert_eq!(round_bf16(1.0), 1.0);
        assert_eq!(round_bf16(-2.5), -2.5);
    }

    #[test]
    fn bf16_ties_round_to_even() {
        // bf16 keeps 7 mantissa bits: spacing 2^-7 just above 1.
        // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd): -> 1.
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8)), 1.0);
        // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
        assert_eq!(round_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        // Just above the tie rounds up.
        assert_eq!(round_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 1.0 + 2f32.powi(-7));
    }

    #[test]
    fn bf16_nan_inf_zero_keep_their_kind() {
        assert!(round_bf16(f32::NAN).is_nan());
        // A NaN whose payload sits only in the dropped bits must stay NaN.
        assert!(round_bf16(f32::from_bits(0x7f80_0001)).is_nan());
        assert!(round_bf16(f32::from_bits(0xff80_0001)).is_nan());
        assert_eq!(round_bf16(f32::INFINITY), f32::INFINITY);
        assert_eq!(round_bf16(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn bf16_max_finite_and_overflow() {
        let max = from_bf16_bits(0x7f7f); // (2 - 2^-7) * 2^127
        assert_eq!(max, (2.0 - 2f32.powi(-7)) * 2f32.powi(127));
        assert_eq!(round_bf16(max), max);
        assert_eq!(round_bf16(-max), -max);
        // f32::MAX is past the halfway point to 2^128: rounds to infinity.
        assert_eq!(round_bf16(f32::MAX), f32::INFINITY);
    }

    #[test]
    fn bf16_relative_error_within_half_ulp() {
        // Unit roundoff of an 8-bit significand: 2^-8.
        for i in 1..10_000u32 {
            let x = i as f32 * 0.7311 - 3000.0;
            let r = round_bf16(x);
            assert!((r - x).abs() <= x.abs() * 2f32.powi(-8), "{x} -> {r}");
        }
    }
}

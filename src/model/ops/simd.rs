//! Element-wise loops compiled twice: for the build's baseline (AVX2 + FMA,
//! `.cargo/config.toml`) and for AVX-512, the copy chosen at run time.
//!
//! GEMM runs AVX-512 wherever it can, but the compiler vectorises our own
//! loops for the baseline only, so on an AVX-512 CPU GELU and softmax (the
//! polynomials of `exp` and `erf`: arithmetic, not memory, bound) ran 8
//! lanes at a time with their constants spilled out of AVX2's 16 registers.
//! Their AVX-512 copies run 16 lanes with 32 registers: GELU's forward 1.85
//! → 1.04 ms at `small`'s shape (docs/decisions.md, issue 13).
//!
//! The bits are the same on either copy: every element goes through the
//! same operations, and the reductions keep their 16 fixed lanes
//! (`fastmath::sum`). The AVX-512 copy runs where GEMM runs AVX-512
//! (`isa::Levels::kernels`): not in a `--no-default-features` build, so that
//! build stays the whole AVX2 path.

use crate::model::isa::{self, Isa};
use std::sync::OnceLock;

/// Whether the AVX-512 copies run (checked once per process).
pub fn wide() -> bool {
    static WIDE: OnceLock<bool> = OnceLock::new();
    *WIDE.get_or_init(|| isa::active().is_ok_and(|l| l.kernels == Isa::Avx512))
}

/// `fn name(args) -> ret { body }`, with the body compiled for the baseline
/// and for AVX-512 and the copy picked by [`wide`] at each call (one load of
/// a cached flag: call it per chunk or per row, not per element). The two
/// copies are `name::baseline` and `name::wide` (a module of the function's
/// name), so tests can hold one against the other.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if $crate::model::ops::simd::wide() {
                // SAFETY: `wide()` holds only on a CPU with AVX-512 F/BW/DQ/VL
                // (`isa::cpu`), which have FMA.
                return unsafe { $name::wide($($arg),*) };
            }
            $name::baseline($($arg),*)
        }

        #[allow(clippy::too_many_arguments)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[inline(always)]
            pub(super) fn baseline($($arg: $ty),*) $(-> $ret)? $body

            /// # Safety
            /// The CPU must have AVX-512 F/BW/DQ/VL.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma")]
            pub(super) unsafe fn wide($($arg: $ty),*) $(-> $ret)? {
                baseline($($arg),*)
            }
        }
    };
}
pub(crate) use multiversion;

/// Whether this CPU can run the AVX-512 copies (whatever [`wide`] picks for
/// the run): where it can, tests hold them against the baseline, bit for bit.
#[cfg(test)]
pub(crate) fn cpu_has_wide() -> bool {
    isa::cpu() == Isa::Avx512
}

#[cfg(test)]
mod tests {
    use super::*;

    multiversion! {
        fn squares_plus_one(out: &mut [f32], x: &[f32]) -> f32 {
            for (y, x) in out.iter_mut().zip(x) {
                *y = x * x + 1.0;
            }
            crate::model::ops::fastmath::sum(out)
        }
    }

    #[test]
    fn a_multiversioned_loop_gives_what_its_body_says_on_both_copies() {
        // [0, 1, 2] -> [1, 2, 5], sum 8
        let mut y = [0.0; 3];
        assert_eq!(squares_plus_one(&mut y, &[0.0, 1.0, 2.0]), 8.0);
        assert_eq!(y, [1.0, 2.0, 5.0]);
        assert_eq!(squares_plus_one::baseline(&mut y, &[0.0, 1.0, 2.0]), 8.0);
        if cpu_has_wide() {
            // SAFETY: the CPU has AVX-512.
            assert_eq!(unsafe { squares_plus_one::wide(&mut y, &[0.0, 1.0, 2.0]) }, 8.0);
            assert_eq!(y, [1.0, 2.0, 5.0]);
        }
        assert_eq!(wide(), isa::active().unwrap().kernels == Isa::Avx512);
    }
}

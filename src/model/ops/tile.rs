//! Register-tiled products for attention's small blocks, without packing.
//!
//! Attention multiplies, per head and query block, 32 rows against at most t
//! keys, 64 deep (`small`). gemm copies ("packs") its operands into panels
//! before every product, and that copy plus the call's set-up was about a
//! fifth of attention's time (`perf`, docs/decisions.md). Every right-hand
//! operand attention multiplies by already has contiguous rows (k^T and v^T
//! from their per-head copies; the rows of q, k, v and dy), so these kernels
//! load those rows as vectors where they lie and read the left-hand operand
//! one value at a time, broadcast: no packing, no per-call set-up. Written by
//! hand (`std::arch`) because the compiler does not keep a tile of
//! accumulators in registers from plain loops; `examples/bench_attention.rs`
//! measures what it buys.
//!
//! The vector path follows GEMM's (`isa::gemm_path`): AVX-512 where gemm
//! runs AVX-512, AVX2 + FMA where it runs AVX2, plain loops otherwise, so a
//! `--no-default-features` build times the AVX2 path end to end.

use super::matmul::View;
use crate::model::isa::{self, Isa};
use std::sync::OnceLock;

/// `c[m, n] = a[m, k] b[k, n]` (or `+=` when `accumulate`). `c` is row-major
/// with leading dimension `ldc`, `b` row-major with leading dimension `ldb`;
/// `a` is any strided view (read value by value, so a transposed view costs
/// nothing extra).
///
/// # Panics
/// If `c` or `b` is too short for its extent. `a` must cover `m x k`, as for
/// [`super::matmul::gemm`].
#[allow(clippy::too_many_arguments)]
pub fn product(
    c: &mut [f32],
    ldc: usize,
    a: View,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
) {
    product_on(path(), c, ldc, a, b, ldb, m, n, k, accumulate)
}

/// The path [`product`] takes on this CPU and build (checked once).
pub fn path() -> Isa {
    static PATH: OnceLock<Isa> = OnceLock::new();
    *PATH.get_or_init(|| isa::gemm_path(isa::cpu()))
}

/// [`product`] on a given path; `isa` must not exceed the CPU's level.
#[allow(clippy::too_many_arguments)]
fn product_on(
    isa: Isa,
    c: &mut [f32],
    ldc: usize,
    a: View,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= (m - 1) * ldc + n, "tile product: output too small");
    assert!(k == 0 || b.len() >= (k - 1) * ldb + n, "tile product: right operand too small");
    debug_assert!(isa <= isa::cpu(), "tile product: {} path on a {} CPU", isa.label(), isa::cpu().label());
    let s = Shape { ldc, ldb, m, k, accumulate };
    let (c, b) = (c.as_mut_ptr(), b.as_ptr());
    // SAFETY: `c` and `b` cover their extents (asserted above), `a` covers
    // its own (the caller's contract); the CPU has `isa` ([`path`] and the
    // tests only pass levels up to `isa::cpu()`).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::product(c, a, b, n, s),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::product(c, a, b, n, s),
            _ => plain(c, a, b, 0..n, s),
        }
    }
}

/// The extents every tile of one product shares.
#[derive(Clone, Copy)]
struct Shape {
    ldc: usize,
    ldb: usize,
    m: usize,
    k: usize,
    accumulate: bool,
}

/// Columns `cols` of the product in plain loops: the whole product on a CPU
/// without AVX2, and the last `n % width` columns of the vector paths.
unsafe fn plain(c: *mut f32, a: View, b: *const f32, cols: std::ops::Range<usize>, s: Shape) {
    for i in 0..s.m {
        for j in cols.clone() {
            let mut sum = 0.0f32;
            for p in 0..s.k {
                sum += *a.at(i, p) * *b.add(p * s.ldb + j);
            }
            let out = c.add(i * s.ldc + j);
            *out = if s.accumulate { *out + sum } else { sum };
        }
    }
}

/// One vector path: `$mr` rows by `$nv` vectors of `$w` lanes per tile. The
/// row tile reads `$nv` vectors of `b` per step of `k` and broadcasts `$mr`
/// values of `a` into them, `$mr * $nv` FMAs. The last rows take tiles of 2
/// and 1, the last columns one-vector tiles, then [`plain`].
macro_rules! vector_path {
    ($name:ident, $feature:literal, $vec:ty, $w:literal, $mr:literal, $nv:literal,
     zero: $zero:ident, load: $load:ident, store: $store:ident, splat: $splat:ident,
     fma: $fma:ident, add: $add:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $name {
            use super::{plain, Shape, View};
            use std::arch::x86_64::*;

            #[target_feature(enable = $feature)]
            pub(super) unsafe fn product(c: *mut f32, a: View, b: *const f32, n: usize, s: Shape) {
                let mut j = 0;
                while j + $nv * $w <= n {
                    rows::<$nv>(c, a, b, j, s);
                    j += $nv * $w;
                }
                while j + $w <= n {
                    rows::<1>(c, a, b, j, s);
                    j += $w;
                }
                plain(c, a, b, j..n, s);
            }

            #[target_feature(enable = $feature)]
            unsafe fn rows<const NV: usize>(c: *mut f32, a: View, b: *const f32, j: usize, s: Shape) {
                let mut i = 0;
                while i + $mr <= s.m {
                    tile::<$mr, NV>(c, a, b, i, j, s);
                    i += $mr;
                }
                while i + 2 <= s.m {
                    tile::<2, NV>(c, a, b, i, j, s);
                    i += 2;
                }
                if i < s.m {
                    tile::<1, NV>(c, a, b, i, j, s);
                }
            }

            /// Rows `i..i + MR`, columns `j..j + NV * width` of `c`, summed
            /// over `k` in order with one FMA per term.
            #[target_feature(enable = $feature)]
            #[inline]
            unsafe fn tile<const MR: usize, const NV: usize>(
                c: *mut f32,
                a: View,
                b: *const f32,
                i: usize,
                j: usize,
                s: Shape,
            ) {
                let mut sum: [[$vec; NV]; MR] = [[$zero(); NV]; MR];
                for p in 0..s.k {
                    let brow = b.add(p * s.ldb + j);
                    let mut bv: [$vec; NV] = [$zero(); NV];
                    for (v, x) in bv.iter_mut().enumerate() {
                        *x = $load(brow.add(v * $w));
                    }
                    for (r, acc) in sum.iter_mut().enumerate() {
                        let x = $splat(*a.at(i + r, p));
                        for (acc, bv) in acc.iter_mut().zip(&bv) {
                            *acc = $fma(x, *bv, *acc);
                        }
                    }
                }
                for (r, acc) in sum.iter().enumerate() {
                    let crow = c.add((i + r) * s.ldc + j);
                    for (v, acc) in acc.iter().enumerate() {
                        let out = crow.add(v * $w);
                        let x = if s.accumulate { $add(*acc, $load(out)) } else { *acc };
                        $store(out, x);
                    }
                }
            }
        }
    };
}

vector_path!(avx512, "avx512f", __m512, 16, 4, 4,
    zero: _mm512_setzero_ps, load: _mm512_loadu_ps, store: _mm512_storeu_ps, splat: _mm512_set1_ps,
    fma: _mm512_fmadd_ps, add: _mm512_add_ps);
vector_path!(avx2, "avx2,fma", __m256, 8, 6, 2,
    zero: _mm256_setzero_ps, load: _mm256_loadu_ps, store: _mm256_storeu_ps, splat: _mm256_set1_ps,
    fma: _mm256_fmadd_ps, add: _mm256_add_ps);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path this CPU has, against a plain triple loop in f64.
    fn check(m: usize, n: usize, k: usize, transposed_a: bool, accumulate: bool) {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.25).collect();
        let ldb = n + 3; // rows of b not contiguous with each other
        let b: Vec<f32> = (0..k * ldb).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.5).collect();
        let ldc = n + 1;
        let c0: Vec<f32> = (0..m * ldc).map(|i| (i % 3) as f32).collect();
        // a[i, p] from a row-major m x k, or from a row-major k x m read transposed
        let (view, a_at): (View, Box<dyn Fn(usize, usize) -> f32>) = if transposed_a {
            (View::transposed(&a, m), Box::new(|i, p| a[p * m + i]))
        } else {
            (View::rows(&a, k), Box::new(|i, p| a[i * k + p]))
        };
        for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= isa::cpu()) {
            let mut c = c0.clone();
            product_on(isa, &mut c, ldc, view, &b, ldb, m, n, k, accumulate);
            for i in 0..m {
                for j in 0..ldc {
                    let got = c[i * ldc + j];
                    let old = c0[i * ldc + j];
                    let want = if j < n {
                        let sum: f64 = (0..k).map(|p| a_at(i, p) as f64 * b[p * ldb + j] as f64).sum();
                        sum + if accumulate { old as f64 } else { 0.0 }
                    } else {
                        old as f64 // past column n: untouched
                    };
                    assert!((got as f64 - want).abs() < 1e-4, "{isa:?} {m}x{n}x{k} at ({i}, {j}): {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn tile_product_by_hand() {
        // [1 2] [5 6]   [19 22]
        // [3 4] [7 8] = [43 50], then += gives twice that.
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let mut c = [0.0; 4];
        product(&mut c, 2, View::rows(&a, 2), &b, 2, 2, 2, 2, false);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        product(&mut c, 2, View::rows(&a, 2), &b, 2, 2, 2, 2, true);
        assert_eq!(c, [38.0, 44.0, 86.0, 100.0]);
    }

    #[test]
    fn tile_product_matches_a_plain_loop_on_every_path() {
        // Full tiles of both vector paths (4 or 6 rows, 64 or 16 columns),
        // the 2- and 1-row tiles, one-vector column tiles, and a plain tail.
        for (m, n, k) in [(32, 64, 64), (13, 83, 9), (7, 16, 1), (1, 5, 3), (24, 200, 32)] {
            for transposed_a in [false, true] {
                for accumulate in [false, true] {
                    check(m, n, k, transposed_a, accumulate);
                }
            }
        }
    }

    #[test]
    fn tile_product_over_nothing_is_zero_or_leaves_c() {
        // k = 0: the empty sum, so c = 0, or c unchanged when accumulating.
        check(5, 40, 0, false, false);
        check(5, 40, 0, false, true);
    }
}

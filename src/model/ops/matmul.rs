//! Matrix products of the linear layers, forward and backward.
//!
//! Layouts follow PyTorch's `nn.Linear`: activations are row-major `[n, c]`,
//! a weight is row-major `[oc, c]`, and `y = x W^T + b`. The products go to
//! the `gemm` crate (AVX-512/AVX2 kernels chosen at run time, threads from
//! rayon's pool); transposes are expressed as strides, never materialised.

use gemm::Parallelism;
use rayon::prelude::*;

/// A read-only strided view handed to GEMM: element (i, j) lives at
/// `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub struct View {
    ptr: *const f32,
    rs: isize,
    cs: isize,
}

impl View {
    /// Row-major matrix with `cols` columns (leading dimension `ld`).
    pub fn rows(data: &[f32], ld: usize) -> View {
        View { ptr: data.as_ptr(), rs: ld as isize, cs: 1 }
    }
    /// The transpose of a row-major matrix with leading dimension `ld`.
    pub fn transposed(data: &[f32], ld: usize) -> View {
        View { ptr: data.as_ptr(), rs: 1, cs: ld as isize }
    }
    /// Any strides, starting at `data[0]` (e.g. one head's columns of `qkv`).
    pub fn strided(data: &[f32], rs: usize, cs: usize) -> View {
        View { ptr: data.as_ptr(), rs: rs as isize, cs: cs as isize }
    }
}

/// How many threads one product may use.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Threads {
    /// Only the calling thread (used inside already-parallel loops).
    One,
    /// rayon's global pool.
    Pool,
}

/// `out[m, n] = a[m, k] * b[k, n]` (or `+=` when `accumulate`), where `out`
/// is row-major with leading dimension `ld_out`.
///
/// # Panics
/// If `out` is too short for `m` rows of leading dimension `ld_out`. The
/// views `a` and `b` must cover their `m x k` / `k x n` extents; every caller
/// in this crate builds them from slices sized by the model's shapes, which the
/// debug assertions of those callers check.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    out: &mut [f32],
    ld_out: usize,
    a: View,
    b: View,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
    threads: Threads,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(out.len() >= (m - 1) * ld_out + n, "gemm output too small");
    let par = match threads {
        Threads::One => Parallelism::None,
        Threads::Pool => Parallelism::Rayon(0),
    };
    // SAFETY: `out` is exclusively borrowed and large enough (asserted above);
    // `a` and `b` were built from live slices that outlive this call.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            ld_out as isize,
            accumulate,
            a.ptr,
            a.cs,
            a.rs,
            b.ptr,
            b.cs,
            b.rs,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Linear layer forward: `out[n, oc] = inp[n, c] W^T + bias`, `W: [oc, c]`.
/// With `bias: None` the caller adds it in its next element-wise pass
/// (`gelu::forward_with_bias`, `residual::add_and_normalize`): writing it
/// over `out` ahead of the product cost a pass over `out` that the product
/// then read back (docs/decisions.md, issue 13).
pub fn linear_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    c: usize,
    oc: usize,
) {
    debug_assert_eq!(inp.len(), n * c);
    debug_assert_eq!(weight.len(), oc * c);
    let out = &mut out[..n * oc];
    gemm(out, oc, View::rows(inp, c), View::transposed(weight, c), n, oc, c, false, Threads::Pool);
    if let Some(b) = bias {
        add_bias(out, b);
    }
}

/// `out[i, j] += bias[j]` for every row of `out`.
pub fn add_bias(out: &mut [f32], bias: &[f32]) {
    out.par_chunks_mut(super::gelu::row_task(bias.len())).for_each(|out| {
        for row in out.chunks_exact_mut(bias.len()) {
            for (y, b) in row.iter_mut().zip(bias) {
                *y += b;
            }
        }
    });
}

/// Linear layer backward. Overwrites `dinp[n, c] = dout W`; accumulates
/// `dweight[oc, c] += dout^T inp` and `dbias[oc] += sum_rows(dout)` (gradients
/// accumulate across micro-batches until the optimizer step zeroes them).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    dinp: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    n: usize,
    c: usize,
    oc: usize,
) {
    debug_assert_eq!(dout.len(), n * oc);
    if let Some(dinp) = dinp {
        gemm(&mut dinp[..n * c], c, View::rows(dout, oc), View::rows(weight, c), n, c, oc, false, Threads::Pool);
    }
    gemm(dweight, c, View::transposed(dout, oc), View::rows(inp, c), oc, c, n, true, Threads::Pool);
    if let Some(db) = dbias {
        super::reduce::add_column_sums(db, dout, oc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn linear_backward_matches_finite_differences() {
        use crate::model::ops::gradcheck::{check_op, probe};
        let (n, c, oc) = (4, 5, 3);
        check_op(
            &[probe(n * c, 1.0), probe(oc * c, 2.0), probe(oc, 3.0)],
            |ins| {
                let mut out = vec![0.0; n * oc];
                linear_forward(&mut out, &ins[0], &ins[1], Some(&ins[2]), n, c, oc);
                (out, ())
            },
            |ins, dy, _| {
                let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; oc * c], vec![0.0; oc]);
                linear_backward(Some(&mut dx), &mut dw, Some(&mut db), dy, &ins[0], &ins[1], n, c, oc);
                vec![dx, dw, db]
            },
        );
    }

    #[test]
    fn gemm_matches_hand_computed_2x2() {
        // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let mut c = [0.0f32; 4];
        gemm(&mut c, 2, View::rows(&a, 2), View::rows(&b, 2), 2, 2, 2, false, Threads::Pool);
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        // accumulate adds the product again
        gemm(&mut c, 2, View::rows(&a, 2), View::rows(&b, 2), 2, 2, 2, true, Threads::One);
        assert_eq!(c, [38.0, 44.0, 86.0, 100.0]);
    }

    #[test]
    fn linear_forward_and_backward_match_naive() {
        let (n, c, oc) = (5, 3, 4);
        let inp: Vec<f32> = (0..n * c).map(|i| (i as f32 * 0.37).sin()).collect();
        let w: Vec<f32> = (0..oc * c).map(|i| (i as f32 * 0.11).cos()).collect();
        let b: Vec<f32> = (0..oc).map(|i| i as f32 * 0.5).collect();
        let mut out = vec![0.0; n * oc];
        linear_forward(&mut out, &inp, &w, Some(&b), n, c, oc);
        let wt: Vec<f32> = (0..c * oc).map(|i| w[(i % oc) * c + i / oc]).collect();
        let want = naive(&inp, &wt, n, oc, c);
        for i in 0..n * oc {
            assert!((out[i] - want[i] - b[i % oc]).abs() < 1e-5);
        }
        let dout: Vec<f32> = (0..n * oc).map(|i| (i as f32 * 0.23).sin()).collect();
        let (mut dinp, mut dw, mut db) = (vec![0.0; n * c], vec![1.0; oc * c], vec![1.0; oc]);
        linear_backward(Some(&mut dinp), &mut dw, Some(&mut db), &dout, &inp, &w, n, c, oc);
        let want_dinp = naive(&dout, &w, n, c, oc);
        let doutt: Vec<f32> = (0..oc * n).map(|i| dout[(i % n) * oc + i / n]).collect();
        let want_dw = naive(&doutt, &inp, oc, c, n);
        for i in 0..n * c {
            assert!((dinp[i] - want_dinp[i]).abs() < 1e-5);
        }
        for i in 0..oc * c {
            assert!((dw[i] - 1.0 - want_dw[i]).abs() < 1e-5, "dw accumulates");
        }
        for o in 0..oc {
            let s: f32 = (0..n).map(|r| dout[r * oc + o]).sum();
            assert!((db[o] - 1.0 - s).abs() < 1e-5);
        }
    }
}

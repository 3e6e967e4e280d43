//! Chunked orthonormal DCT-II, as DeMo uses it (shared/notes/demo.md,
//! step 3): a 2-D tensor of shape (R, C) is cut into blocks of (h, w), where
//! h is the largest divisor of R that is <= `chunk` (w likewise for C), and
//! each block is transformed along both axes; a 1-D tensor of length L is
//! cut into runs of the largest divisor of L that is <= `chunk` (a block of
//! 1 x w).
//!
//! ```text
//! D_n[k][j] = sqrt(2/n) * c_k * cos(pi * (2j + 1) * k / (2n)),   c_0 = 1/sqrt(2), c_k = 1 otherwise
//! forward:  Y = D_h  B  D_w^T      per block B (h x w)
//! inverse:  B = D_h^T Y  D_w       (D orthonormal: D^-1 = D^T)
//! ```
//!
//! Computed as small GEMMs against the precomputed bases (docs/decisions.md
//! says why and what it measured): over a piece of R x C with blocks h x w,
//! the row transform is one product `(R*C/w x w) * (w x w)` (every block
//! row segment is a row of w consecutive elements of the row-major
//! buffer), the column transform `R/h` products `(h x h) * (h x C)`. Pieces
//! run in parallel, each product on one thread, so the result does not
//! depend on the thread count (sim, threads and MPI give the same bits).
//!
//! Coefficients stay where their block's elements were: coefficient (r, c)
//! of block (by, bx) is element (by*h + r, bx*w + c) of the piece; the
//! chunk's flat index is `r * w + c`.

use crate::model::ops::matmul::{gemm, Threads, View};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The largest divisor of `n` that is at most `chunk` (at least 1).
pub fn chunk_len(n: usize, chunk: usize) -> usize {
    (1..=chunk.min(n).max(1)).rev().find(|d| n.is_multiple_of(*d)).unwrap_or(1)
}

/// The orthonormal DCT-II matrix of size `n`, row-major: `D[k * n + j]`.
pub fn basis(n: usize) -> Vec<f32> {
    let mut d = vec![0.0f32; n * n];
    for k in 0..n {
        let c = if k == 0 { (1.0 / n as f64).sqrt() } else { (2.0 / n as f64).sqrt() };
        for j in 0..n {
            let angle = std::f64::consts::PI * (2 * j + 1) as f64 * k as f64 / (2 * n) as f64;
            d[k * n + j] = (c * angle.cos()) as f32;
        }
    }
    d
}

/// A rows x cols row-major piece of a flat buffer at `offset`, cut into
/// blocks of h x w (the chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece starts in the buffer.
    pub offset: usize,
    /// Rows (for a 1-D tensor: its runs).
    pub rows: usize,
    /// Columns (for a 1-D tensor: the run length).
    pub cols: usize,
    /// Block height (1 for a 1-D tensor).
    pub h: usize,
    /// Block width.
    pub w: usize,
}

impl Piece {
    /// Elements in the piece.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the piece is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Coefficients per chunk.
    pub fn chunk_len(&self) -> usize {
        self.h * self.w
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        (self.rows / self.h) * (self.cols / self.w)
    }

    /// The buffer position of coefficient `i` (`r * w + c`) of chunk `b`
    /// (blocks numbered row by row).
    pub fn position(&self, b: usize, i: usize) -> usize {
        let per_row = self.cols / self.w;
        let (by, bx) = (b / per_row, b % per_row);
        let (r, c) = (i / self.w, i % self.w);
        self.offset + (by * self.h + r) * self.cols + bx * self.w + c
    }
}

/// The block shape DeMo uses for a tensor of `shape`: (h, w) for 2-D,
/// (1, run) for 1-D. Higher ranks are treated as 2-D (first axis x the rest).
pub fn block_shape(shape: &[usize], chunk: usize) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (1, chunk_len(*n, chunk)),
        [r, rest @ ..] => (chunk_len(*r, chunk), chunk_len(rest.iter().product(), chunk)),
    }
}

/// The transform of a list of pieces covering a buffer, with its bases.
#[derive(Clone, Debug)]
pub struct Dct {
    pieces: Vec<Piece>,
    bases: BTreeMap<usize, Arc<Vec<f32>>>,
    /// Elements covered (pieces are contiguous from 0).
    len: usize,
}

impl Dct {
    /// The transform of `pieces`, which must tile `0..len` in order.
    pub fn new(pieces: Vec<Piece>) -> Dct {
        let mut bases = BTreeMap::new();
        let mut at = 0;
        for p in &pieces {
            assert_eq!(p.offset, at, "DCT pieces must tile the buffer in order");
            assert!(
                p.rows % p.h == 0 && p.cols % p.w == 0,
                "block {}x{} does not tile {}x{}",
                p.h,
                p.w,
                p.rows,
                p.cols
            );
            at += p.len();
            for n in [p.h, p.w] {
                bases.entry(n).or_insert_with(|| Arc::new(basis(n)));
            }
        }
        Dct { pieces, bases, len: at }
    }

    /// The pieces, in buffer order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Elements covered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is covered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Floating-point operations of one transform (either direction).
    pub fn flops(&self) -> f64 {
        self.pieces.iter().map(|p| 2.0 * p.len() as f64 * (p.w + if p.h > 1 { p.h } else { 0 }) as f64).sum()
    }

    /// `y = DCT(x)` block by block; `scratch` is as long as `x`.
    pub fn forward(&self, x: &[f32], y: &mut [f32], scratch: &mut [f32]) {
        self.apply(x, y, scratch, false);
    }

    /// `x = DCT^-1(y)` block by block; `scratch` is as long as `y`.
    pub fn inverse(&self, y: &[f32], x: &mut [f32], scratch: &mut [f32]) {
        self.apply(y, x, scratch, true);
    }

    fn apply(&self, src: &[f32], dst: &mut [f32], scratch: &mut [f32], inverse: bool) {
        assert!(src.len() == self.len && dst.len() == self.len && scratch.len() == self.len, "DCT buffer lengths");
        // Split the buffers into the pieces' ranges, then transform them in parallel.
        let mut jobs = Vec::with_capacity(self.pieces.len());
        let (mut d, mut s) = (&mut dst[..], &mut scratch[..]);
        for p in &self.pieces {
            let (dp, dr) = d.split_at_mut(p.len());
            let (sp, sr) = s.split_at_mut(p.len());
            jobs.push((p, &src[p.offset..p.offset + p.len()], dp, sp));
            (d, s) = (dr, sr);
        }
        jobs.into_par_iter().for_each(|(p, x, y, z)| {
            let (dh, dw) = (&self.bases[&p.h], &self.bases[&p.w]);
            if inverse {
                transform_inverse(p, dh, dw, x, y, z);
            } else {
                transform_forward(p, dh, dw, x, y, z);
            }
        });
    }
}

/// Y = Bdiag(D_h) X Bdiag(D_w)^T over one piece.
fn transform_forward(p: &Piece, dh: &[f32], dw: &[f32], x: &[f32], y: &mut [f32], z: &mut [f32]) {
    let (h, w, c) = (p.h, p.w, p.cols);
    let segs = p.len() / w;
    if h == 1 {
        // Rows only: y_seg = x_seg D_w^T.
        gemm(y, w, View::rows(x, w), View::transposed(dw, w), segs, w, w, false, Threads::One);
        return;
    }
    gemm(z, w, View::rows(x, w), View::transposed(dw, w), segs, w, w, false, Threads::One);
    for (yb, zb) in y.chunks_exact_mut(h * c).zip(z.chunks_exact(h * c)) {
        gemm(yb, c, View::rows(dh, h), View::rows(zb, c), h, c, h, false, Threads::One);
    }
}

/// X = Bdiag(D_h)^T Y Bdiag(D_w) over one piece.
fn transform_inverse(p: &Piece, dh: &[f32], dw: &[f32], y: &[f32], x: &mut [f32], z: &mut [f32]) {
    let (h, w, c) = (p.h, p.w, p.cols);
    let segs = p.len() / w;
    if h == 1 {
        gemm(x, w, View::rows(y, w), View::rows(dw, w), segs, w, w, false, Threads::One);
        return;
    }
    for (zb, yb) in z.chunks_exact_mut(h * c).zip(y.chunks_exact(h * c)) {
        gemm(zb, c, View::transposed(dh, h), View::rows(yb, c), h, c, h, false, Threads::One);
    }
    gemm(x, w, View::rows(z, w), View::rows(dw, w), segs, w, w, false, Threads::One);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, O(n^2) per coefficient, in f64.
    fn naive_1d(x: &[f64]) -> Vec<f64> {
        let n = x.len();
        (0..n)
            .map(|k| {
                let c = if k == 0 { (1.0 / n as f64).sqrt() } else { (2.0 / n as f64).sqrt() };
                c * x
                    .iter()
                    .enumerate()
                    .map(|(j, v)| v * (std::f64::consts::PI * (2 * j + 1) as f64 * k as f64 / (2 * n) as f64).cos())
                    .sum::<f64>()
            })
            .collect()
    }

    /// 2-D definition: Y[k][l] = sum_ij c_k c_l X[i][j] cos(..i..k) cos(..j..l).
    fn naive_2d(x: &[f64], h: usize, w: usize) -> Vec<f64> {
        let rows: Vec<Vec<f64>> = x.chunks(w).map(naive_1d).collect();
        let mut y = vec![0.0; h * w];
        for l in 0..w {
            let col: Vec<f64> = (0..h).map(|i| rows[i][l]).collect();
            for (k, v) in naive_1d(&col).into_iter().enumerate() {
                y[k * w + l] = v;
            }
        }
        y
    }

    fn close(a: &[f32], b: &[f64], tol: f64) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (*x as f64 - y).abs() <= tol)
    }

    fn ramp(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect()
    }

    #[test]
    fn chunk_lengths_for_awkward_sizes() {
        assert_eq!(chunk_len(256, 64), 64);
        assert_eq!(chunk_len(768, 64), 64);
        assert_eq!(chunk_len(96, 64), 48);
        assert_eq!(chunk_len(37, 64), 37, "a prime below the chunk is one block");
        assert_eq!(chunk_len(67, 64), 1, "a prime above it leaves blocks of 1");
        assert_eq!(chunk_len(1, 64), 1);
        assert_eq!(block_shape(&[4096, 256], 64), (64, 64));
        assert_eq!(block_shape(&[128], 64), (1, 64), "a 1-D bias: runs of 64");
        assert_eq!(block_shape(&[100], 64), (1, 50));
        assert_eq!(block_shape(&[37, 16], 64), (37, 16));
    }

    #[test]
    fn basis_is_orthonormal_and_matches_the_definition_by_hand() {
        // n = 2: D = [[1/sqrt2, 1/sqrt2], [cos(pi/4), cos(3pi/4)]] = 1/sqrt2 [[1, 1], [1, -1]].
        let r = std::f32::consts::FRAC_1_SQRT_2;
        let d = basis(2);
        assert!(d.iter().zip([r, r, r, -r]).all(|(a, b)| (a - b).abs() < 1e-7), "{d:?}");
        for n in [1, 3, 8, 37] {
            let d = basis(n);
            for a in 0..n {
                for b in 0..n {
                    let dot: f32 = (0..n).map(|j| d[a * n + j] * d[b * n + j]).sum();
                    assert!((dot - f32::from(a == b)).abs() < 1e-5, "n={n} rows {a},{b}: {dot}");
                }
            }
        }
    }

    #[test]
    fn one_d_runs_equal_the_naive_definition_and_round_trip() {
        // A bias of 12 with chunk 4: three runs of 4, each its own DCT.
        let x = ramp(12);
        let dct = Dct::new(vec![Piece { offset: 0, rows: 3, cols: 4, h: 1, w: 4 }]);
        let (mut y, mut z, mut back) = (vec![0.0; 12], vec![0.0; 12], vec![0.0; 12]);
        dct.forward(&x, &mut y, &mut z);
        for r in 0..3 {
            let want = naive_1d(&x[4 * r..4 * r + 4].iter().map(|&v| v as f64).collect::<Vec<_>>());
            assert!(close(&y[4 * r..4 * r + 4], &want, 1e-5), "run {r}: {:?} vs {want:?}", &y[4 * r..4 * r + 4]);
        }
        dct.inverse(&y, &mut back, &mut z);
        assert!(close(&back, &x.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1e-5));
        // By hand: the DC coefficient of a run is sum / sqrt(n).
        let s: f32 = x[..4].iter().sum();
        assert!((y[0] - s / 2.0).abs() < 1e-6);
    }

    #[test]
    fn two_d_blocks_equal_the_naive_definition_and_round_trip() {
        // 6 x 10 with chunk 5: blocks of 3 x 5 (largest divisors <= 5), 2 x 2 of them.
        let (rows, cols) = (6, 10);
        let (h, w) = block_shape(&[rows, cols], 5);
        assert_eq!((h, w), (3, 5));
        let x = ramp(rows * cols);
        let p = Piece { offset: 0, rows, cols, h, w };
        let dct = Dct::new(vec![p]);
        let n = rows * cols;
        let (mut y, mut z, mut back) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        dct.forward(&x, &mut y, &mut z);
        for b in 0..p.chunks() {
            let block: Vec<f64> = (0..h * w).map(|i| x[p.position(b, i)] as f64).collect();
            let want = naive_2d(&block, h, w);
            let got: Vec<f32> = (0..h * w).map(|i| y[p.position(b, i)]).collect();
            assert!(close(&got, &want, 1e-5), "block {b}: {got:?} vs {want:?}");
        }
        dct.inverse(&y, &mut back, &mut z);
        assert!(close(&back, &x.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1e-5));
        // Orthonormal: the energy of every block is preserved.
        let e = |v: &[f32]| v.iter().map(|a| (a * a) as f64).sum::<f64>();
        assert!((e(&x) - e(&y)).abs() < 1e-4 * e(&x));
    }

    #[test]
    fn pieces_of_different_shapes_transform_independently() {
        // A prime-sized matrix (7 x 3: one block) then a 1-D run set (2 x 4), in one buffer.
        let pieces =
            vec![Piece { offset: 0, rows: 7, cols: 3, h: 7, w: 3 }, Piece { offset: 21, rows: 2, cols: 4, h: 1, w: 4 }];
        let dct = Dct::new(pieces.clone());
        let x = ramp(29);
        let (mut y, mut z, mut back) = (vec![0.0; 29], vec![0.0; 29], vec![0.0; 29]);
        dct.forward(&x, &mut y, &mut z);
        let want = naive_2d(&x[..21].iter().map(|&v| v as f64).collect::<Vec<_>>(), 7, 3);
        assert!(close(&y[..21], &want, 1e-5));
        assert!(close(&y[25..], &naive_1d(&x[25..].iter().map(|&v| v as f64).collect::<Vec<_>>()), 1e-5));
        dct.inverse(&y, &mut back, &mut z);
        assert!(close(&back, &x.iter().map(|&v| v as f64).collect::<Vec<_>>(), 1e-5));
        // FLOPs: 2 * 21 * (3 + 7) + 2 * 8 * 4.
        assert_eq!(dct.flops(), 420.0 + 64.0);
    }
}

//! Deterministic reductions over rows.
//!
//! Bias and LayerNorm gradients sum over every row of a batch. The sums are
//! split over fixed column blocks (never over rows), so each output element
//! is added up in row order by one thread: the same bits whatever the number
//! of threads or their timing, which `--resume` bit-identity relies on.

use rayon::prelude::*;

/// Columns handled by one task; a multiple of the SIMD width.
const BLOCK: usize = 64;

/// `acc[j] += sum_i m[i, j]` for a row-major `m` with `cols` columns.
pub fn add_column_sums(acc: &mut [f32], m: &[f32], cols: usize) {
    debug_assert_eq!(acc.len(), cols);
    debug_assert_eq!(m.len() % cols, 0);
    acc.par_chunks_mut(BLOCK).enumerate().for_each(|(blk, out)| {
        let (c0, c1) = (blk * BLOCK, blk * BLOCK + out.len());
        for row in m.chunks_exact(cols) {
            for (o, x) in out.iter_mut().zip(&row[c0..c1]) {
                *o += x;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_sums_by_hand() {
        // rows [1 2 3] and [4 5 6] -> column sums [5 7 9], added onto [1 1 1]
        let mut acc = vec![1.0; 3];
        add_column_sums(&mut acc, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3);
        assert_eq!(acc, [6.0, 8.0, 10.0]);
    }

    #[test]
    fn column_sums_cross_block_boundaries() {
        let cols = 200;
        let m: Vec<f32> = (0..cols * 3).map(|i| i as f32).collect();
        let mut acc = vec![0.0; cols];
        add_column_sums(&mut acc, &m, cols);
        for (j, a) in acc.iter().enumerate() {
            assert_eq!(*a, (j + (cols + j) + (2 * cols + j)) as f32);
        }
    }
}

//! The end of a residual branch, fused with the LayerNorm that follows it.
//!
//! Every residual add in the GPT is followed by a LayerNorm (`ln_2` after the
//! attention branch, the next block's `ln_1` or `ln_f` after the MLP branch),
//! and the branch's last linear layer leaves its bias to be added here. So
//! one pass over each row adds the bias, applies dropout's saved mask, adds
//! the branch onto the stream, and normalises the row while it is in L1:
//! before, the bias was written over the whole output ahead of the product
//! (a pass the product then had to read back), the add was a second pass and
//! the LayerNorm a third (docs/decisions.md, issue 13).

use super::layernorm::{normalize_row, ROWS_PER_TASK};
use rayon::prelude::*;

/// `res = x + mask * (branch + bias)` (`mask`: dropout's keep-and-scale
/// factors, `None` when dropout is off), then `ln = LayerNorm(res; w, b)`
/// with each row's `mean` and `rstd` saved for the backward. All of
/// `res`, `ln`, `x`, `branch` (and `mask`) hold `rows x c` values with
/// `c = bias.len()`.
#[allow(clippy::too_many_arguments)]
pub fn add_and_normalize(
    res: &mut [f32],
    ln: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    branch: &[f32],
    bias: &[f32],
    mask: Option<&[f32]>,
    w: &[f32],
    b: &[f32],
    eps: f32,
) {
    let c = bias.len();
    let n = x.len();
    let rows = n / c;
    debug_assert_eq!(branch.len(), n);
    let task = c * ROWS_PER_TASK;
    res[..n]
        .par_chunks_mut(task)
        .zip(ln[..n].par_chunks_mut(task))
        .zip(mean[..rows].par_chunks_mut(ROWS_PER_TASK).zip(rstd[..rows].par_chunks_mut(ROWS_PER_TASK)))
        .enumerate()
        .for_each(|(t, ((res, ln), (mean, rstd)))| {
            let rows = res.chunks_exact_mut(c).zip(ln.chunks_exact_mut(c)).zip(mean.iter_mut().zip(rstd));
            for (i, ((res, ln), (m, s))) in rows.enumerate() {
                let at = t * task + i * c;
                let (x, br) = (&x[at..at + c], &branch[at..at + c]);
                match mask {
                    Some(mask) => {
                        for ((((r, x), br), bias), k) in res.iter_mut().zip(x).zip(br).zip(bias).zip(&mask[at..at + c])
                        {
                            *r = x + k * (br + bias);
                        }
                    }
                    None => {
                        for (((r, x), br), bias) in res.iter_mut().zip(x).zip(br).zip(bias) {
                            *r = x + (br + bias);
                        }
                    }
                }
                (*m, *s) = normalize_row(ln, res, w, b, eps);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::layernorm;

    #[test]
    fn residual_add_by_hand() {
        // x = [1, 2], branch = [3, 4], bias = [0.5, -0.5], mask = [2, 0]:
        // res = [1 + 2 * 3.5, 2 + 0 * 3.5] = [8, 2]; LayerNorm: mean 5, rstd 1/3 (eps 0)
        let (mut res, mut ln, mut m, mut r) = ([0.0; 2], [0.0; 2], [0.0], [0.0]);
        let mask = [2.0, 0.0];
        add_and_normalize(
            &mut res,
            &mut ln,
            &mut m,
            &mut r,
            &[1.0, 2.0],
            &[3.0, 4.0],
            &[0.5, -0.5],
            Some(&mask),
            &[1.0, 1.0],
            &[0.0, 0.0],
            0.0,
        );
        assert_eq!(res, [8.0, 2.0]);
        assert_eq!((m[0], r[0]), (5.0, 1.0 / 3.0));
        assert_eq!(ln, [1.0, -1.0]);
    }

    #[test]
    fn fused_pass_equals_add_then_layernorm_bit_for_bit() {
        // 37 rows: more than one task, the last one ragged.
        let (rows, c) = (37, 24);
        let f = |s: f32| (0..rows * c).map(|i| (i as f32 * s).sin()).collect::<Vec<f32>>();
        let (x, branch, mask) = (f(0.37), f(0.11), f(0.05));
        let bias: Vec<f32> = (0..c).map(|j| j as f32 * 0.01 - 0.1).collect();
        let w: Vec<f32> = (0..c).map(|j| 1.0 + j as f32 * 0.02).collect();
        let b: Vec<f32> = (0..c).map(|j| j as f32 * -0.03).collect();
        for mask in [None, Some(&mask[..])] {
            let (mut res, mut ln, mut m, mut r) =
                (vec![0.0; rows * c], vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            add_and_normalize(&mut res, &mut ln, &mut m, &mut r, &x, &branch, &bias, mask, &w, &b, 1e-5);
            // the unfused order: bias onto the branch, mask, add, LayerNorm
            let want_res: Vec<f32> =
                (0..rows * c).map(|i| x[i] + mask.map_or(1.0, |k| k[i]) * (branch[i] + bias[i % c])).collect();
            let (mut want_ln, mut wm, mut wr) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            layernorm::forward(&mut want_ln, &mut wm, &mut wr, &want_res, &w, &b, c, 1e-5);
            assert!(res.iter().zip(&want_res).all(|(a, b)| a.to_bits() == b.to_bits()), "res");
            assert!(ln.iter().zip(&want_ln).all(|(a, b)| a.to_bits() == b.to_bits()), "ln");
            assert_eq!((m, r), (wm, wr));
        }
    }
}

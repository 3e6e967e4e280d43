//! Where FlexDeMo cuts the flat parameter vector into the node's shards:
//! only at boundaries of DeMo's chunk rows (a tensor's start, or a multiple
//! of its block height; for a 1-D tensor, a run boundary), never inside a
//! chunk, so every chunk a shard transforms is a whole chunk of the
//! unsharded tensor (the same DCT blocks as DeMo on the full model).
//!
//! Shards are contiguous ranges of the flat vector, as near `n / k` each as
//! the allowed cuts permit; the reduce-scatter and all-gather inside the
//! node move them padded to the longest shard.

use crate::model::ParamLayout;
use crate::optim::dct::{block_shape, Piece};
use anyhow::{ensure, Result};
use std::ops::Range;

/// The rows x cols view and block shape DeMo gives a tensor of `shape`:
/// 2-D (R, C) with blocks (h, w); 1-D length L as L/w runs of w (h = 1).
pub fn tensor_grid(shape: &[usize], chunk: usize) -> (usize, usize, usize, usize) {
    let (h, w) = block_shape(shape, chunk);
    let n: usize = shape.iter().product();
    if shape.len() <= 1 {
        (n / w, w, 1, w)
    } else {
        (shape[0], n / shape[0], h, w)
    }
}

/// The `k` shards of `layout` (flat ranges, in order), cut at chunk-row
/// boundaries for chunk size `chunk`.
pub fn cut(layout: &ParamLayout, chunk: usize, k: usize) -> Result<Vec<Range<usize>>> {
    let n = layout.len;
    // Every allowed cut point, ascending (tensor starts included).
    let mut allowed = Vec::new();
    for t in &layout.tensors {
        let (rows, cols, h, _) = tensor_grid(&t.shape, chunk);
        allowed.extend((0..rows).step_by(h).map(|r| t.range.start + r * cols));
    }
    allowed.push(n);
    let mut bounds = vec![0];
    for j in 1..k {
        let target = j * n / k;
        let prev = *bounds.last().expect("starts at 0");
        // The allowed point nearest the target, after the previous cut.
        let at = allowed.partition_point(|&a| a <= prev);
        let best =
            allowed[at.min(allowed.len() - 1)..].iter().copied().min_by_key(|&a| a.abs_diff(target)).unwrap_or(n);
        bounds.push(best);
    }
    bounds.push(n);
    let shards: Vec<Range<usize>> = bounds.windows(2).map(|b| b[0]..b[1]).collect();
    ensure!(
        shards.iter().all(|s| !s.is_empty()),
        "the model has too few chunk rows to give each of {k} workers of a node a shard (chunk {chunk}); use fewer workers per node or a smaller chunk"
    );
    Ok(shards)
}

/// The DCT pieces of flat range `shard` (offsets relative to its start).
pub fn pieces(layout: &ParamLayout, chunk: usize, shard: &Range<usize>) -> Vec<Piece> {
    let mut out = Vec::new();
    for t in &layout.tensors {
        let (lo, hi) = (t.range.start.max(shard.start), t.range.end.min(shard.end));
        if lo >= hi {
            continue;
        }
        let (_, cols, h, w) = tensor_grid(&t.shape, chunk);
        out.push(Piece { offset: lo - shard.start, rows: (hi - lo) / cols, cols, h, w });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GptConfig;

    #[test]
    fn shards_are_cut_at_chunk_rows_and_cover_the_model() {
        let cfg = GptConfig::gpt2(37, 16, 2, 2, 8);
        let layout = ParamLayout::new(&cfg);
        for k in [1, 2, 3] {
            let shards = cut(&layout, 4, k).unwrap();
            assert_eq!(shards.len(), k);
            assert_eq!(shards[0].start, 0);
            assert_eq!(shards[k - 1].end, layout.len);
            for s in &shards {
                let ps = pieces(&layout, 4, s);
                assert_eq!(ps.iter().map(|p| p.len()).sum::<usize>(), s.len(), "pieces tile the shard");
                // Every piece is whole chunk rows of its tensor.
                assert!(ps.iter().all(|p| p.rows % p.h == 0 && p.cols % p.w == 0), "{ps:?}");
            }
        }
        // wte is 37 x 16 with chunk 4: h = 1 (37 is prime), so it may be cut after any row.
        assert_eq!(tensor_grid(&[37, 16], 4), (37, 16, 1, 4));
        // A 1-D bias of 48 with chunk 4 is 12 runs of 4.
        assert_eq!(tensor_grid(&[48], 4), (12, 4, 1, 4));
        // With chunk 64, wte (37 x 16) is one block: no cut inside it.
        let two = cut(&layout, 64, 2).unwrap();
        assert!(two[0].end >= 37 * 16, "{two:?}");
        assert!(cut(&layout, 64, 1000).unwrap_err().to_string().contains("too few chunk rows"));
    }
}

//! The Striding replicator as the DeToNATION code runs it
//! (`detonation/repl/striding_replicator.py:49-99` at
//! schneiderkamplab/DeToNATION be29e5c): each tensor's momentum seen as a
//! (c, -1) view, c rows of L/c contiguous elements, and every s-th row
//! sent; no index travels. Steps 2 and 5-7 are [`IndexedReplicator`]'s;
//! this file is step 4, for every tensor (piece) of the shard:
//!
//! ```text
//! c = the largest divisor of L that is <= chunk   (L itself when L <= chunk)   :73, :144-154
//! k = max(floor(rate c), 1)  rows per step        (rate * 4 / wire bytes: the bytes budget)  :76
//! s = ceil(c / k)            the stride in rows                                  :77
//! o = t mod s                the offset: lowcomm's, see below
//! 4. I <- the rows { (o + j s) mod c : j < k }, each L/c contiguous elements     :79
//! ```
//!
//! **Where lowcomm departs.** The reference's offset is
//! `(counter * s * k) mod c` (`:78`) with one counter for all tensors
//! (+1 per tensor per step). It moves by `s k mod c` rows per call, so it
//! freezes whenever `s k` is a multiple of c: at the t5 benchmark's rate
//! 0.0625 with c = 64 (k = 4, s = 16) rows 0, 16, 32, 48 are sent every
//! step and the other 60 never; likewise at rates 0.125 and 0.25. Ours,
//! `t mod s` per tensor, sends every row within s steps (the rows
//! `o + j s` for o < s, j < k cover 0..k s, and k s >= c). Like the
//! reference, rows repeat within a step when (k - 1) s >= c (e.g. c = 9,
//! k = 4, s = 3: row 0 twice): the payload keeps its k rows, the repeated
//! row carries the same value twice. The reference views each FSDP flat
//! parameter's shard; lowcomm views each tensor's part of the shard (a
//! [`Piece`], the unit DeMo's chunks use).

use super::indexed::{IndexedReplicator, Selection};
use crate::comm::WireDtype;
use crate::optim::dct::Piece;
use crate::runtime::Group;

/// One tensor's (c, -1) view and what step 4 takes of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowView {
    /// First element of the tensor in the shard.
    pub offset: usize,
    /// Rows c.
    pub rows: usize,
    /// Elements per row, L / c.
    pub width: usize,
    /// Rows sent per step, k.
    pub k: usize,
    /// Stride in rows, s = ceil(c / k).
    pub stride: usize,
}

impl RowView {
    /// The view of a tensor of `len` elements at `offset`, `chunk` rows at
    /// most, sending what `rate` buys in `wire`.
    pub fn new(offset: usize, len: usize, chunk: usize, rate: f64, wire: WireDtype) -> Self {
        let rows = largest_divisor_at_most(len, chunk);
        // The reference's int(max(rate * c, 1)); a narrower wire buys more rows.
        let k = ((rate * 4.0 / wire.bytes_per_elem() as f64 * rows as f64) as usize).clamp(1, rows);
        RowView { offset, rows, width: len / rows, k, stride: rows.div_ceil(k) }
    }

    /// The offset at step `t` (lowcomm's: cycles through 0..s).
    pub fn offset_at(&self, t: u64) -> usize {
        (t % self.stride as u64) as usize
    }

    /// Row `j` of step `t`'s selection.
    pub fn row(&self, t: u64, j: usize) -> usize {
        (self.offset_at(t) + j * self.stride) % self.rows
    }
}

/// The largest divisor of `n` that is at most `most` (`n` when n <= most;
/// the reference's `_get_smaller_split`, `striding_replicator.py:144-154`).
pub fn largest_divisor_at_most(n: usize, most: usize) -> usize {
    if n <= most {
        return n.max(1);
    }
    (1..=most.max(1)).rev().find(|d| n.is_multiple_of(*d)).unwrap_or(1)
}

/// The views of every tensor of a shard cut into `pieces`.
pub fn views(pieces: &[Piece], chunk: usize, rate: f64, wire: WireDtype) -> Vec<RowView> {
    pieces.iter().map(|p| RowView::new(p.offset, p.len(), chunk, rate, wire)).collect()
}

/// Values sent per step by `views` (what `budget` and the plan count).
pub fn values_per_step(views: &[RowView]) -> usize {
    views.iter().map(|v| v.k * v.width).sum()
}

/// Step 4 of Striding: every s-th row of every tensor.
pub struct RowSelection {
    views: Vec<RowView>,
}

impl Selection for RowSelection {
    fn select(&mut self, t: u64, _n: usize, _m: usize, out: &mut Vec<usize>) {
        out.clear();
        for v in &self.views {
            for j in 0..v.k {
                let start = v.offset + v.row(t, j) * v.width;
                out.extend(start..start + v.width);
            }
        }
    }
}

/// The Striding replicator of one shard.
pub type StridingReplicator = IndexedReplicator<RowSelection>;

impl StridingReplicator {
    /// For a shard of `len` cut into `pieces`, rows of at most `chunk`,
    /// compression `rate`, over `group`.
    pub fn new(
        beta: f32,
        rate: f64,
        chunk: usize,
        pieces: &[Piece],
        len: usize,
        group: Group,
        wire: WireDtype,
    ) -> Self {
        let views = views(pieces, chunk, rate, wire);
        let m = values_per_step(&views);
        IndexedReplicator::with_selection(RowSelection { views }, beta, m, len, group, wire)
    }

    /// Every tensor's view.
    pub fn views(&self) -> &[RowView] {
        &self.selection().views
    }
}

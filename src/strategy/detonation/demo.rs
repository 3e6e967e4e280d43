//! The DeMo replicator (shared/notes/demo.md, steps 2-7): send the k
//! largest DCT coefficients of every chunk of the momentum.
//!
//! ```text
//! 2. delta <- beta delta + lr g
//! 3. C <- DCT(delta), chunk by chunk (optim/dct.rs)
//! 4. keep the k coefficients of largest |C| in every chunk: (index, value)
//! 5. delta <- delta - IDCT(kept)
//! 6. all-gather every member's pairs (one payload for all tensors)
//! 7. Q <- IDCT(C~), C~[i] = mean of the values members sent at index i
//! ```
//!
//! The momentum is kept in DCT space: the transform is linear and
//! orthonormal, so `DCT(beta delta + lr g) = beta DCT(delta) + lr DCT(g)`
//! and step 5 is `C[kept] -= sent`, exactly. A step then costs one forward
//! transform (of g) and one inverse (of C~) instead of three
//! (docs/decisions.md). What is subtracted is the value as the wire
//! carries it (bf16 keeps the rounding residual in delta).
//!
//! Payload: every chunk's k_c indices then values, chunk after chunk,
//! packed by `SparseLayout` (indices u8 for chunks of <= 256 coefficients,
//! u16 up to 65536), so its size is fixed: sum_c k_c (index + value bytes).

use super::replicator::{Exchange, Replicator};
use crate::comm::payload::SparseLayout;
use crate::comm::{Sparse, WireDtype};
use crate::optim::dct::{Dct, Piece};
use crate::runtime::Group;
use crate::strategy::detonation::settings::DemoSettings;
use crate::strategy::outcome::Budget;
use anyhow::Result;
use rayon::prelude::*;

/// One chunk of the shard: its piece, its block number, where its pairs go.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    piece: usize,
    block: usize,
    /// First pair of this chunk in the payload.
    at: usize,
    /// Pairs it sends.
    k: usize,
}

/// The DeMo replicator of one shard.
pub struct DemoReplicator {
    dct: Dct,
    beta: f32,
    chunks: Vec<Chunk>,
    layout: SparseLayout,
    group: Group,
    members: usize,
    wire: WireDtype,
    /// The momentum, in DCT space.
    delta: Vec<f32>,
    /// DCT(g).
    coef: Vec<f32>,
    /// The decoded coefficients (zero between steps).
    decoded: Vec<f32>,
    /// Contributors per coefficient while decoding.
    count: Vec<u32>,
    scratch: Vec<f32>,
    pairs: Sparse,
    /// The exchange's buffers between steps.
    bufs: Option<(Vec<u8>, Vec<u8>)>,
}

/// Pairs sent by a chunk of `len` coefficients: `topk`, or what compression
/// rate `c` buys, clamped to [1, len] (note, step 4).
pub fn pairs_per_chunk(s: &DemoSettings, len: usize, index_bytes: usize, wire: WireDtype) -> usize {
    let k = match s.compression {
        Some(c) => (c * 4.0 * len as f64 / (index_bytes + wire.bytes_per_elem()) as f64).round() as usize,
        None => s.topk.unwrap_or(DemoSettings::DEFAULT_TOPK),
    };
    k.clamp(1, len.max(1))
}

impl DemoReplicator {
    /// For a shard of `len` elements cut into `pieces`, over `group` of `members`.
    pub fn new(s: &DemoSettings, pieces: &[Piece], len: usize, group: Group, members: usize, wire: WireDtype) -> Self {
        let widest = pieces.iter().map(Piece::chunk_len).max().unwrap_or(1);
        let index_bytes = SparseLayout::new(1, widest, wire).index.bytes();
        let mut chunks = Vec::new();
        let mut at = 0;
        for (i, p) in pieces.iter().enumerate() {
            let k = pairs_per_chunk(s, p.chunk_len(), index_bytes, wire);
            for block in 0..p.chunks() {
                chunks.push(Chunk { piece: i, block, at, k });
                at += k;
            }
        }
        let layout = SparseLayout::new(at, widest, wire);
        let bytes = layout.bytes();
        DemoReplicator {
            dct: Dct::new(pieces.to_vec()),
            beta: s.beta,
            chunks,
            layout,
            group,
            members,
            wire,
            delta: vec![0.0; len],
            coef: vec![0.0; len],
            decoded: vec![0.0; len],
            count: vec![0; len],
            scratch: vec![0.0; len],
            pairs: Sparse { indices: vec![0; at], values: vec![0.0; at] },
            bufs: Some((vec![0; bytes], vec![0; bytes * members])),
        }
    }

    /// The payload's shape (pairs, index width, value dtype).
    pub fn layout(&self) -> SparseLayout {
        self.layout
    }

    /// The momentum in DCT space.
    pub fn delta_dct(&self) -> &[f32] {
        &self.delta
    }

    /// Step 4 for every chunk: the indices (ascending) and values of its k
    /// largest |delta| (ties: the lower index), into the pairs.
    fn select(&mut self) {
        let pieces = self.dct.pieces();
        let delta = &self.delta;
        let (mut idx, mut val) = (&mut self.pairs.indices[..], &mut self.pairs.values[..]);
        let mut jobs = Vec::with_capacity(self.chunks.len());
        for c in &self.chunks {
            let (i, ir) = idx.split_at_mut(c.k);
            let (v, vr) = val.split_at_mut(c.k);
            jobs.push((c, i, v));
            (idx, val) = (ir, vr);
        }
        jobs.into_par_iter().for_each_init(Vec::new, |vals: &mut Vec<(f32, u32)>, (c, idx, val)| {
            // The chunk's coefficients, gathered row by row (h rows of w
            // consecutive elements), with their index in the chunk.
            let p = &pieces[c.piece];
            vals.clear();
            for r in 0..p.h {
                let at = p.position(c.block, r * p.w);
                vals.extend(delta[at..at + p.w].iter().enumerate().map(|(j, &v)| (v, (r * p.w + j) as u32)));
            }
            let by_size = |a: &(f32, u32), b: &(f32, u32)| b.0.abs().total_cmp(&a.0.abs()).then(a.1.cmp(&b.1));
            if c.k < vals.len() {
                vals.select_nth_unstable_by(c.k - 1, by_size);
            }
            let kept = &mut vals[..c.k];
            kept.sort_unstable_by_key(|&(_, i)| i);
            for (j, &(v, i)) in kept.iter().enumerate() {
                idx[j] = i;
                val[j] = v;
            }
        });
    }
}

/// Where each of a payload's pairs lands in the shard, with its value.
fn positions<'a>(chunks: &'a [Chunk], pieces: &'a [Piece], s: &'a Sparse) -> impl Iterator<Item = (usize, f32)> + 'a {
    chunks.iter().flat_map(move |c| {
        (c.at..c.at + c.k).map(move |j| (pieces[c.piece].position(c.block, s.indices[j] as usize), s.values[j]))
    })
}

impl Replicator for DemoReplicator {
    fn fold(&mut self, _t: u64, lr: f32, g: &[f32]) -> Exchange {
        // 2-3. delta <- beta delta + lr DCT(g)  (= DCT(beta delta + lr g)).
        self.dct.forward(g, &mut self.coef, &mut self.scratch);
        let beta = self.beta;
        self.delta.par_iter_mut().zip(self.coef.par_iter()).for_each(|(d, &c)| *d = beta * *d + lr * c);
        // 4. Top-k per chunk.
        self.select();
        // 5. What is sent leaves delta (as the wire carries it).
        let pieces = self.dct.pieces();
        for c in &self.chunks {
            for j in c.at..c.at + c.k {
                let pos = pieces[c.piece].position(c.block, self.pairs.indices[j] as usize);
                self.delta[pos] -= self.wire.round(self.pairs.values[j]);
            }
        }
        // 6. One payload for the whole shard.
        let (mut input, output) = self.bufs.take().expect("one exchange at a time");
        self.pairs.encode(&self.layout, &mut input);
        Exchange::Gather { group: self.group.clone(), input, output }
    }

    fn unfold(&mut self, done: Exchange, q: &mut [f32]) {
        let Exchange::Gather { input, output, .. } = done else { unreachable!("DeMo exchanges by all-gather") };
        // 7. Place every member's coefficients; the mean where several sent the same index.
        let pieces = self.dct.pieces();
        let bytes = self.layout.bytes();
        let sent: Vec<Sparse> =
            (0..self.members).map(|m| Sparse::decode(&self.layout, &output[m * bytes..(m + 1) * bytes])).collect();
        let chunks = &self.chunks;
        // `decoded` is all zeros between steps: only what arrives is placed.
        for s in &sent {
            for (pos, v) in positions(chunks, pieces, s) {
                self.decoded[pos] += v;
                self.count[pos] += 1;
            }
        }
        for s in &sent {
            for (pos, _) in positions(chunks, pieces, s) {
                // Divide once per index (the count goes back to 0 for the next step).
                let n = std::mem::take(&mut self.count[pos]);
                if n > 1 {
                    self.decoded[pos] /= n as f32;
                }
            }
        }
        self.dct.inverse(&self.decoded, q, &mut self.scratch);
        for s in &sent {
            for (pos, _) in positions(chunks, pieces, s) {
                self.decoded[pos] = 0.0;
            }
        }
        self.bufs = Some((input, output));
    }

    fn flops(&self) -> f64 {
        // Two transforms, the top-k and decode passes (a few per element).
        2.0 * self.dct.flops() + 8.0 * self.delta.len() as f64
    }

    fn budget(&self) -> Budget {
        Budget { payload_bytes: self.layout.bytes(), every: 1, dense_bytes: 4 * self.delta.len() }
    }

    fn state(&self) -> Vec<(String, Vec<f32>)> {
        vec![("delta_dct".into(), self.delta.clone())]
    }

    fn restore(&mut self, from: &crate::strategy::journal::StrategyState) -> Result<()> {
        from.copy_into("delta_dct", &mut self.delta)
    }
}

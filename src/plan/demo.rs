//! DeMo and FlexDeMo (strategy/detonation/flexdemo.rs) in closed form.
//!
//! What a step costs depends on the model's tensor shapes: FlexDeMo cuts
//! the node's shards only at DeMo's chunk rows (detonation/shard.rs), and
//! DeMo's payload is `sum over chunks of k_c` (index, value) pairs packed
//! with the narrowest index that fits the widest chunk (detonation/demo.rs).
//! With the model's layout known (a lowcomm preset or a GPT-2 or Llama config.json)
//! the plan cuts the same shards and counts the same pairs and DCT FLOPs,
//! so the row is the simulator's time and the run's memory (tests_sim.rs).
//! Without it (a bare parameter count, a Llama config) the row is an
//! estimate, marked `~`: shards of `ceil(n / k)` and every tensor taken as
//! whole `chunk x chunk` blocks.
//!
//! One step of worker j (shard j of its node; `K` micro-batches, `RS`/`AG`
//! the node's reduce-scatter and all-gather of the padded shards, `ex_j`
//! the exchange of shard j over its replication group, `loc_j` the DCT
//! encode + decode FLOPs and the shard's optimizer step):
//!
//! ```text
//! blocking:  K mb + RS + max_j (loc_j + ex_j) + AG
//! overlap:   max(K mb, max_j ex_j) + RS + max_j loc_j + AG   (max: Interference::overlapped)
//! ```
//! The node's collectives wait for its slowest shard (max_j). With overlap
//! the exchange started after step t's all-gather runs behind step t+1's
//! micro-batches, and the reduce-scatter queues behind it on the FIFO lane.

use super::net::{Net, Timing, Xfer};
use super::Costing;
use crate::comm::link::Op;
use crate::comm::payload::SparseLayout;
use crate::model::ParamLayout;
use crate::optim::dct::{Dct, Piece};
use crate::runtime::sim::Interference;
use crate::runtime::{Group, Work};
use crate::strategy::detonation::demo::pairs_per_chunk;
use crate::strategy::detonation::settings::{DemoSettings, InnerKind, ReplicatorKind};
use crate::strategy::detonation::{adamw::DecoupledAdamW, shard, striding, values_for};
use anyhow::Result;

/// One shard's costs: what its worker computes, sends and holds.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardCost {
    /// Elements of the shard.
    pub len: usize,
    /// Bytes one member puts into one exchange (the replicator's budget).
    pub payload_bytes: usize,
    /// FLOPs of one fold + unfold (the replicator's `flops()`).
    pub flops: f64,
    /// f32 values the replicator keeps (its momentum).
    pub state: usize,
}

/// The shards of one node and the replication group.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    /// Workers sharing a replica (FlexDeMo: per node; DeMo: 1).
    pub k: usize,
    /// Longest shard: the node's collectives move `k x m`.
    pub m: usize,
    /// Members of a replication group.
    pub members: usize,
    /// Every shard, in node order (worker 0 holds the first).
    pub shards: Vec<ShardCost>,
    /// Whether the shards and payloads are the engine's (the layout is known).
    pub exact: bool,
}

/// The shards DeMo (`flex = false`) or FlexDeMo cuts for `c`, as flexdemo.rs does.
pub fn geometry(s: &DemoSettings, c: &Costing, flex: bool) -> Result<Geometry> {
    let topo = c.spec.topology;
    let k = if flex { topo.per_node.max(1) } else { 1 };
    let members = if flex { topo.nodes() } else { topo.workers };
    let n = c.params;
    let (ranges, exact) = match &c.layout {
        Some(layout) if k > 1 => (shard::cut(layout, s.chunk, k)?, true),
        Some(_) => (std::iter::once(0..n).collect(), true),
        None => {
            let len = n.div_ceil(k);
            ((0..k).map(|j| (j * len).min(n)..((j + 1) * len).min(n)).collect(), false)
        }
    };
    let shards = ranges
        .iter()
        .map(|r| {
            let pieces = match &c.layout {
                Some(layout) => shard::pieces(layout, s.chunk, r),
                None => square_pieces(r.len(), s.chunk),
            };
            shard_cost(s, c, &pieces, r.len(), members)
        })
        .collect::<Vec<_>>();
    let m = shards.iter().map(|sh| sh.len).max().unwrap_or(0);
    Ok(Geometry { k, m, members, shards, exact })
}

/// Without a layout: the shard as whole `chunk x chunk` blocks (and a
/// remainder run of one row), the shape DeMo gives a large matrix.
fn square_pieces(len: usize, chunk: usize) -> Vec<Piece> {
    let block = chunk * chunk;
    let whole = len / block;
    let mut out = Vec::new();
    if whole > 0 {
        out.push(Piece { offset: 0, rows: chunk, cols: whole * chunk, h: chunk, w: chunk });
    }
    if !len.is_multiple_of(block) {
        out.push(Piece { offset: whole * block, rows: 1, cols: len % block, h: 1, w: len % block });
    }
    out
}

/// The replicator's budget, FLOPs and state for a shard cut into `pieces`
/// (detonation/mod.rs `build` and each replicator's `budget`, `flops`, `state`).
fn shard_cost(s: &DemoSettings, c: &Costing, pieces: &[Piece], len: usize, members: usize) -> ShardCost {
    let wire = c.wire;
    let bpe = wire.bytes_per_elem();
    // A replication group of one sends nothing (`Alone`): Q = lr g.
    if members <= 1 && !s.replicator.raw_gradient() {
        return ShardCost { len, payload_bytes: 0, flops: len as f64, state: 0 };
    }
    let rate = s.compression.unwrap_or(DemoSettings::DEFAULT_COMPRESSION);
    let dense = if members <= 1 { 0 } else { len * bpe };
    match s.replicator {
        ReplicatorKind::Demo => {
            let widest = pieces.iter().map(Piece::chunk_len).max().unwrap_or(1);
            let index_bytes = SparseLayout::new(1, widest, wire).index.bytes();
            let pairs: usize =
                pieces.iter().map(|p| pairs_per_chunk(s, p.chunk_len(), index_bytes, wire) * p.chunks()).sum();
            let payload_bytes = SparseLayout::new(pairs, widest, wire).bytes();
            let flops = 2.0 * Dct::new(pieces.to_vec()).flops() + 8.0 * len as f64;
            ShardCost { len, payload_bytes, flops, state: len }
        }
        ReplicatorKind::Random | ReplicatorKind::StridingElement => {
            ShardCost { len, payload_bytes: values_for(rate, len, wire) * bpe, flops: 3.0 * len as f64, state: len }
        }
        // k rows of every tensor's (c, -1) view (detonation/striding.rs).
        ReplicatorKind::Striding => {
            let values = striding::values_per_step(&striding::views(pieces, s.chunk, rate, wire));
            ShardCost { len, payload_bytes: values * bpe, flops: 3.0 * len as f64, state: len }
        }
        ReplicatorKind::DilocoDelta => ShardCost { len, payload_bytes: len * bpe, flops: 3.0 * len as f64, state: len },
        // The raw gradient, no momentum (full.rs; diloco.rs every n-th step).
        ReplicatorKind::Diloco | ReplicatorKind::Full => ShardCost { len, payload_bytes: dense, flops: 0.0, state: 0 },
    }
}

/// Seconds and bytes of shard `sh`'s exchange over `repl`, per step
/// (diloco and diloco-delta: the exchange of every n-th step spread over the period).
fn exchange(net: &Net, c: &Costing, s: &DemoSettings, sh: &ShardCost, members: usize, repl: Group) -> Xfer {
    if members <= 1 && !s.replicator.raw_gradient() {
        return Xfer::default();
    }
    let bpe = c.wire.bytes_per_elem();
    // Alone, full and diloco still run their mean exactly (f32) over a group of one.
    let raw_wire = if members <= 1 { crate::comm::WireDtype::F32 } else { c.wire };
    let period = 1.0 / s.diloco_every() as f64;
    match s.replicator {
        // An all-gather of every member's packed payload (bytes).
        ReplicatorKind::Demo => net.coll(Op::AllGather, members * sh.payload_bytes, 1, repl),
        ReplicatorKind::Random | ReplicatorKind::Striding | ReplicatorKind::StridingElement => {
            net.dense(Op::AllReduce, sh.payload_bytes / bpe, c.wire, repl)
        }
        ReplicatorKind::DilocoDelta => net.dense(Op::AllReduce, sh.len, c.wire, repl).times(period),
        ReplicatorKind::Diloco => net.dense(Op::AllReduce, sh.len, raw_wire, repl).times(period),
        ReplicatorKind::Full => net.dense(Op::AllReduce, sh.len, raw_wire, repl),
    }
}

/// Timing of one DeMo (`flex = false`) or FlexDeMo step under `c` (module docs).
pub(super) fn timing(net: &Net, c: &Costing, s: &DemoSettings, flex: bool) -> Result<Timing> {
    let g = geometry(s, c, flex)?;
    let kmb = c.grad_accum.max(1) as f64 * net.mb();
    let repl = if flex { Group::Replicas } else { Group::World };
    let mut node = Xfer::default();
    if g.k > 1 {
        node = net.dense(Op::ReduceScatter, g.k * g.m, c.wire, Group::Node)
            + net.dense(Op::AllGather, g.k * g.m, c.wire, Group::Node);
        if c.grad_clip {
            node = node + net.dense(Op::AllReduce, 1, crate::comm::WireDtype::F32, Group::Node);
        }
    }
    let ex: Vec<Xfer> = g.shards.iter().map(|sh| exchange(net, c, s, sh, g.members, repl.clone())).collect();
    let loc: Vec<f64> = g
        .shards
        .iter()
        .map(|sh| net.work(Work::Flops { name: "demo", flops: sh.flops }) + net.update(sh.len))
        .collect();
    let max = |v: &mut dyn Iterator<Item = f64>| v.fold(0.0, f64::max);
    let round_s = if s.overlap && g.k <= 1 {
        // The clip follows the micro-batches while the exchange is still in
        // flight (no node collective stands between them).
        let tail = max(&mut g.shards.iter().map(|sh| net.clip(sh.len)));
        c.spec.interference.overlapped_with_tail(kmb, max(&mut ex.iter().map(|x| x.s)), net.mb(), tail)
            + max(&mut loc.iter().zip(&g.shards).map(|(l, sh)| l - net.clip(sh.len)))
    } else if s.overlap {
        // The node's reduce-scatter waits behind the exchange (one FIFO
        // stream), so the clip comes after both.
        c.spec.interference.overlapped(kmb, max(&mut ex.iter().map(|x| x.s)), net.mb())
            + node.s
            + max(&mut loc.iter().copied())
    } else {
        kmb + net.straggle(c.grad_accum.max(1) as f64) + node.s + max(&mut loc.iter().zip(&ex).map(|(l, x)| l + x.s))
    };
    // Worker 0's own work and traffic (the shard it holds).
    let x = node + ex[0];
    let compute = kmb + loc[0];
    let bound = if g.exact {
        ""
    } else {
        "estimate (no tensor layout: shards of n/k, tensors as whole chunk x chunk blocks); "
    };
    let how = if s.overlap {
        "the exchange runs behind the next step's micro-batches, the node's reduce-scatter and all-gather are exposed"
    } else {
        "none: the exchange and the node's collectives block"
    };
    let periodic = s.replicator.periodic() && s.diloco_every() > 1 && (g.members > 1 || s.replicator.raw_gradient());
    let diloco = if periodic {
        "; diloco replicators: the exchange of every n-th step spread over its period (an average, not every step)"
    } else {
        ""
    };
    Ok(Timing {
        round_s,
        steps: 1,
        micro_batches: c.grad_accum.max(1) as f64,
        compute_s: compute,
        comm_s: x.s,
        exposed_s: (round_s - compute).max(0.0),
        bytes_intra: x.intra,
        bytes_inter: x.inter,
        // With interference behind the micro-batches: approximate, as plan/time.rs says.
        exact: g.exact && !periodic && !(s.overlap && c.spec.interference != Interference::NONE),
        rule: format!("{bound}{how}{diloco}"),
    })
}

/// Worker 0's buffers (flexdemo.rs's `MemoryBytes`): f32 elements of the
/// communication buffers (`rs_in`, `g`, `ag_in`, `ag_out`, `q`), packed
/// payload bytes (in + every member's out), f32 optimizer-like state
/// (theta shard, replicator momentum, inner AdamW moments).
pub fn buffers(s: &DemoSettings, c: &Costing, flex: bool) -> Result<(f64, f64, f64)> {
    let g = geometry(s, c, flex)?;
    let sh = &g.shards[0];
    let (k, m, len) = (g.k as f64, g.m as f64, sh.len as f64);
    // g is one shard when sharded, else the whole replica (= m for k = 1).
    let comm = k * m + m + m + k * m + len;
    let raw = (sh.payload_bytes * (g.members + 1)) as f64;
    let inner = match s.inner {
        InnerKind::Sgd => 0,
        InnerKind::DecoupledAdamw => DecoupledAdamW::new(&c.optimizer, sh.len).state_len(),
    };
    Ok((comm, raw, len + (sh.state + inner) as f64))
}

/// The layout behind `params`, when the plan knows the model's tensors.
pub fn layout_for(model: &super::ModelSpec) -> Option<ParamLayout> {
    model.gpt.as_ref().map(ParamLayout::new).filter(|l| l.len as f64 == model.params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GptConfig;
    use crate::runtime::sim::SimSpec;
    use crate::runtime::Topology;

    fn costing(workers: usize, per_node: usize, layout: Option<ParamLayout>, params: usize) -> Costing {
        let mut spec = SimSpec::flat(workers, 1.0, None);
        spec.topology = Topology { workers, per_node, server: false };
        let f32 = crate::comm::WireDtype::F32;
        Costing { layout, ..Costing::for_test(params, spec, f32, super::super::Precision::F32) }
    }

    #[test]
    fn payload_and_flops_by_hand_without_a_layout() {
        // 2 x 64 x 64 + 10 elements, chunk 64, topk 32, one worker per node:
        // two blocks of 4096 sending 32 pairs each and a run of 10 sending
        // all 10 (topk clamped to the chunk); the widest chunk (4096) needs
        // u16 indices, so every pair is 2 + 4 bytes with an f32 wire.
        let n = 2 * 4096 + 10;
        let c = costing(4, 1, None, n);
        let g = geometry(&DemoSettings::default(), &c, false).unwrap();
        assert!(!g.exact);
        assert_eq!((g.k, g.m, g.members), (1, n, 4));
        assert_eq!(g.shards[0].payload_bytes, (32 + 32 + 10) * (2 + 4));
        // DCT: 2 x 8192 x (64 + 64) + 2 x 10 x 10 per transform, two transforms, + 8 n.
        let dct = 2.0 * 8192.0 * 128.0 + 2.0 * 10.0 * 10.0;
        assert_eq!(g.shards[0].flops, 2.0 * dct + 8.0 * n as f64);
        // One node of 4 (FlexDeMo): replication groups of one, nothing sent.
        let c = costing(4, 4, None, n);
        let g = geometry(&DemoSettings::default(), &c, true).unwrap();
        assert_eq!((g.k, g.m, g.members, g.shards[0].payload_bytes), (4, n.div_ceil(4), 1, 0));
    }

    #[test]
    fn with_a_layout_the_shards_are_the_engines() {
        let cfg = GptConfig::gpt2(37, 16, 2, 2, 8);
        let layout = ParamLayout::new(&cfg);
        let n = layout.len;
        let c = costing(4, 2, Some(layout.clone()), n);
        let s = DemoSettings { chunk: 4, ..DemoSettings::default() };
        let g = geometry(&s, &c, true).unwrap();
        assert!(g.exact);
        let cut = shard::cut(&layout, 4, 2).unwrap();
        assert_eq!(
            g.shards.iter().map(|sh| sh.len).collect::<Vec<_>>(),
            cut.iter().map(|r| r.len()).collect::<Vec<_>>()
        );
        // Chunks of 4 x 4 = 16 coefficients: u8 indices; topk 32 clamps to the chunk.
        let pieces = shard::pieces(&layout, 4, &cut[0]);
        let pairs: usize = pieces.iter().map(|p| p.chunk_len().min(32) * p.chunks()).sum();
        assert_eq!(g.shards[0].payload_bytes, pairs * (1 + 4));
    }
}

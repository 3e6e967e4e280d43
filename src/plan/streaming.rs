//! Streaming DiLoCo's row (strategy/diloco/streaming.rs): a round of H
//! inner steps in which each fragment p of n_p parameters leaves once.
//!
//! ```text
//! round  = H (K mb + opt(n)) + sum_p local_p + sum_p max(0, comm_p - tau (K mb + opt(n)))
//! local_p = ew(n_p) pseudo-gradient + ew(3 n_p) outer step + ew(3 n_p) mix
//!           [+ ew(2 n_p) encode + ew(2 N n_p) decode with a compressed outer_wire]
//! comm_p = AR(n_p) in the wire dtype, or AG(N wire_bytes(n_p)) compressed
//! eager:  local_p += ew(2 n_p) stand-in gradient + ew(3 n_p) stand-in step + ew(4 n_p) correction
//!         (the mix then runs at S6, with the stand-in),
//!         and the stand-in step and its mix (and, compressed, the stand-in
//!         gradient) run while comm_p travels: they hide it as the tau steps do
//! ```
//!
//! A fragment's outer gradient starts after its pseudo-gradient (and
//! encode) and is waited for tau inner steps later: what the link needs
//! beyond those steps is exposed. Bytes per round are every fragment's
//! once, as DiLoCo's whole model; the peak (one synchronisation) is the
//! largest fragment's, about 1/P of DiLoCo's (the embeddings ride with
//! block 0's fragment, so not exactly). Exact when tau is below the
//! shortest gap between two departures, floor(H / P) (or tau = 0): at
//! tau = floor(H / P) a landing waits behind the next departure's
//! pseudo-gradient, which the formula does not count.

use super::net::{Net, Timing, Xfer};
use super::Costing;
use crate::comm::link::Op;
use crate::runtime::sim::Interference;
use crate::runtime::{Group, Work};
use crate::strategy::diloco::fragments::Fragments;
use crate::strategy::StreamingSettings;
use anyhow::Result;

/// Parameters per fragment: cut by the model's layout as the run cuts it,
/// or, without a layout, n split evenly.
pub(super) fn sizes(s: &StreamingSettings, c: &Costing) -> Result<Vec<usize>> {
    Ok(match &c.layout {
        Some(l) => {
            let f = Fragments::new(l, s.fragments, s.fragment_pattern)?;
            (0..f.len()).map(|p| f.size(p)).collect()
        }
        None => {
            let p = s.fragments.max(1);
            (0..p).map(|i| c.params / p + usize::from(i < c.params % p)).collect()
        }
    })
}

/// Bytes a worker sends in one synchronisation of fragment `np`'s size, and its link time.
fn sync(net: &Net, c: &Costing, s: &StreamingSettings, np: usize) -> Xfer {
    match s.outer_wire {
        None => net.dense(Op::AllReduce, np, c.wire, Group::World),
        Some(wire) => net.coll(Op::AllGather, c.workers() * wire.wire_bytes(np), 1, Group::World),
    }
}

/// Peak bytes a worker sends at once: the largest fragment's synchronisation
/// (with every offset equal, all of them).
pub(super) fn peak_bytes(s: &StreamingSettings, c: &Costing) -> Result<f64> {
    let net = Net { c };
    let bytes = |np| {
        let x = sync(&net, c, s, np);
        x.intra + x.inter
    };
    let sizes = sizes(s, c)?;
    Ok(match s.same_offset {
        true => sizes.into_iter().map(bytes).sum(),
        false => sizes.into_iter().map(bytes).fold(0.0, f64::max),
    })
}

/// The row's timing (module docs).
pub(super) fn timing(net: &Net, c: &Costing, s: &StreamingSettings) -> Result<Timing> {
    let (n, world, k) = (c.params, c.workers(), c.grad_accum.max(1) as f64);
    let step = k * net.mb() + net.update(n);
    let ew = |name, elems| net.work(Work::Elementwise { name, elems });
    let (mut local, mut exposed, mut comm) = (0.0, 0.0, Xfer::default());
    for np in sizes(s, c)? {
        local += ew("diloco pseudo-gradient", np) + ew("diloco outer step", 3 * np) + ew("streaming mix", 3 * np);
        if s.outer_wire.is_some() {
            local += ew("diloco encode", 2 * np) + ew("diloco decode", 2 * world * np);
        }
        // Eager updates (strategy/diloco/streaming.rs, E1-E3): the work done while the average travels.
        let mut in_flight = 0.0;
        if s.eager {
            let (g, standin) = (ew("eager stand-in", 2 * np), ew("eager stand-in step", 3 * np));
            // The mix moves to S6; at landing the correction replaces it.
            local += g + standin + ew("eager correction", 4 * np);
            in_flight = standin + ew("streaming mix", 3 * np) + if s.outer_wire.is_some() { g } else { 0.0 };
        }
        let x = sync(net, c, s, np);
        // What runs behind the sync, and how much longer the pair takes
        // (slowed by each other, sim/spec.rs Interference); alone, it blocks.
        let behind = s.overlap() as f64 * step + in_flight;
        exposed += if behind > 0.0 { c.spec.interference.overlapped(behind, x.s, step) - behind } else { x.s };
        comm = comm + x;
    }
    let compute = s.h as f64 * step + local;
    let gap = s.h / s.fragments.max(1) as u64;
    let exact = c.layout.is_some()
        && !s.same_offset
        && (s.overlap() == 0 || (s.overlap() < gap && c.spec.interference == Interference::NONE));
    let rule = format!(
        "{}up to tau = {} inner steps per fragment: each of the {} fragments' outer gradients runs behind the next tau steps, the rest is exposed; peak {:.0} bytes per synchronisation (the largest fragment), {:.0} per round",
        if s.eager { "eager updates (a stand-in step while the average travels, corrected when it lands); " } else { "" },
        s.overlap(),
        s.fragments,
        peak_bytes(s, c)?,
        comm.intra + comm.inter
    );
    Ok(Timing {
        round_s: compute + exposed,
        steps: s.h,
        micro_batches: s.h as f64 * k,
        compute_s: compute,
        comm_s: comm.s,
        exposed_s: exposed,
        bytes_intra: comm.intra,
        bytes_inter: comm.inter,
        exact,
        rule,
    })
}

//! The checks every [`Communicator`] backend must pass, run by each rank on
//! its own handle: by the in-process backend's tests (threads), and by
//! `lowcomm comm-check` under `mpirun` for the MPI backend (processes). Each
//! rank knows what every rank contributes (a deterministic function of rank
//! and index), so it checks its results alone.
//!
//! Flat collectives must reproduce the *rank-order recipe* bit for bit: the
//! first rank's (wire-rounded) value, plus the others' in rank order 1..p,
//! then Mean's division and the wire's final rounding. Two backends that
//! both pass give the same bits for the same inputs. A hierarchical
//! all-reduce sums in another order, so it is checked against an f64
//! reduction within a rounding-error bound instead.

use super::{padded_len, CommStats, Communicator, ReduceOp, WireDtype};
use anyhow::{bail, Result};

/// Buffer lengths tried: empty, tiny, not a multiple of any world, large
/// enough to span several reduction blocks.
const SIZES: [usize; 5] = [0, 1, 7, 1000, 4099];

/// Deterministic, rank-dependent values in (-4, 4) with full 24-bit
/// mantissas and exponents from 2^-4 to 2^1, so that sums round (values on
/// one fixed grid would add exactly, in any order, and hide the order).
pub fn value(rank: usize, i: usize) -> f32 {
    let h = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let mantissa = 1.0 + (h >> 41) as f32 / (1u64 << 23) as f32;
    let exponent = ((h >> 8) % 6) as i32 - 4;
    let sign = if h & 1 == 1 { -1.0 } else { 1.0 };
    sign * mantissa * 2f32.powi(exponent)
}

/// What the rank-order recipe gives for element `i` reduced over `p` ranks.
pub fn recipe(i: usize, p: usize, op: ReduceOp, wire: WireDtype) -> f32 {
    let mut acc = wire.round(value(0, i));
    for q in 1..p {
        acc += wire.round(value(q, i));
    }
    if op == ReduceOp::Mean {
        acc /= p as f32;
    }
    wire.round(acc)
}

/// Rounding-error bound for a reduction of element `i` in any order: with
/// A the sum of |x_q| (over p for Mean) and u = 2^-24, recursive summation
/// errs by at most (p-1) u A and the division by u |result|; each bf16
/// rounding of an intermediate adds 2^-8 A, three stages at most.
fn tolerance(i: usize, p: usize, op: ReduceOp, wire: WireDtype) -> f64 {
    let mut a: f64 = (0..p).map(|q| value(q, i).abs() as f64).sum();
    if op == ReduceOp::Mean {
        a /= p as f64;
    }
    let u = 2f64.powi(-24);
    let wire_err = if wire == WireDtype::Bf16 { 3.0 * 2f64.powi(-8) * 1.01 } else { 0.0 };
    (wire_err + 2.0 * (p as f64 + 1.0) * u) * a
}

/// Runs every check on this rank; `hierarchical` says the backend's
/// all-reduce sums in another order than rank order (two-tier groups).
/// Returns how many checks passed; the first failure is the error.
pub fn check(comm: &mut dyn Communicator, hierarchical: bool) -> Result<usize> {
    let (r, p, wire) = (comm.rank(), comm.world(), comm.wire());
    let b = wire.bytes_per_elem();
    let before = comm.stats();
    let mut expect = CommStats::default();
    let mut checks = 0;
    for &n in &SIZES {
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            // all_reduce
            let mut buf: Vec<f32> = (0..n).map(|i| value(r, i)).collect();
            comm.all_reduce(&mut buf, op);
            expect.count_all_reduce(n, p, b);
            for (i, &got) in buf.iter().enumerate() {
                if hierarchical {
                    let exact: f64 = (0..p).map(|q| value(q, i) as f64).sum::<f64>()
                        / if op == ReduceOp::Mean { p as f64 } else { 1.0 };
                    let tol = tolerance(i, p, op, wire);
                    if (got as f64 - exact).abs() > tol {
                        bail!("rank {r}/{p}: all_reduce({n}, {op:?}, {wire:?}) element {i} = {got}, f64 reference {exact}, beyond the bound {tol:e}");
                    }
                } else if got.to_bits() != recipe(i, p, op, wire).to_bits() {
                    bail!("rank {r}/{p}: all_reduce({n}, {op:?}, {wire:?}) element {i} = {got}, the rank-order recipe gives {}", recipe(i, p, op, wire));
                }
            }
            checks += 1;
            // reduce_scatter over the padded length: rank r gets chunk r.
            let m = padded_len(n, p) / p;
            let input: Vec<f32> = (0..p * m).map(|i| value(r, i)).collect();
            let mut out = vec![f32::NAN; m];
            comm.reduce_scatter(&input, &mut out, op);
            expect.count_scatter_gather(m, p, b);
            for (j, &got) in out.iter().enumerate() {
                let want = recipe(r * m + j, p, op, wire);
                if got.to_bits() != want.to_bits() {
                    bail!("rank {r}/{p}: reduce_scatter(chunk {m}, {op:?}, {wire:?}) element {j} = {got}, the rank-order recipe gives {want}");
                }
            }
            checks += 1;
        }
        // all_gather: chunk q of the output is rank q's input, wire-rounded.
        let input: Vec<f32> = (0..n).map(|i| value(r, i)).collect();
        let mut out = vec![f32::NAN; p * n];
        comm.all_gather(&input, &mut out);
        expect.count_scatter_gather(n, p, b);
        for (k, &got) in out.iter().enumerate() {
            let want = wire.round(value(k / n.max(1), k % n.max(1)));
            if got.to_bits() != want.to_bits() {
                bail!(
                    "rank {r}/{p}: all_gather({n}, {wire:?}) element {k} = {got}, rank {}'s input gives {want}",
                    k / n.max(1)
                );
            }
        }
        checks += 1;
        // broadcast from every root.
        for root in 0..p {
            let mut buf: Vec<f32> = (0..n).map(|i| value(r, i)).collect();
            comm.broadcast(&mut buf, root);
            expect.count_broadcast(n, p, b, r, root);
            if let Some(i) = (0..n).find(|&i| buf[i].to_bits() != wire.round(value(root, i)).to_bits()) {
                bail!(
                    "rank {r}/{p}: broadcast({n}, root {root}, {wire:?}) element {i} = {}, root's value is {}",
                    buf[i],
                    wire.round(value(root, i))
                );
            }
            checks += 1;
        }
    }
    comm.barrier();
    expect.count_barrier();
    checks += 1;
    if !hierarchical {
        let s = comm.stats();
        let got = CommStats {
            bytes_sent: s.bytes_sent - before.bytes_sent,
            bytes_received: s.bytes_received - before.bytes_received,
            ops: s.ops - before.ops,
        };
        if got != expect {
            bail!("rank {r}/{p}: byte counters {got:?} but the ring model gives {expect:?}");
        }
        checks += 1;
    }
    Ok(checks)
}

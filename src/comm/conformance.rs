//! The checks every backend must pass, run by each participant on its own
//! handle: by the in-process backend's tests (threads), and by
//! `lowcomm comm-check` under `mpirun` for the MPI backend (processes). Each
//! rank knows what every rank contributes (a deterministic function of rank
//! and index), so it checks its results alone.
//!
//! [`check`] (one [`Communicator`]): collectives must reproduce the
//! *rank-order recipe* bit for bit: the first rank's (wire-rounded) value,
//! plus the others' in rank order 1..p, then Mean's division and the wire's
//! final rounding. Two backends that both pass give the same bits for the
//! same inputs. Byte all-gathers must be exact.
//!
//! [`check_fabric`] (one [`Fabric`]): groups made on first use (every pair
//! of participants, and the halves), point-to-point messages in order from
//! each sender with bf16 rounding only the values, and a receive-any that
//! returns nothing once its timeout passes.

use super::{padded_len, CommStats, Communicator, Fabric, Message, ReduceOp, WireDtype};
use anyhow::{bail, ensure, Result};
use std::time::{Duration, Instant};

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

/// Runs every check on this rank, for both wire dtypes. Returns how many
/// checks passed; the first failure is the error.
pub fn check(comm: &mut dyn Communicator) -> Result<usize> {
    let before = comm.stats();
    let mut expect = CommStats::default();
    let mut checks = 0;
    for wire in [WireDtype::F32, WireDtype::Bf16] {
        checks += check_wire(comm, wire, &mut expect)?;
    }
    checks += check_bytes(comm, &mut expect)?;
    comm.barrier();
    expect.count_barrier();
    checks += 1;
    let s = comm.stats();
    let got = CommStats {
        bytes_sent: s.bytes_sent - before.bytes_sent,
        bytes_received: s.bytes_received - before.bytes_received,
        ops: s.ops - before.ops,
    };
    if got != expect {
        bail!("rank {}/{}: byte counters {got:?} but the ring model gives {expect:?}", comm.rank(), comm.world());
    }
    Ok(checks + 1)
}

/// Byte all-gather: chunk q of the output is rank q's bytes, exactly.
fn check_bytes(comm: &mut dyn Communicator, expect: &mut CommStats) -> Result<usize> {
    let (r, p) = (comm.rank(), comm.world());
    let byte = |q: usize, i: usize| (q * 31 + i * 7 + (i >> 8)) as u8;
    for n in [0usize, 1, 13, 3000] {
        let input: Vec<u8> = (0..n).map(|i| byte(r, i)).collect();
        let mut out = vec![0xAAu8; p * n];
        comm.all_gather_bytes(&input, &mut out);
        expect.count_scatter_gather(n, p, 1);
        if let Some(k) = (0..p * n).find(|&k| out[k] != byte(k / n, k % n)) {
            bail!(
                "rank {r}/{p}: all_gather_bytes({n}) byte {k} = {}, rank {}'s input has {}",
                out[k],
                k / n,
                byte(k / n, k % n)
            );
        }
    }
    Ok(4)
}

/// The dense collectives with one wire dtype.
fn check_wire(comm: &mut dyn Communicator, wire: WireDtype, expect: &mut CommStats) -> Result<usize> {
    let (r, p) = (comm.rank(), comm.world());
    let b = wire.bytes_per_elem();
    let mut checks = 0;
    for &n in &SIZES {
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            // all_reduce
            let mut buf: Vec<f32> = (0..n).map(|i| value(r, i)).collect();
            comm.all_reduce(&mut buf, op, wire);
            expect.count_all_reduce(n, p, b);
            for (i, &got) in buf.iter().enumerate() {
                if got.to_bits() != recipe(i, p, op, wire).to_bits() {
                    bail!("rank {r}/{p}: all_reduce({n}, {op:?}, {wire:?}) element {i} = {got}, the rank-order recipe gives {}", recipe(i, p, op, wire));
                }
            }
            checks += 1;
            // reduce_scatter over the padded length: rank r gets chunk r.
            let m = padded_len(n, p) / p;
            let input: Vec<f32> = (0..p * m).map(|i| value(r, i)).collect();
            let mut out = vec![f32::NAN; m];
            comm.reduce_scatter(&input, &mut out, op, wire);
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
        comm.all_gather(&input, &mut out, wire);
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
            comm.broadcast(&mut buf, root, wire);
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
    Ok(checks)
}

/// Messages a sender `from` sends to `to` in [`check_fabric`]: in order,
/// values of every kind, one in bf16.
fn messages(from: usize, to: usize) -> Vec<Message> {
    let vals = |k: usize| (0..k).map(|i| value(from * 10 + to, i)).collect::<Vec<f32>>();
    vec![
        Message::new(1).with_scalars(vec![from as f64, to as f64, 1e300, 16_777_217.0]),
        Message::new(2).with_values(vals(1000), WireDtype::F32),
        Message::new(3).with_scalars(vec![0.5]).with_values(vals(33), WireDtype::Bf16),
    ]
}

/// Groups and point-to-point messages on one participant's fabric; every
/// participant of the job must run it at once. Returns the checks passed.
pub fn check_fabric(fabric: &mut dyn Fabric) -> Result<usize> {
    let (me, n) = (fabric.rank(), fabric.participants());
    let mut checks = 0;
    // Groups made on first use: every pair containing me, in a fixed order
    // (pairs (a, b) with a < b, lexicographic) so creation never deadlocks.
    for a in 0..n {
        for b in a + 1..n {
            if a != me && b != me {
                continue;
            }
            let g = fabric.group(&[a, b]);
            ensure!(
                g.world() == 2 && g.rank() == usize::from(me == b),
                "group [{a}, {b}]: rank {} of {}",
                g.rank(),
                g.world()
            );
            let mut buf = vec![me as f32 + 0.5; 3];
            g.all_reduce(&mut buf, ReduceOp::Sum, WireDtype::F32);
            ensure!(buf == vec![(a + b) as f32 + 1.0; 3], "group [{a}, {b}]: all_reduce gave {buf:?}");
            checks += 1;
        }
    }
    // Halves: participants below n/2 and the rest (a group per half).
    if n >= 2 {
        let half: Vec<usize> = if me < n / 2 { (0..n / 2).collect() } else { (n / 2..n).collect() };
        let g = fabric.group(&half);
        let mut buf = vec![1.0f32];
        g.all_reduce(&mut buf, ReduceOp::Sum, WireDtype::F32);
        ensure!(buf[0] == half.len() as f32, "group {half:?}: sum of ones is {}", buf[0]);
        checks += 1;
    }
    // Messages: everyone sends everyone else, then receives from each in turn.
    let before = fabric.message_stats();
    let mut sent_bytes = 0;
    for to in (0..n).filter(|&q| q != me) {
        for m in messages(me, to) {
            sent_bytes += m.wire_len();
            fabric.send(to, m);
        }
    }
    let mut recv_bytes = 0;
    for from in (0..n).filter(|&q| q != me) {
        for (k, want) in messages(from, me).into_iter().enumerate() {
            let got = fabric.recv(from);
            let mut rounded = want.clone();
            rounded.round_for_wire();
            ensure!(
                got == rounded,
                "message {k} from {from} to {me}: got tag {} with {} values, want tag {}",
                got.tag,
                got.values.len(),
                want.tag
            );
            recv_bytes += got.wire_len();
            checks += 1;
        }
    }
    let s = fabric.message_stats();
    ensure!(
        (s.bytes_sent - before.bytes_sent, s.bytes_received - before.bytes_received) == (sent_bytes as u64, recv_bytes as u64),
        "participant {me}: message byte counters {s:?} do not match the {sent_bytes} bytes sent and {recv_bytes} received"
    );
    // Receive-any with a deadline: nothing is in flight, so it times out.
    let t = Instant::now();
    let got = fabric.recv_any(Some(Duration::from_millis(30)));
    ensure!(got.is_none(), "recv_any with nothing sent returned a message from {:?}", got.map(|g| g.0));
    ensure!(t.elapsed() >= Duration::from_millis(30), "recv_any returned before its timeout");
    checks += 1;
    // And with one message each from everyone: all arrive, the deadline unused.
    let all: Vec<usize> = (0..n).collect();
    fabric.group(&all).barrier();
    for to in (0..n).filter(|&q| q != me) {
        fabric.send(to, Message::new(9).with_scalars(vec![me as f64]));
    }
    let mut from: Vec<usize> = (1..n)
        .map(|_| fabric.recv_any(Some(Duration::from_secs(60))).map(|(f, _)| f))
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow::anyhow!("participant {me}: recv_any timed out with messages in flight"))?;
    from.sort();
    ensure!(
        from == (0..n).filter(|&q| q != me).collect::<Vec<_>>(),
        "participant {me}: recv_any got messages from {from:?}"
    );
    fabric.group(&all).barrier();
    checks += 1;
    // A large message still coming when a receive-any's deadline passes is
    // not lost or reordered: it comes whole on a later call, before the
    // sender's next message. Participant 0 polls with no wait at all, so
    // over MPI its first calls find the message begun and not finished.
    // The sender flushes between the two (async DiLoCo's server does, to
    // send one model at a time): it returns while the receiver polls.
    if n >= 2 {
        let big = Message::new(10).with_values((0..4 << 20).map(|i| value(1, i)).collect(), WireDtype::F32);
        if me == 1 {
            fabric.send(0, big.clone());
            fabric.flush();
            fabric.send(0, Message::new(11));
        } else if me == 0 {
            let t = Instant::now();
            let (from, got) = loop {
                if let Some(m) = fabric.recv_any(Some(Duration::ZERO)) {
                    break m;
                }
                ensure!(t.elapsed() < Duration::from_secs(60), "participant 0: the large message never came");
            };
            ensure!(
                from == 1 && got == big,
                "participant 0: got tag {} from {from}, not the large message whole",
                got.tag
            );
            let next = fabric.recv(1);
            ensure!(next.tag == 11, "participant 0: after the large message, tag {}", next.tag);
        }
        fabric.group(&all).barrier();
    }
    Ok(checks + 1)
}

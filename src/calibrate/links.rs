//! What a link tier costs, measured over message sizes: ping-pong between
//! two participants ([`ping_pong`], half a round trip per size) and the
//! all-reduce of a group ([`all_reduce_sweep`], the collective the
//! simulator costs with the tier). Both run on the engine's own
//! communication traits, so the same code measures threads
//! ([`local_all_reduce`]: the threads backend's shared-memory collectives)
//! and MPI ranks (calibrate/mpi.rs). fit.rs turns a sweep into alpha-beta.

use crate::comm::{Communicator, Fabric, LocalGroup, Message, ReduceOp, WireDtype};
use std::time::Instant;

/// One sweep: seconds per size, in bytes.
pub type Sweep = Vec<(f64, f64)>;

/// Message sizes of a sweep: 4 B, 16 B, ... (x4) up to `max_bytes` (at least 4 B and 16 B).
pub fn sizes(max_bytes: usize) -> Vec<usize> {
    let mut v = vec![4usize];
    while v.last().is_some_and(|&b| b * 4 <= max_bytes.max(16)) {
        v.push(v.last().expect("non-empty") * 4);
    }
    v
}

/// Timed iterations of a size: many for small messages (latency is noisy),
/// few for big ones; the same on every participant, so they stay matched.
pub fn iterations(bytes: usize) -> usize {
    match bytes {
        b if b <= 64 << 10 => 30,
        b if b <= 4 << 20 => 10,
        _ => 4,
    }
}

/// What [`blocks`] asks of a sweep's closure.
enum Call {
    /// Line the participants up (a barrier).
    Sync,
    /// One timed operation.
    Op,
}

/// The median of 3 mean times of `iters` operations each (lined up before
/// each block, so it measures the slowest member's pace), after 3 untimed
/// operations (first-touch faults, connection setup, threads waking up).
fn blocks(iters: usize, call: &mut dyn FnMut(Call)) -> f64 {
    (0..3).for_each(|_| call(Call::Op));
    let mut means: Vec<f64> = (0..3)
        .map(|_| {
            call(Call::Sync);
            let t = Instant::now();
            for _ in 0..iters {
                call(Call::Op);
            }
            t.elapsed().as_secs_f64() / iters as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    means[1]
}

/// All-reduce (mean, f32 wire) of each size of `sizes` on `comm`; every
/// member of its group must call it. `progress` gets each size's time.
pub fn all_reduce_sweep(comm: &mut dyn Communicator, sizes: &[usize], progress: &mut dyn FnMut(usize, f64)) -> Sweep {
    let mut out = Vec::new();
    for &bytes in sizes {
        let mut buf = vec![1.0f32; (bytes / 4).max(1)];
        let s = blocks(iterations(bytes), &mut |c| match c {
            Call::Sync => comm.barrier(),
            Call::Op => comm.all_reduce(&mut buf, ReduceOp::Mean, WireDtype::F32),
        });
        progress(bytes, s);
        out.push((bytes as f64, s));
    }
    out
}

/// Ping-pong of each size between ranks `a` and `b` of `fabric` (both call
/// it, no other participant does): seconds one way, half a round trip, as
/// timed on the caller's side.
pub fn ping_pong(
    fabric: &mut dyn Fabric,
    (a, b): (usize, usize),
    sizes: &[usize],
    progress: &mut dyn FnMut(usize, f64),
) -> Sweep {
    let me = fabric.rank();
    assert!(me == a || me == b, "rank {me} is not in the ping-pong pair ({a}, {b})");
    let peer = if me == a { b } else { a };
    let mut out = Vec::new();
    for &bytes in sizes {
        let values = vec![1.0f32; (bytes / 4).max(1)];
        let s = blocks(iterations(bytes), &mut |c| match c {
            // An empty exchange lines the pair up.
            Call::Sync => {
                fabric.send(peer, Message::new(0));
                fabric.recv(peer);
            }
            Call::Op if me == a => {
                fabric.send(peer, Message { values: values.clone(), ..Message::new(1) });
                fabric.recv(peer);
            }
            Call::Op => {
                let back = fabric.recv(peer);
                fabric.send(peer, back);
            }
        }) / 2.0;
        progress(bytes, s);
        out.push((bytes as f64, s));
    }
    out
}

/// [`all_reduce_sweep`] on an in-process group of `world` threads (rank 0's times).
pub fn local_all_reduce(world: usize, sizes: &[usize], progress: &mut (dyn FnMut(usize, f64) + Send)) -> Sweep {
    std::thread::scope(|s| {
        let mut comms = LocalGroup::new(world).into_iter();
        let mut first = comms.next().expect("world >= 1");
        let others: Vec<_> =
            comms.map(|mut c| s.spawn(move || all_reduce_sweep(&mut c, sizes, &mut |_, _| {}))).collect();
        let sweep = all_reduce_sweep(&mut first, sizes, progress);
        others.into_iter().for_each(|h| drop(h.join().expect("sweep thread")));
        sweep
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::LocalFabric;

    #[test]
    fn sizes_go_by_four_from_4_bytes() {
        assert_eq!(sizes(1024), vec![4, 16, 64, 256, 1024]);
        assert_eq!(sizes(1000), vec![4, 16, 64, 256]);
        assert_eq!(sizes(0), vec![4, 16]);
        assert_eq!(sizes(64 << 20).len(), 13);
    }

    #[test]
    fn local_sweeps_report_one_positive_time_per_size() {
        let sz = sizes(4096);
        let mut seen = Vec::new();
        let sweep = local_all_reduce(2, &sz, &mut |b, s| seen.push((b, s)));
        assert_eq!(sweep.iter().map(|p| p.0 as usize).collect::<Vec<_>>(), sz);
        assert!(sweep.iter().all(|p| p.1 > 0.0 && p.1.is_finite()), "{sweep:?}");
        assert_eq!(seen.len(), sz.len());
        // Ping-pong between two threads of an in-process job.
        let pp = std::thread::scope(|s| {
            let hs: Vec<_> = LocalFabric::job(2)
                .into_iter()
                .map(|mut f| {
                    let sz = &sz;
                    s.spawn(move || ping_pong(&mut f, (0, 1), sz, &mut |_, _| {}))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).next().unwrap()
        });
        assert!(pp.len() == sz.len() && pp.iter().all(|p| p.1 > 0.0), "{pp:?}");
    }
}

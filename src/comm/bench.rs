//! Throughput of the shared-memory all-reduce against a plain memcpy of the
//! same size, for `lowcomm bench` ("all-reduce of 64 MiB on 2 and 4 workers
//! vs memcpy"). Both move about 2 bytes of memory per byte of payload (a
//! read and a write), so the ratio says how close the collective gets to
//! the memory system's limit.

use super::{Communicator, LocalGroup, ReduceOp, WireDtype};
use std::time::Instant;

/// Writes every element so the pages are faulted in before timing
/// (first-touch faults cost ~10x a copy on these VMs).
fn warm(buf: &mut [f32], v: f32) {
    buf.iter_mut().for_each(|x| *x = v);
}

/// All-reduce (f32 wire, Mean) of `mib` MiB per rank on `world` threads,
/// `iters` timed iterations after one warm-up. Returns `(all-reduce GB/s,
/// memcpy GB/s)`: bytes of data reduced per rank per second (10^9), and a
/// single-threaded `copy_from_slice` between two buffers of the same size.
pub fn bench_all_reduce(world: usize, mib: usize, iters: usize) -> (f64, f64) {
    assert!(world >= 1 && mib >= 1 && iters >= 1, "bench_all_reduce: world, mib, iters must be >= 1");
    let n = mib * (1 << 20) / 4;
    let bytes = (n * 4) as f64;
    let times = std::thread::scope(|s| {
        let hs: Vec<_> = LocalGroup::new(world)
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    let mut buf = vec![0f32; n];
                    warm(&mut buf, c.rank() as f32);
                    c.all_reduce(&mut buf, ReduceOp::Mean, WireDtype::F32); // warm-up
                    c.barrier();
                    let t = Instant::now();
                    for _ in 0..iters {
                        // Mean keeps values bounded over iterations.
                        c.all_reduce(&mut buf, ReduceOp::Mean, WireDtype::F32);
                    }
                    t.elapsed().as_secs_f64()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    // The slowest rank decides when the collective is done.
    let ar_s = times.iter().cloned().fold(0.0, f64::max);
    let mut src = vec![0f32; n];
    let mut dst = vec![0f32; n];
    warm(&mut src, 1.0);
    warm(&mut dst, 2.0);
    dst.copy_from_slice(&src); // warm-up
    let t = Instant::now();
    for i in 0..iters {
        src[i % n] = i as f32; // keep the copies observable
        dst.copy_from_slice(&src);
    }
    let cp_s = t.elapsed().as_secs_f64();
    std::hint::black_box(&dst);
    (bytes * iters as f64 / ar_s / 1e9, bytes * iters as f64 / cp_s / 1e9)
}

/// Seconds per call of all-reduce, reduce-scatter and all-gather (in that
/// order) on `comm`, each moving `mib` MiB per rank (all-reduce's buffer,
/// reduce-scatter's input, all-gather's output), mean of `iters` calls after
/// one warm-up. Every rank of the group must call it.
pub fn time_collectives(comm: &mut dyn Communicator, mib: usize, iters: usize) -> [f64; 3] {
    let p = comm.world();
    let n = mib * (1 << 20) / 4 / p * p;
    let mut big = vec![0f32; n];
    let mut small = vec![0f32; n / p];
    warm(&mut big, comm.rank() as f32);
    warm(&mut small, 1.0);
    let mut out = [0.0; 3];
    for (k, slot) in out.iter_mut().enumerate() {
        let mut op = |c: &mut dyn Communicator| match k {
            // Mean keeps values bounded over iterations.
            0 => c.all_reduce(&mut big, ReduceOp::Mean, WireDtype::F32),
            1 => c.reduce_scatter(&big, &mut small, ReduceOp::Mean, WireDtype::F32),
            _ => c.all_gather(&small, &mut big, WireDtype::F32),
        };
        op(comm);
        comm.barrier();
        let t = Instant::now();
        for _ in 0..iters {
            op(comm);
        }
        // The slowest rank decides when a collective is done.
        comm.barrier();
        *slot = t.elapsed().as_secs_f64() / iters as f64;
    }
    out
}

/// [`time_collectives`] on an in-process group of `world` threads (rank 0's times).
pub fn time_collectives_local(world: usize, mib: usize, iters: usize) -> [f64; 3] {
    std::thread::scope(|s| {
        let hs: Vec<_> = LocalGroup::new(world)
            .into_iter()
            .map(|mut c| s.spawn(move || time_collectives(&mut c, mib, iters)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).next().expect("world >= 1")
    })
}

/// Names of [`time_collectives`]' results, in order.
pub const COLLECTIVES: [&str; 3] = ["all_reduce", "reduce_scatter", "all_gather"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_collectives_reports_positive_times_on_two_workers() {
        let t = time_collectives_local(2, 1, 2);
        assert!(t.iter().all(|s| *s > 0.0 && s.is_finite()), "{t:?}");
    }

    #[test]
    fn bench_all_reduce_runs_and_reports_positive_rates() {
        let (ar, cp) = bench_all_reduce(2, 1, 2);
        assert!(ar > 0.0 && cp > 0.0 && ar.is_finite() && cp.is_finite());
    }

    /// `cargo test --lib comm::bench -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_all_reduce_64mib_report() {
        for w in [2, 4] {
            let (ar, cp) = bench_all_reduce(w, 64, 10);
            println!("all-reduce 64 MiB on {w} workers: {ar:.2} GB/s; memcpy {cp:.2} GB/s; ratio {:.2}", ar / cp);
        }
    }
}

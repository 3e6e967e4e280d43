//! Tests of the shared-memory backend against an f64 reference.
//!
//! Tolerance, with A = sum over ranks of |x_q| for one element (divided by p
//! for Mean) and u32 = 2^-24 the f32 unit roundoff:
//! - f32 wire: recursive summation of p terms errs by at most (p-1) u32 A,
//!   Mean's division adds u32 |result|: tol = (p+1) u32 A.
//! - bf16 wire: each contribution is rounded (<= 2^-8 |x_q|, bf16's unit
//!   roundoff), summed in f32 as above, and the result rounded again
//!   (<= 2^-8 |result| <= 2^-8 A (1 + 2^-8)): tol = (2^-7 * 1.01 + (p+1) u32) A.

use super::*;
use crate::comm::{padded_len, Fabric, Message};
use std::time::Duration;

const SIZES: [usize; 3] = [1, 7, 1001];
const WIRES: [WireDtype; 2] = [WireDtype::F32, WireDtype::Bf16];

use crate::comm::conformance::value as val;

fn input(rank: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| val(rank, i)).collect()
}

/// Runs `f` on one thread per communicator; results in rank order.
pub(super) fn run<C: Send, R: Send>(comms: Vec<C>, f: impl Fn(&mut C) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = comms.into_iter().map(|mut c| s.spawn(move || f(&mut c))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Checks `got` against the f64 reduction of element `i` over `p` ranks.
fn check_reduced(got: f32, i: usize, p: usize, op: ReduceOp, wire: WireDtype, what: &str) {
    let exact: f64 = (0..p).map(|q| val(q, i) as f64).sum();
    let mut a: f64 = (0..p).map(|q| (val(q, i) as f64).abs()).sum();
    let exact = if op == ReduceOp::Mean {
        a /= p as f64;
        exact / p as f64
    } else {
        exact
    };
    let u = 2f64.powi(-24);
    let rel = match wire {
        WireDtype::F32 => (p + 1) as f64 * u,
        WireDtype::Bf16 => 2f64.powi(-7) * 1.01 + (p + 1) as f64 * u,
    };
    let tol = rel * a + 1e-30;
    assert!(
        (got as f64 - exact).abs() <= tol,
        "{what}: p={p} {op:?} {wire:?} i={i}: got {got}, exact {exact}, tol {tol}"
    );
}

fn all_same(results: &[Vec<f32>]) -> bool {
    results.iter().all(|r| r.iter().map(|x| x.to_bits()).eq(results[0].iter().map(|x| x.to_bits())))
}

#[test]
fn all_reduce_matches_reference_worlds_1_to_8_sizes_and_wires() {
    for wire in WIRES {
        for p in 1..=8 {
            for n in SIZES {
                for op in [ReduceOp::Sum, ReduceOp::Mean] {
                    let res = run(LocalGroup::new(p), |c| {
                        let mut b = input(c.rank(), n);
                        c.all_reduce(&mut b, op, wire);
                        b
                    });
                    assert!(all_same(&res), "ranks differ: p={p} n={n} {wire:?}");
                    for (i, &g) in res[0].iter().enumerate() {
                        check_reduced(g, i, p, op, wire, "all_reduce");
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_gives_rank_r_chunk_r() {
    for wire in WIRES {
        for p in 1..=8 {
            for m in SIZES {
                let res = run(LocalGroup::new(p), |c| {
                    let mut out = vec![0.0; m];
                    c.reduce_scatter(&input(c.rank(), p * m), &mut out, ReduceOp::Sum, wire);
                    out
                });
                for (r, out) in res.iter().enumerate() {
                    for (j, &g) in out.iter().enumerate() {
                        check_reduced(g, r * m + j, p, ReduceOp::Sum, wire, "reduce_scatter");
                    }
                }
            }
        }
    }
}

#[test]
fn all_gather_concatenates_rounded_inputs() {
    for wire in WIRES {
        for p in 1..=8 {
            for m in SIZES {
                let res = run(LocalGroup::new(p), |c| {
                    let mut out = vec![f32::NAN; p * m];
                    c.all_gather(&input(c.rank(), m), &mut out, wire);
                    out
                });
                assert!(all_same(&res));
                let want: Vec<f32> = (0..p).flat_map(|q| input(q, m)).map(|x| wire.round(x)).collect();
                assert_eq!(res[0], want, "p={p} m={m} {wire:?}");
            }
        }
    }
}

#[test]
fn broadcast_from_every_root() {
    for wire in WIRES {
        for p in 1..=8 {
            for root in 0..p {
                let res = run(LocalGroup::new(p), |c| {
                    let mut b = input(c.rank(), 7);
                    c.broadcast(&mut b, root, wire);
                    b
                });
                let want: Vec<f32> = input(root, 7).iter().map(|&x| wire.round(x)).collect();
                assert!(res.iter().all(|r| *r == want), "p={p} root={root} {wire:?}");
            }
        }
    }
}

#[test]
fn padded_reduce_scatter_then_all_gather_equals_all_reduce() {
    // The ZeRO-1 pattern on an odd length: pad to a multiple of world.
    for wire in WIRES {
        for p in 1..=8 {
            let n = 1001;
            let res = run(LocalGroup::new(p), |c| {
                let mut full = input(c.rank(), n);
                full.resize(padded_len(n, p), 0.0);
                let mut shard = vec![0.0; full.len() / p];
                c.reduce_scatter(&full, &mut shard, ReduceOp::Mean, wire);
                c.all_gather(&shard, &mut full, wire);
                let mut ar = input(c.rank(), n);
                c.all_reduce(&mut ar, ReduceOp::Mean, wire);
                (full, ar)
            });
            for (full, ar) in res {
                // Same per-element summation order, rounding is idempotent.
                assert_eq!(&full[..n], &ar[..], "p={p} {wire:?}");
                assert!(full[n..].iter().all(|&x| x == 0.0));
            }
        }
    }
}

#[test]
fn mean_is_sum_over_world() {
    for wire in WIRES {
        for p in 1..=8 {
            let res = run(LocalGroup::new(p), |c| {
                let (mut s, mut m) = (input(c.rank(), 1001), input(c.rank(), 1001));
                c.all_reduce(&mut s, ReduceOp::Sum, wire);
                c.all_reduce(&mut m, ReduceOp::Mean, wire);
                (s, m)
            });
            let (s, m) = &res[0];
            for (&s, &m) in s.iter().zip(m) {
                let want = s / p as f32;
                match wire {
                    WireDtype::F32 => assert_eq!(m.to_bits(), want.to_bits()),
                    // Both sides carry one bf16 rounding of the same f32 sum.
                    WireDtype::Bf16 => assert!((m - want).abs() <= 2f32.powi(-7) * want.abs()),
                }
            }
        }
    }
}

#[test]
fn results_bitwise_identical_across_runs() {
    for wire in WIRES {
        let once = || {
            run(LocalGroup::new(5), |c| {
                let mut b = input(c.rank(), 100_003);
                for k in 0..3 {
                    b.iter_mut().enumerate().for_each(|(i, x)| *x += val(c.rank(), i + k));
                    c.all_reduce(&mut b, ReduceOp::Mean, wire);
                }
                b
            })
        };
        let (a, b) = (once(), once());
        assert!(all_same(&a));
        assert!(a[0].iter().zip(&b[0]).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn byte_counters_match_ring_convention() {
    let res = run(LocalGroup::new(4), |c| {
        let mut b = vec![1.0; 1000];
        c.all_reduce(&mut b, ReduceOp::Sum, WireDtype::F32); // 2*3/4*4000 = 6000
        let mut out = vec![0.0; 250];
        c.reduce_scatter(&b, &mut out, ReduceOp::Sum, WireDtype::F32); // 3*250*4 = 3000
        c.all_gather(&out, &mut b, WireDtype::F32); // 3000
        c.barrier();
        c.broadcast(&mut b, 2, WireDtype::F32); // chain 2->3->0->1: 4000 each, rank 1 sends 0
        c.stats()
    });
    assert_eq!(res[0], CommStats { bytes_sent: 16_000, bytes_received: 16_000, ops: 5 });
    assert_eq!(res[1], CommStats { bytes_sent: 12_000, bytes_received: 16_000, ops: 5 });
    assert_eq!(res[2], CommStats { bytes_sent: 16_000, bytes_received: 12_000, ops: 5 });
    let bf = run(LocalGroup::new(2), |c| {
        c.all_reduce(&mut [0.0; 1000], ReduceOp::Sum, WireDtype::Bf16); // 2*1/2*2000 = 2000
        let mut out = [0u8; 60];
        c.all_gather_bytes(&[7u8; 30], &mut out); // (2-1)*30 = 30
        assert_eq!(out, [7u8; 60]);
        c.stats()
    });
    assert_eq!(bf[1].bytes_sent, 2030);
}

#[test]
fn length_mismatch_panics_on_every_rank() {
    let comms = LocalGroup::new(3);
    let outcomes = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| s.spawn(move || c.all_reduce(&mut vec![0.0; 5 + c.rank()], ReduceOp::Sum, WireDtype::F32)))
            .collect();
        hs.into_iter().map(|h| h.join().is_err()).collect::<Vec<_>>()
    });
    assert_eq!(outcomes, vec![true; 3]);
}

#[test]
fn panicking_rank_makes_others_panic_instead_of_hanging() {
    let comms = LocalGroup::new(3);
    let msgs = std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|mut c| {
                s.spawn(move || {
                    if c.rank() == 1 {
                        panic!("worker 1 failed");
                    }
                    c.all_reduce(&mut [1.0; 4], ReduceOp::Sum, WireDtype::F32);
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().err().map(|e| crate::comm::stranded::panic_text(&*e))).collect::<Vec<_>>()
    });
    for r in [0, 2] {
        let m = msgs[r].as_deref().expect("rank should have panicked with a message");
        assert!(m.contains("rank 1 panicked"), "{m}");
    }
}

#[test]
fn conformance_suite_passes_on_every_world() {
    for p in 1..=5 {
        for res in run(LocalGroup::new(p), |c| crate::comm::conformance::check(c)) {
            assert!(res.unwrap() > 0);
        }
    }
}

#[test]
fn fabric_conformance_passes_on_every_job_size() {
    // Groups made on first use, messages in order with bf16 rounding only
    // the values, receive-any with a deadline.
    for p in 1..=5 {
        for res in run(LocalFabric::job(p), |f| crate::comm::conformance::check_fabric(f)) {
            assert!(res.unwrap() > 0, "p={p}");
        }
    }
}

#[test]
fn fabric_groups_of_the_same_members_are_one_group() {
    // Two participants asking for [0, 2] meet in the same group; 1 is not in it.
    let res = run(LocalFabric::job(3), |f| {
        if f.rank() == 1 {
            return vec![];
        }
        let me = f.rank() as f32;
        let g = f.group(&[0, 2]);
        let mut b = vec![me];
        let g_rank = g.rank();
        g.all_reduce(&mut b, ReduceOp::Sum, WireDtype::F32);
        vec![b[0], g_rank as f32]
    });
    assert_eq!(res, vec![vec![2.0, 0.0], vec![], vec![2.0, 1.0]]);
}

#[test]
fn receiver_of_a_participant_that_ended_panics_instead_of_hanging() {
    let msgs = std::thread::scope(|s| {
        let hs: Vec<_> = LocalFabric::job(2)
            .into_iter()
            .map(|mut f| {
                s.spawn(move || {
                    if f.rank() == 0 {
                        f.send(1, Message::new(1));
                        return; // ends: its fabric is dropped
                    }
                    assert_eq!(f.recv(0).tag, 1, "what was sent before it ended still arrives");
                    f.recv(0);
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().err().map(|e| crate::comm::stranded::panic_text(&*e))).collect::<Vec<_>>()
    });
    assert!(msgs[0].is_none());
    assert!(msgs[1].as_deref().is_some_and(|m| m.contains("from participant 0, which ended")), "{msgs:?}");
}

#[test]
fn a_failed_participant_wakes_every_receiver_whomever_it_waits_for() {
    // 0 waits for 2, 2 waits for anyone (up to a minute): without the
    // notice from 1, 2 would wait out its deadline and 0 with it.
    let t0 = std::time::Instant::now();
    let msgs = std::thread::scope(|s| {
        let hs: Vec<_> = LocalFabric::job(3)
            .into_iter()
            .map(|mut f| {
                s.spawn(move || match f.rank() {
                    0 => drop(f.recv(2)),
                    1 => {
                        std::thread::sleep(Duration::from_millis(50)); // the others are waiting by now
                        f.failure_notice()();
                    }
                    _ => drop(f.recv_any(Some(Duration::from_secs(60)))),
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().err().map(|e| crate::comm::stranded::panic_text(&*e))).collect::<Vec<_>>()
    });
    assert!(msgs[1].is_none(), "{msgs:?}");
    for p in [0, 2] {
        let m = msgs[p].as_deref().unwrap_or_default();
        assert!(
            m.contains(&format!("participant {p} stops waiting")) && m.contains("participant 1 failed"),
            "{msgs:?}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(30), "the receivers waited {:?}", t0.elapsed());
}

#[test]
fn messages_sent_before_a_failure_are_still_delivered() {
    let mut fabrics = LocalFabric::job(2);
    fabrics[0].send(1, Message::new(7));
    fabrics[0].failure_notice()();
    assert_eq!(fabrics[1].recv(0).tag, 7);
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fabrics[1].recv_any(None))).unwrap_err();
    assert!(crate::comm::stranded::panic_text(&*e).contains("participant 0 failed"));
}

#[test]
fn conformance_suite_catches_a_backend_that_sums_in_another_order() {
    // Reversed rank order changes the last bits of some sums: the exact
    // recipe check must notice (this is what makes "same bits" testable).
    fn reversed(c: &mut LocalComm, buf: &mut [f32], op: ReduceOp, wire: WireDtype) {
        let (p, n) = (c.world(), buf.len());
        let mut all = vec![0.0; p * n];
        c.all_gather(buf, &mut all, wire);
        for (i, x) in buf.iter_mut().enumerate() {
            // Ranks p-1 down to 0, the first term assigned.
            *x = all[(p - 1) * n + i];
            for q in (0..p - 1).rev() {
                *x += all[q * n + i];
            }
            if op == ReduceOp::Mean {
                *x /= p as f32;
            }
        }
    }
    let comms: Vec<_> = LocalGroup::new(3).into_iter().map(|m| super::AllReduceBy(m, reversed)).collect();
    let res = run(comms, |c| crate::comm::conformance::check(c));
    let err = res[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("all_reduce") && err.contains("rank-order recipe"), "{err}");
}

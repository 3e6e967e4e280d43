//! The math of the simulator's collectives (comm.rs): once every member
//! has joined, the last one computes every member's result with the
//! in-process backend's element recipe, so sim and real agree bit for bit.

use super::state::{Data, What};
use crate::comm::{ReduceOp, WireDtype};
use crate::runtime::tasks::Kind;
use std::rc::Rc;

/// The math of a collective every member has joined: per member results,
/// with the in-process backend's element recipe. Results every member
/// shares are computed once; buffers come from and go back to the pool.
pub(super) fn execute(what: What, data: Vec<Data>, p: usize, pool: &mut Vec<Vec<f32>>) -> Vec<Data> {
    let mut buf = |n: usize| {
        let mut v = pool.pop().unwrap_or_default();
        v.clear();
        v.resize(n, 0.0);
        v
    };
    let shared = |d: Data| (0..p).map(|_| d.share()).collect::<Vec<_>>();
    match what {
        What::Bytes => {
            let all: Vec<u8> = data.iter().flat_map(|d| d.bytes().iter().copied()).collect();
            shared(Data::SharedBytes(Rc::new(all)))
        }
        What::Dense { kind, op, wire, root } => {
            let srcs: Vec<&[f32]> = data.iter().map(|d| d.dense()).collect();
            let n = srcs[0].len();
            let out = match kind {
                Kind::AllReduce => {
                    let mut acc = buf(n);
                    reduce(&mut acc, &srcs, 0, op, wire);
                    shared(Data::Shared(Rc::new(acc)))
                }
                Kind::ReduceScatter => (0..p)
                    .map(|r| {
                        let mut acc = buf(n / p);
                        reduce(&mut acc, &srcs, r * (n / p), op, wire);
                        Data::Dense(acc)
                    })
                    .collect(),
                Kind::AllGather => {
                    let mut all = buf(n * p);
                    for (chunk, s) in all.chunks_mut(n.max(1)).zip(&srcs) {
                        chunk.iter_mut().zip(s.iter()).for_each(|(a, &x)| *a = wire.round(x));
                    }
                    shared(Data::Shared(Rc::new(all)))
                }
                Kind::Broadcast => {
                    let mut b = buf(n);
                    b.iter_mut().zip(srcs[root]).for_each(|(a, &x)| *a = wire.round(x));
                    shared(Data::Shared(Rc::new(b)))
                }
            };
            drop(srcs);
            for d in data {
                if let Data::Dense(v) = d {
                    pool.push(v);
                }
            }
            out
        }
    }
}

/// `acc[i] = finish(sum_q round(src_q[off + i]))`, ranks in order 0..p: the
/// local backend's element recipe, so sim and real agree bit for bit.
fn reduce(acc: &mut [f32], srcs: &[&[f32]], off: usize, op: ReduceOp, wire: WireDtype) {
    for (q, s) in srcs.iter().enumerate() {
        let s = &s[off..off + acc.len()];
        if q == 0 {
            acc.iter_mut().zip(s).for_each(|(a, &x)| *a = wire.round(x));
        } else {
            acc.iter_mut().zip(s).for_each(|(a, &x)| *a += wire.round(x));
        }
    }
    let p = srcs.len() as f32;
    for a in acc.iter_mut() {
        if op == ReduceOp::Mean {
            *a /= p;
        }
        *a = wire.round(*a);
    }
}

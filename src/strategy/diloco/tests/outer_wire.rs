//! DiLoCo with a compressed pseudo-gradient (`outer_wire`, comm/codec):
//! f32 through the codec path is DiLoCo bit for bit, replicas stay equal
//! under every codec, and the bytes that travel are the codec's.

use super::run;
use crate::comm::codec::OuterWire;
use crate::runtime::real::RealSpec;
use crate::strategy::tests::{bits, plan, sim, tiny};
use crate::strategy::*;

fn with_wire(wire: &str, error_feedback: bool) -> Method {
    let outer_wire = Some(wire.parse::<OuterWire>().unwrap());
    Method::Diloco(DilocoSettings { h: 2, outer_wire, error_feedback, ..DilocoSettings::default() })
}

#[test]
fn an_f32_outer_wire_is_diloco_bit_for_bit_on_sim_and_real() {
    // Encode, all-gather, decode and sum in rank order, divide: the
    // all-reduce's own recipe, so the bits cannot move.
    let p = plan(5, 1, 1.0);
    let plain = Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() });
    for rt in [sim(3), Runtime::Real(RealSpec::flat(3))] {
        let a = run(&plain, &rt, 3, &p);
        let b = run(&with_wire("f32", true), &rt, 3, &p);
        assert_eq!(bits(&a[0].params), bits(&b[0].params));
        assert_eq!(bits(&a[2].params), bits(&b[2].params));
    }
}

#[test]
fn every_codec_keeps_replicas_equal_and_sends_its_own_bytes() {
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let p = plan(4, 1, 1.0);
    let plain = run(&Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() }), &sim(2), 2, &p);
    for (wire, ef) in [("bf16", false), ("int8", true), ("fp4", true), ("topk:16+2bit", true), ("topk:16+2bit", false)]
    {
        let m = with_wire(wire, ef);
        let r = run(&m, &sim(2), 2, &p);
        assert_eq!(bits(&r[0].params), bits(&r[1].params), "{m}: replicas differ");
        assert_ne!(bits(&r[0].params), bits(&plain[0].params), "{m}: compression changed nothing");
        // Two rounds, each worker's message once per round.
        let sent: u64 = r[0].events.spans().iter().filter(|s| s.name == "all_gather_bytes").map(|s| s.bytes).sum();
        let codec: OuterWire = wire.parse().unwrap();
        assert_eq!(sent, 2 * codec.wire_bytes(n) as u64, "{m}");
    }
}

#[test]
fn error_feedback_costs_its_residual_in_memory() {
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let p = plan(2, 1, 0.0);
    let outer = |m: Method| run(&m, &sim(2), 2, &p)[0].memory.outer;
    let plain = outer(Method::Diloco(DilocoSettings { h: 2, ..DilocoSettings::default() }));
    // The message staged and a decode buffer; with feedback the residual too.
    assert_eq!(outer(with_wire("int8", false)), plain + 2 * 4 * n);
    assert_eq!(outer(with_wire("int8", true)), plain + 3 * 4 * n);
}

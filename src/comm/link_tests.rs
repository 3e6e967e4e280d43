//! Tests of the alpha-beta link model (link.rs): link specs, the ring formulas by hand, routes and messages.

use super::*;

fn tier(bw: f64, lat: f64) -> Tier {
    Tier::line(lat, bw)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
}

/// Parses `s` and compares with `(bandwidth, latency)` up to decimal rounding.
fn parses_to(s: &str, bw: f64, lat: f64) {
    let t: Tier = s.parse().unwrap();
    assert!(close(t.bandwidth_bytes_per_s, bw) && close(t.latency_s, lat), "{s}: {t:?}");
}

#[test]
fn link_parses_documented_examples() {
    parses_to("1gbit,50us", 1.25e8, 50e-6);
    parses_to("100mbit,1ms", 1.25e7, 1e-3);
    parses_to("10gbit", 1.25e9, 0.0);
    parses_to("25GB/s,2us", 2.5e10, 2e-6);
    parses_to(" 80Gbit/s , 0.5ms ", 1e10, 5e-4);
}

#[test]
fn link_errors_name_the_problem_and_an_example() {
    let e = |s: &str| s.parse::<Tier>().unwrap_err().to_string();
    assert_eq!(
        e("1gbt,50us"),
        "cannot parse link \"1gbt,50us\": unknown bandwidth unit \"gbt\"; expected e.g. 1gbit,50us or 25GB/s,2us"
    );
    assert!(e("0gbit").contains("bandwidth must be positive"));
    assert!(e("-1gbit").contains("bandwidth must be positive"));
    assert!(e("10").contains("has no unit"));
    assert!(e("1gbit,50").contains("latency \"50\" has no unit"));
    assert!(e("1gbit,5xs").contains("unknown latency unit \"xs\""));
    assert!(e("1gbit,-5us").contains("latency must be >= 0"));
    assert!(e("fast").contains("does not start with a number"));
    assert!(e("1gbit,1us,2").contains("more than one comma"));
    assert!(e("1gb").contains("unknown bandwidth unit \"gb\""));
}

#[test]
fn ring_formulas_by_hand() {
    // 2 workers, 1 MB at 1 GB/s, no latency: 2 * (1/2) * 1e6 / 1e9 = 1 ms.
    let flat = LinkModel::flat(tier(1e9, 0.0));
    assert!(close(flat.all_reduce_s(250_000, 4, 2), 1e-3));
    // 4 workers, 10 us: reduce-scatter 3*10us + 3/4 * 1 ms = 0.78 ms.
    let lat = LinkModel::flat(tier(1e9, 10e-6));
    assert!(close(lat.reduce_scatter_s(250_000, 4, 4), 0.78e-3));
    assert!(close(lat.all_gather_s(500_000, 2, 4), 0.78e-3));
    // all-reduce: 6*10us + 2*3/4 ms = 1.56 ms; broadcast: 3*10us + 1 ms.
    assert!(close(lat.all_reduce_s(250_000, 4, 4), 1.56e-3));
    assert!(close(lat.broadcast_s(250_000, 4, 4), 1.03e-3));
    // One worker communicates nothing.
    for f in [LinkModel::all_reduce_s, LinkModel::reduce_scatter_s, LinkModel::broadcast_s] {
        assert_eq!(f(&lat, 1000, 4, 1), 0.0);
    }
}

#[test]
fn group_routes_and_messages_by_hand() {
    // 2 nodes x 4, intra 10 GB/s, inter 1 GB/s, 1 us / 100 us latency, 1 MB.
    let two = LinkModel { intra: tier(1e10, 1e-6), inter: Some(tier(1e9, 100e-6)), workers_per_node: 4 };
    // Inside a node of 4: 6 us + 2*3/4 * 1e6/1e10 = 156 us.
    assert!(close(two.collective_s(Op::AllReduce, 250_000, 4, Route::Node(4)), 156e-6));
    // A replication group across 2 nodes, 4 of them sharing each node's
    // link: 2*100 us + 2*(1/2) * 1e6 / (1e9/4) = 4.2 ms.
    assert!(close(two.collective_s(Op::AllReduce, 250_000, 4, Route::Across { p: 2, share: 4 }), 4.2e-3));
    // Alone on the link: 200 us + 1 ms.
    assert!(close(two.collective_s(Op::AllReduce, 250_000, 4, Route::Across { p: 2, share: 1 }), 1.2e-3));
    // World is the hierarchical formula.
    assert_eq!(two.collective_s(Op::ReduceScatter, 250_000, 4, Route::World(8)), two.reduce_scatter_s(250_000, 4, 8));
    // A message: 1 MB between nodes 100 us + 1 ms; within a node 1 us + 0.1 ms.
    assert!(close(two.message_s(1_000_000, false), 1.1e-3));
    assert!(close(two.message_s(1_000_000, true), 101e-6));
    // A flat model has one tier for everything.
    let flat = LinkModel::flat(tier(1e9, 0.0));
    assert!(close(flat.message_s(1_000_000, false), 1e-3));
}

#[test]
fn hierarchical_formulas_by_hand() {
    // 2 nodes x 4, intra 10 GB/s, inter 1 GB/s per node, no latency, 1 MB:
    // intra RS 3/4 * 1e6/1e10 = 75 us; inter: 4 rings of 250 kB share the
    // node's NIC, so 1 MB crosses it: 2*(1/2)*1e6/1e9 = 1000 us; intra AG
    // 75 us: 1150 us in all, against 2*7/8 * 1 ms = 1.75 ms flat at 1 GB/s.
    let two = LinkModel { intra: tier(1e10, 0.0), inter: Some(tier(1e9, 0.0)), workers_per_node: 4 };
    assert!(close(two.all_reduce_s(250_000, 4, 8), 1150e-6));
    assert!(close(LinkModel::flat(tier(1e9, 0.0)).all_reduce_s(250_000, 4, 8), 1.75e-3));
    // RS: 75 us + (1/2) * 1 MB / 1 GB/s = 575 us.
    assert!(close(two.reduce_scatter_s(250_000, 4, 8), 575e-6));
    // Broadcast: 1 ms across nodes + 0.1 ms inside.
    assert!(close(two.broadcast_s(250_000, 4, 8), 1.1e-3));
    // Within one node only the intra tier is used.
    assert!(close(two.all_reduce_s(250_000, 4, 4), 2.0 * 0.75 * 1e-4));
}

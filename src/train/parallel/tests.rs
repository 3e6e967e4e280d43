use super::*;

#[test]
fn nodes_split_the_workers_or_say_how() {
    let model = GptConfig::nano();
    let p = |nodes, rt: &str| ParallelSection {
        workers: Some(4),
        nodes: Some(nodes),
        runtime: rt.into(),
        ..ParallelSection::default()
    };
    let e = runtime(&p(3, "sim"), &model, 1000, 64).err().unwrap().to_string();
    assert_eq!(
        e,
        "--nodes 3 does not divide --workers 4: every node holds the same number of workers, e.g. --workers 6 --nodes 3"
    );
    assert!(runtime(&p(0, "real"), &model, 1000, 64).err().unwrap().to_string().contains("--nodes 2"));
    for rt in ["sim", "real"] {
        let (_, r) = runtime(&p(2, rt), &model, 1000, 64).unwrap();
        assert_eq!(topology(&r), Topology { workers: 4, per_node: 2, server: false });
    }
}

#[test]
fn a_link_with_a_slash_gives_the_inside_and_between_node_tiers() {
    let model = GptConfig::nano();
    let p = |nodes, link: &str| ParallelSection {
        workers: Some(4),
        nodes,
        runtime: "sim".into(),
        link: Some(link.into()),
        ..ParallelSection::default()
    };
    let link = |r: Runtime| match r {
        Runtime::Sim(s) => s.link.unwrap(),
        Runtime::Real(_) => unreachable!(),
    };
    let two = link(runtime(&p(Some(2), "25gbit,5us/1gbit,10ms"), &model, 1000, 64).unwrap().1);
    let (intra, inter) = (two.intra, two.inter.unwrap());
    // Each tier as `Tier`'s own parser reads it (5us parses to 4.9999999999999996e-6).
    assert_eq!((intra, inter, two.workers_per_node), ("25gbit,5us".parse().unwrap(), "1gbit,10ms".parse().unwrap(), 2));
    assert!(inter.latency_s > intra.latency_s && inter.bandwidth_bytes_per_s < intra.bandwidth_bytes_per_s);
    let flat = link(runtime(&p(Some(2), "1gbit,10ms"), &model, 1000, 64).unwrap().1);
    assert_eq!(flat.inter, None);
    let e = runtime(&p(None, "25gbit,5us/1gbit,10ms"), &model, 1000, 64).err().unwrap().to_string();
    assert!(e.contains("every worker is on one node: add --nodes N") && e.contains("--link 1gbit,10ms"), "{e}");
    let e = runtime(&p(Some(2), "25gbit,5us/fast"), &model, 1000, 64).err().unwrap().to_string();
    assert!(e.starts_with("parallel.link (--link):"), "{e}");
}

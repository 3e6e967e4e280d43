use super::super::compute::ComputeCosts;
use super::super::{fit, Options};
use super::*;
use crate::model::GptConfig;
use crate::runtime::cluster::ClusterProfile;

#[test]
fn utc_dates_by_hand() {
    // The format only; 2026 or later.
    let now = utc_now();
    assert!(now.ends_with(" UTC") && now.len() == 20 && now[..4].parse::<u32>().unwrap() >= 2026, "{now}");
}

/// A calibration from hand-made numbers: 2 workers, 10 ms micro-batches,
/// AdamW 1 ms over 1000 parameters, a 2-member all-reduce of
/// 10 us + B / 1 GB/s, and an inter tier as given.
fn hand(nodes: usize) -> Calibration {
    let model = GptConfig::nano();
    let mut compute = ComputeCosts {
        params: 1000,
        adamw: Samples(vec![1e-3]),
        adamw_back_to_back: Samples(vec![4e-4]),
        outer: Samples(vec![2e-3]),
        demo: Samples(vec![4e-3]),
        demo_flops: 8e6,
        ..Default::default()
    };
    compute.add_micro_batches(vec![Samples(vec![0.010, 0.011, 0.009])]);
    let sweep: Vec<(f64, f64)> = [4.0, 1024.0, 1048576.0].iter().map(|&b| (b, 10e-6 + b / 1e9)).collect();
    let opts = Options {
        preset: "nano".into(),
        model,
        batch: 16,
        seq: 64,
        workers_per_node: 2,
        nodes,
        repeats: 3,
        warmup: 0,
        max_bytes: 1 << 20,
        intra: None,
        inter: Some("1gbit,50us".into()),
        name: None,
        command: "lowcomm calibrate --out x.toml".into(),
    };
    let m = Measured {
        how: "by hand".into(),
        members: 2,
        all_reduce: (sweep.clone(), fit::fit(&sweep).unwrap()),
        ping_pong: None,
    };
    Calibration {
        opts,
        backend: "threads".into(),
        nodes,
        workers_per_node: 2,
        sharing: 2,
        compute,
        memory_per_worker: Some(8e9),
        intra: TierSource::Measured(m),
        inter: Some(TierSource::Given { spec: "1gbit,50us".into(), why: "given".into() }),
        overlap: None,
    }
}

/// An overlap phase by hand: the all-reduce 0.5 s alone and 0.625 s
/// beside micro-batches; a micro-batch 20 ms beside it (median of three)
/// and 16 ms alone.
fn hand_overlap() -> Overlap {
    Overlap {
        bytes: 4000,
        members: 2,
        comm_alone: Samples(vec![0.5]),
        comm_overlapped: Samples(vec![0.625]),
        comm_chained: Samples(vec![0.5]),
        chained_covered: Samples(vec![0.4]),
        compute_overlapped: Samples(vec![0.019, 0.02, 0.021]),
        compute_alone: Samples(vec![0.016]),
        shared_cores: false,
    }
}

#[test]
fn measured_overlap_factors_reach_the_simulator() {
    let mut c = hand(1);
    c.overlap = Some(hand_overlap());
    let text = render(&c);
    let p = ClusterProfile::from_toml(&text).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
    // 0.625 / 0.5; 20 ms over the 16 ms timed alone beside it, not over
    // the [timing] median of 10 ms (which the profile shows: 2.000).
    let spec = p.sim_spec(&GptConfig::nano(), 1000, 1024, vec![1.0; 2]).unwrap();
    assert_eq!(spec.interference, crate::runtime::sim::Interference { compute: 1.25, comm: 1.25, beside: 1.0 });
    assert!(!text.contains("shared_cores"), "{text}");
    // Ranks on one kernel: one transfer of the two, 1 + 0.25 / 2.
    if let Some(o) = c.overlap.as_mut() {
        o.shared_cores = true;
    }
    let shared = render(&c);
    let p = ClusterProfile::from_toml(&shared).unwrap_or_else(|e| panic!("{e:#}\n{shared}"));
    let spec = p.sim_spec(&GptConfig::nano(), 1000, 1024, vec![1.0; 2]).unwrap();
    assert_eq!(spec.interference, crate::runtime::sim::Interference { compute: 1.25, comm: 1.25, beside: 1.125 });
    assert!(text.contains("minutes away: 2.000"), "{text}");
    assert!(text.contains("while the rank computes"), "{text}");
    // The chained all-reduce is reported, and takes no factor: comm stays 0.625 / 0.5.
    assert!(text.contains("(co2's pattern):\n#   median 500.0000 ms") && text.contains("covered 40%"), "{text}");
    // Without the measurement (one process), no factors are written.
    assert!(!render(&hand(1)).contains("overlap_"));
}

#[test]
fn the_profile_parses_and_gives_back_the_measured_numbers() {
    let text = render(&hand(2));
    let p = ClusterProfile::from_toml(&text).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
    assert_eq!((p.nodes, p.workers_per_node, p.workers()), (2, 2, 4));
    let nano = GptConfig::nano();
    // The micro-batch's mean back through the FLOP model, for the model measured.
    let mb = p.micro_batch_s(&nano, 1).unwrap();
    assert!((mb - 0.010).abs() < 1e-12, "{mb}");
    let d = p.device.clone().unwrap();
    // 28 B x 1000 / 1 ms = 28 MB/s; 8e6 FLOPs / 4 ms = 2 GFLOP/s.
    assert_eq!((d.memory_bandwidth, d.sustained_flops, d.memory), (Some(28e6), Some(2e9), Some(8e9)));
    // 2 members: alpha = a / 2 = 5 us, bw = 1 / b = 1 GB/s.
    let l = p.link_model().unwrap();
    assert!(
        (l.intra.latency_s - 5e-6).abs() < 1e-10 && (l.intra.bandwidth_bytes_per_s / 1e9 - 1.0).abs() < 1e-4,
        "{l:?}"
    );
    assert_eq!(l.inter.unwrap().bandwidth_bytes_per_s, 1e9 / 8.0);
    assert!(text.contains("inter: NOT MEASURED") && text.contains("WITH ALL 2 WORKERS OF A NODE"), "{text}");
    // The kept rate is AdamW's after a micro-batch (1 ms); back to back (0.4 ms) is printed only.
    assert!(text.contains("right after a micro-batch") && text.contains("back to back, caches warm: median 0.4000 ms"));
    // The simulator's cost model reads the rates.
    let spec = p.sim_spec(&nano, 1000, 1024, vec![1.0; 4]).unwrap();
    assert_eq!((spec.memory_bytes_per_s, spec.flops_per_s), (Some(28e6), Some(2e9)));
    // 10, 11, 9 ms: deviations 0, 1, 1 ms from the median, so 1.4826 x 1 ms / 10 ms.
    assert!((spec.micro_batch_cv - 0.14826).abs() < 1e-9, "{}", spec.micro_batch_cv);
}

#[test]
fn a_profile_carries_the_micro_batches_lag_1_correlation_to_the_simulator() {
    // Three micro-batches in a row are too few to measure it: none written, 0 read.
    let c = hand(1);
    let text = render(&c);
    assert!(text.contains("No micro_batch_correlation: too few micro-batches in a row"), "{text}");
    let spec = |t: &str| ClusterProfile::from_toml(t).unwrap().sim_spec(&GptConfig::nano(), 1000, 1024, vec![1.0; 2]);
    assert_eq!(spec(&text).unwrap().micro_batch_correlation, 0.0);
    // The zigzag of correlation.rs's hand test (1, 3, 2, 4, ... ms):
    // raw 0.431, corrected to 0.686 for its 12 samples.
    let mut c = hand(1);
    c.compute
        .add_micro_batches(vec![Samples([1, 3, 2, 4, 3, 5, 4, 6, 5, 7, 6, 8].map(|x| 1e-3 * f64::from(x)).to_vec())]);
    let text = render(&c);
    assert!(text.contains("1 series of consecutive micro-batches (11 pairs), each on its own mean: 0.431"), "{text}");
    assert!((spec(&text).unwrap().micro_batch_correlation - 0.685579).abs() < 1e-6);
}

#[test]
fn a_sweep_that_does_not_fit_is_said_to_in_the_profile() {
    let mut c = hand(1);
    let bad = vec![(4.0, 1e-3), (1024.0, 1e-3), (16384.0, 20e-3), (4194304.0, 21e-3)];
    c.intra = TierSource::Measured(Measured {
        how: "by hand".into(),
        members: 2,
        all_reduce: (bad.clone(), fit::fit(&bad).unwrap()),
        ping_pong: None,
    });
    let text = render(&c);
    assert!(text.contains("DOES NOT FIT alpha-beta") && text.contains("# WARNING: the intra link's all-reduce does not fit alpha-beta; the simulator and `plan` use its measured sweep ([links.intra_sweep])"), "{text}");
    // On one line, so that `plan` repeats all of it.
    let said = crate::runtime::cluster::warnings(&text);
    assert!(
        said.len() == 1 && said[0].starts_with("the intra link's") && said[0].ends_with("its last slope."),
        "{said:?}"
    );
    // The simulator's all-reduce over the two ranks gives back each
    // measured time, not the line's, and grows with size between them.
    let l = ClusterProfile::from_toml(&text).unwrap().link_model().unwrap();
    for &(b, t) in &bad {
        assert!(
            (l.intra.all_reduce_s(b, 2) - t).abs() <= 1e-15,
            "{b} B: {} s, measured {t}",
            l.intra.all_reduce_s(b, 2)
        );
    }
    assert!(l.intra.all_reduce_s(8192.0, 2) > l.intra.all_reduce_s(2048.0, 2));
}

#[test]
fn a_measured_ping_pong_costs_point_to_point_messages() {
    // One-way messages of 4 B in 0.2 ms and 1 MiB in 90 ms: a message of
    // 1 MiB costs the ping-pong's time, the all-reduce its own sweep's.
    let mut c = hand(1);
    let pp = vec![(4.0, 2e-4), (1048576.0, 0.09)];
    let sweep: Vec<(f64, f64)> = [4.0, 1024.0, 1048576.0].iter().map(|&b| (b, 10e-6 + b / 1e9)).collect();
    c.intra = TierSource::Measured(Measured {
        how: "by hand".into(),
        members: 2,
        all_reduce: (sweep.clone(), fit::fit(&sweep).unwrap()),
        ping_pong: Some((pp.clone(), fit::fit(&pp).unwrap())),
    });
    let text = render(&c);
    assert!(text.contains("ping_pong = ["), "{text}");
    let l = ClusterProfile::from_toml(&text).unwrap_or_else(|e| panic!("{e:#}\n{text}")).link_model().unwrap();
    assert!((l.intra.message_time_s(1048576.0) - 0.09).abs() <= 1e-15);
    assert!((l.intra.all_reduce_s(1048576.0, 2) - sweep[2].1).abs() <= 1e-15);
    // Without one, a message costs the all-reduce sweep's half-round message.
    assert!(!render(&hand(1)).contains("ping_pong ="));
}

#[test]
fn the_profile_gives_back_the_micro_batchs_mean_not_its_median() {
    // A host with a slow stretch: median 10 ms, mean (10 + 10 + 16) / 3 = 12 ms,
    // what three micro-batches in a run take on average.
    let mut c = hand(2);
    c.compute.micro_batch_sets = vec![vec![Samples(vec![0.010, 0.016, 0.010])]];
    let p = ClusterProfile::from_toml(&render(&c)).unwrap();
    let mb = p.micro_batch_s(&GptConfig::nano(), 1).unwrap();
    assert!((mb - 0.012).abs() < 1e-12, "{mb}");
}

#[test]
fn a_host_whose_speed_moved_during_calibrate_is_warned_of_in_the_profile() {
    // [timing]'s mean is 10 ms; the overlap phase's micro-batches alone
    // 10.4 ms (+4%: within the bar, no warning), 10.6 ms (+6%) and 9 ms (-10%).
    let with_alone = |alone: Vec<f64>| {
        let mut c = hand(1);
        c.overlap = Some(Overlap { compute_alone: Samples(alone), ..hand_overlap() });
        render(&c)
    };
    assert!(!with_alone(vec![0.0104]).contains("WARNING"));
    // Nothing fitted beside a short all-reduce: no drift, and no NaN or inf printed.
    let none = with_alone(vec![]);
    assert!(
        none.contains("as long, alone: no samples") && !none.contains("WARNING") && !none.contains("inf"),
        "{none}"
    );
    let slower = with_alone(vec![0.0106]);
    assert!(
        slower.contains("# WARNING: this host's speed moved") && slower.contains("10.6 ms") && slower.contains("(+6%)"),
        "{slower}"
    );
    assert!(with_alone(vec![0.009]).contains("(-10%)"));
    // The warning is a comment: the profile still parses.
    ClusterProfile::from_toml(&slower).unwrap_or_else(|e| panic!("{e:#}\n{slower}"));
}

#[test]
fn an_overlap_factor_from_too_few_micro_batches_is_warned_of_in_the_profile() {
    // A micro-batch alone takes 10 ms, as in [timing] (no drift to warn of).
    let with_overlapped = |overlapped: Vec<f64>| {
        let mut c = hand(1);
        c.overlap = Some(Overlap {
            compute_overlapped: Samples(overlapped),
            compute_alone: Samples(vec![0.01]),
            ..hand_overlap()
        });
        render(&c)
    };
    // Three samples make a measurement; none is factor 1, said by "no samples".
    assert!(!with_overlapped(vec![0.019, 0.02, 0.021]).contains("WARNING"));
    assert!(!with_overlapped(vec![]).contains("WARNING"));
    // One and two do not: 21.9 ms over 10 ms alone is a factor of 2.19.
    let one = with_overlapped(vec![0.0219]);
    let line = one.lines().find(|l| l.starts_with("# WARNING:")).unwrap_or_else(|| panic!("{one}"));
    assert!(line.contains("overlap_compute_factor (2.19) rests on 1 micro-batch(es)"), "{line}");
    assert!(with_overlapped(vec![0.03, 0.035]).contains("rests on 2 micro-batch(es)"));
    // One line, as plan and the runs repeat it (runtime/cluster.rs warnings).
    assert_eq!(crate::runtime::cluster::warnings(&one), vec![line.trim_start_matches("# WARNING:").trim()]);
    ClusterProfile::from_toml(&one).unwrap_or_else(|e| panic!("{e:#}\n{one}"));
}

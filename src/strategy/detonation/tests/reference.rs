//! DeMo's step pinned to bloc97/DeMo's own optimizer (`demo.py` at
//! 0e48145): the same problem run by `scripts/demo_reference.py` (its
//! docstring has the command) on 3 gloo processes, whose printed
//! parameters after each of 3 steps are below. What it covers: step 1
//! (weight decay), 2 (momentum with decay 0.9), 3-5 (2-D blocks of 4 x 4
//! and 1-D runs of 3, top-2 per chunk, what is sent leaves delta), 6-7
//! (all-gather, mean over the members that sent an index), 8-9 (sign, SGD).

use super::gather;
use crate::comm::WireDtype;
use crate::optim::dct::Piece;
use crate::optim::DecaySegments;
use crate::runtime::Group;
use crate::strategy::detonation::demo::DemoReplicator;
use crate::strategy::detonation::replicator::{Exchange, Replicator};
use crate::strategy::detonation::settings::DemoSettings;
use crate::strategy::detonation::shard::tensor_grid;
use crate::strategy::detonation::step::{DemoStep, Inner};

/// The parameters after steps 1, 2, 3 (bloc97/DeMo, worker 0; all workers agree).
const REFERENCE: [[f32; 70]; 3] = [
    // after step 1
    [
        -0.3975, -0.14875, 0.1, 0.34875, 0.3975, -0.3975, -0.14875, -0.1, 0.14875, 0.3975, -0.3975, -0.14875, 0.1,
        0.34875, 0.5975, -0.3975, -0.14875, -0.1, 0.14875, 0.3975, -0.5975, -0.34875, 0.1, 0.34875, 0.5975, -0.3975,
        -0.34875, -0.1, 0.34875, 0.3975, -0.5975, -0.34875, -0.1, 0.34875, 0.5975, -0.3975, -0.34875, -0.1, 0.34875,
        0.5975, -0.5975, -0.34875, -0.1, 0.14875, 0.5975, -0.3975, -0.14875, 0.1, 0.34875, 0.5975, -0.3975, -0.34875,
        -0.1, 0.34875, 0.5975, -0.3975, -0.14875, 0.1, 0.34875, 0.5975, -0.5975, -0.34875, -0.1, 0.14875, 0.3975,
        -0.5975, -0.14875, 0.1, 0.34875, 0.5975,
    ],
    // after step 2
    [
        -0.49551252,
        -0.24800625,
        0.1995,
        0.44700626,
        0.49551252,
        -0.29551253,
        -0.04800626,
        0.000500001,
        0.04800626,
        0.29551253,
        -0.49551252,
        -0.24800625,
        -0.000500001,
        0.44700626,
        0.69451255,
        -0.29551253,
        -0.04800626,
        0.000500001,
        0.04800626,
        0.29551253,
        -0.69451255,
        -0.44700626,
        -0.000500001,
        0.24700627,
        0.69451255,
        -0.29551253,
        -0.24700627,
        0.000500001,
        0.44700626,
        0.29551253,
        -0.69451255,
        -0.24700627,
        -0.1995,
        0.24700627,
        0.49451253,
        -0.49551252,
        -0.24700627,
        0.000500001,
        0.44700626,
        0.49451253,
        -0.49451253,
        -0.24700627,
        0.000500001,
        0.04800626,
        0.49451253,
        -0.49551252,
        -0.24800625,
        -0.000500001,
        0.44700626,
        0.69451255,
        -0.29551253,
        -0.44700626,
        -0.1995,
        0.24700627,
        0.69451255,
        -0.49551252,
        -0.24800625,
        0.1995,
        0.44700626,
        0.49451253,
        -0.49451253,
        -0.24700627,
        0.000500001,
        0.24800625,
        0.29551253,
        -0.69451255,
        -0.24800625,
        -0.000500001,
        0.24700627,
        0.69451255,
    ],
    // after step 3
    [
        -0.593035,
        -0.34676623,
        0.098502494,
        0.34477124,
        0.593035,
        -0.39403495,
        -0.14776623,
        0.1004975,
        0.14776623,
        0.19403496,
        -0.593035,
        -0.14676622,
        -0.1004975,
        0.34477124,
        0.59103996,
        -0.19403496,
        -0.14776623,
        -0.099502504,
        0.14776623,
        0.39403495,
        -0.59103996,
        -0.54477125,
        -0.1004975,
        0.14577124,
        0.79104,
        -0.39403495,
        -0.34577125,
        -0.099502504,
        0.34477124,
        0.39403495,
        -0.59103996,
        -0.14577124,
        -0.098502494,
        0.14577124,
        0.39203998,
        -0.593035,
        -0.34577125,
        0.1004975,
        0.54477125,
        0.59204,
        -0.39203998,
        -0.14577124,
        0.1004975,
        -0.052233774,
        0.39203998,
        -0.593035,
        -0.34676623,
        0.099502504,
        0.34477124,
        0.79104,
        -0.19403496,
        -0.34477124,
        -0.098502494,
        0.34577125,
        0.79104,
        -0.39303496,
        -0.34676623,
        0.098502494,
        0.34477124,
        0.59204,
        -0.59204,
        -0.34577125,
        0.1004975,
        0.34676623,
        0.39403495,
        -0.59103996,
        -0.14676622,
        -0.1004975,
        0.14577124,
        0.59103996,
    ],
];

/// The script's gradient of worker `w` at step `t`, element `i`: k / 8 from a hash.
fn grad(w: u64, t: u64, i: u64) -> f32 {
    let h = ((i + 1) * 2_654_435_761 + (w + 1) * 40_503 + (t + 1) * 9_973) % (1 << 32);
    ((h >> 11) % 17) as f32 / 8.0 - 1.0
}

#[test]
fn demo_step_matches_bloc97_demo_over_three_steps() {
    // An 8 x 8 tensor (four 4 x 4 blocks) and one of 6 (chunk 4: runs of 3), as the script's.
    let pieces: Vec<Piece> = [(0, vec![8, 8]), (64, vec![6])]
        .into_iter()
        .map(|(offset, shape)| {
            let (rows, cols, h, w) = tensor_grid(&shape, 4);
            Piece { offset, rows, cols, h, w }
        })
        .collect();
    assert_eq!((pieces[1].rows, pieces[1].cols, pieces[1].w), (2, 3, 3), "6 = two runs of 3");
    let s = DemoSettings { topk: Some(2), chunk: 4, beta: 0.9, weight_decay: 0.05, ..DemoSettings::default() };
    let mut reps: Vec<DemoReplicator> =
        (0..3).map(|_| DemoReplicator::new(&s, &pieces, 70, Group::World, 3, WireDtype::F32)).collect();
    let step = || DemoStep {
        weight_decay: s.weight_decay,
        decay: DecaySegments::new(std::iter::once(0..70)),
        sign: true,
        inner: Inner::Sgd,
    };
    let mut steps: Vec<DemoStep> = (0..3).map(|_| step()).collect();
    let init: Vec<f32> = (0..70).map(|i| (i % 5) as f32 / 4.0 - 0.5).collect();
    let mut p = vec![init; 3];
    for (t, want) in REFERENCE.iter().enumerate() {
        let t = t as u64;
        let exs: Vec<Exchange> = reps
            .iter_mut()
            .enumerate()
            .map(|(w, r)| r.fold(t, 0.1, &(0..70).map(|i| grad(w as u64, t, i)).collect::<Vec<_>>()))
            .collect();
        let (_, all) = gather(exs);
        let k = all.len() / 3;
        for w in 0..3 {
            let mut q = vec![0.0; 70];
            let input = all[w * k..(w + 1) * k].to_vec();
            reps[w].unfold(Exchange::Gather { group: Group::World, input, output: all.clone() }, &mut q);
            steps[w].apply(0.1, &mut q, &mut p[w]);
        }
        for (w, p) in p.iter().enumerate() {
            let worst = p.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-6, "step {} worker {w}: max |ours - bloc97/DeMo| = {worst}", t + 1);
        }
    }
}

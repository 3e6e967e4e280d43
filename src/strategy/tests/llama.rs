//! The llama blocks under data parallelism: `llama-nano` trained by ZeRO-1,
//! DiLoCo and DeMo on the simulator and on threads, the same bits on both,
//! and resumed from a checkpoint bit-identically.

use super::resume::check_resume_of;
use super::*;

/// DiLoCo's outer round is `h` inner steps: the resume test stops at step 3
/// and checkpoints land on round boundaries, so it runs h = 1 (the outer
/// momentum then carries state across the stop).
fn methods(h: u64) -> Vec<Method> {
    vec![
        Method::Zero1,
        crate::strategy::diloco::tests::diloco(h, crate::optim::OuterKind::Nesterov, 0.7),
        Method::Demo(DemoSettings::default()),
    ]
}

#[test]
fn llama_nano_trains_data_parallel_with_the_same_bits_in_sim_and_real() {
    let cfg = GptConfig::llama_nano();
    for method in methods(2) {
        let p = plan_of(&cfg, 4, 1, 1.0);
        let a = run_cluster(&method, &sim(2), workers_of(&cfg, 2, 2), &p, &Hooks::default()).unwrap();
        let b = run_cluster(&method, &real(2), workers_of(&cfg, 2, 2), &p, &Hooks::default()).unwrap();
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(bits(&a.params), bits(&b.params), "{method}: sim and real differ");
            let losses: Vec<f32> = a.points.iter().map(|p| p.loss).collect();
            assert_eq!(losses, b.points.iter().map(|p| p.loss).collect::<Vec<_>>(), "{method}");
            let (first, last) = (losses[0], *losses.last().unwrap());
            assert!(first.is_finite() && last < first, "{method}: loss {losses:?} does not fall");
        }
    }
}

#[test]
fn llama_nano_resumes_bit_identically_in_sim_and_real() {
    let cfg = GptConfig::llama_nano();
    for rt in [sim(2), real(2)] {
        for method in methods(1) {
            check_resume_of(&cfg, &method, &rt, None);
        }
    }
}

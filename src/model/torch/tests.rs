//! The libtorch backend against the native kernels: the same loss,
//! gradients and logits on fixed batches for every preset, and the same
//! parameters after 20 AdamW steps (`cargo test --features torch`).

use crate::model::{ComputeDevice, Gpt, GptConfig};
use crate::optim::{AdamW, AdamWConfig, DecaySegments, Optimizer};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// `b x t` random tokens and their targets.
fn batch(cfg: &GptConfig, b: usize, t: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut draw = || (0..b * t).map(|_| rng.random_range(0..cfg.vocab_size as u32)).collect::<Vec<u32>>();
    (draw(), draw())
}

/// Largest |a - b| over largest |b|: 0 when equal, scale-free.
fn relative_difference(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let worst = a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max);
    let scale = b.iter().map(|y| f64::from(y.abs())).fold(0.0, f64::max);
    worst / scale.max(f64::MIN_POSITIVE)
}

/// Native and libtorch-CPU models of `cfg`, from the same parameters.
fn pair(cfg: &GptConfig) -> (Gpt, Gpt) {
    let native = Gpt::new(cfg.clone(), 3).unwrap();
    let torch =
        Gpt::from_params(cfg.clone(), native.params.clone(), 3).unwrap().on_device(ComputeDevice::TorchCpu).unwrap();
    (native, torch)
}

/// Presets at a batch that keeps the test quick (t at most 64).
fn cases() -> Vec<(&'static str, GptConfig)> {
    GptConfig::PRESETS.iter().map(|&name| (name, GptConfig::preset(name).unwrap())).collect()
}

#[test]
fn loss_gradients_and_logits_equal_the_native_kernels_for_every_preset() {
    for (name, cfg) in cases() {
        let (mut native, mut torch) = pair(&cfg);
        let (b, t) = (2, cfg.ctx.min(64));
        let (x, y) = batch(&cfg, b, t, 11);
        // Two micro-batches at half scale: the gradient accumulates on the host.
        let (x2, y2) = batch(&cfg, b, t, 12);
        let ln = native.forward_backward(&x, &y, b, t, 0.5) + native.forward_backward(&x2, &y2, b, t, 0.5);
        let lt = torch.forward_backward(&x, &y, b, t, 0.5) + torch.forward_backward(&x2, &y2, b, t, 0.5);
        let loss_diff = f64::from((ln - lt).abs() / ln.abs());
        assert!(loss_diff < 1e-5, "{name}: loss native {ln} torch {lt}");
        for spec in &native.layout.tensors {
            let r = spec.range.clone();
            let d = relative_difference(&torch.grads[r.clone()], &native.grads[r]);
            assert!(d < 1e-5, "{name}: gradient of {} differs by {d:e} of its largest value", spec.name);
        }
        let logits_n = native.logits(&x, b, t).to_vec();
        let d = relative_difference(torch.logits(&x, b, t), &logits_n);
        assert!(d < 1e-5, "{name}: logits differ by {d:e}");
        let (en, et) = (native.loss(&x2, &y2, b, t), torch.loss(&x2, &y2, b, t));
        assert!(f64::from((en - et).abs() / en) < 1e-5, "{name}: eval loss native {en} torch {et}");
        eprintln!("{name}: loss {ln} vs {lt} ({loss_diff:e} relative)");
    }
}

#[test]
fn twenty_adamw_steps_end_at_the_same_parameters() {
    for cfg in [GptConfig::nano(), GptConfig::llama_nano()] {
        let (mut native, mut torch) = pair(&cfg);
        let (b, t) = (4, 32);
        let decay = DecaySegments::new(native.layout.decay_ranges());
        let mut opt_n = AdamW::new(AdamWConfig::default(), native.num_params());
        let mut opt_t = AdamW::new(AdamWConfig::default(), torch.num_params());
        for step in 0..20 {
            let (x, y) = batch(&cfg, b, t, 100 + step);
            for (m, opt) in [(&mut native, &mut opt_n), (&mut torch, &mut opt_t)] {
                m.zero_grads();
                m.forward_backward(&x, &y, b, t, 1.0);
                opt.step(&mut m.params, &m.grads, 3e-3, &decay);
            }
        }
        // AdamW divides by the root of the second moment, so elements whose
        // gradients are near zero move by up to lr whatever their rounding:
        // compare the whole vector (relative L2), and print the worst element.
        let norm = |v: &mut dyn Iterator<Item = f32>| v.map(|x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
        let l2 = norm(&mut torch.params.iter().zip(&native.params).map(|(a, b)| a - b))
            / norm(&mut native.params.iter().copied());
        let worst = relative_difference(&torch.params, &native.params);
        eprintln!(
            "{}: after 20 steps the parameters differ by {l2:e} (relative L2), worst element {worst:e} of the largest",
            cfg.arch.name()
        );
        assert!(l2 < 1e-4, "{}: parameters differ by {l2:e}", cfg.arch.name());
    }
}

#[test]
fn dropout_and_a_missing_gpu_are_refused_with_the_fix() {
    let cfg = GptConfig { dropout: 0.1, ..GptConfig::nano() };
    let e = Gpt::new(cfg, 0).unwrap().on_device(ComputeDevice::TorchCpu).err().unwrap().to_string();
    assert!(e.contains("dropout 0.1 is not supported on --device cpu") && e.contains("--device native"), "{e}");
    if super::cuda_count() == 0 {
        let e = Gpt::new(GptConfig::nano(), 0).unwrap().on_device(ComputeDevice::Cuda(None)).err().unwrap().to_string();
        assert!(e.contains("libtorch sees no CUDA device") && e.contains("--device cpu"), "{e}");
    }
}

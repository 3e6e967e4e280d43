//! A device round (model/device_adamw.rs, `Inner::round_at`): AdamW's steps
//! on libtorch's device, the parameters and moments going up once before
//! the steps and back once after, against the host AdamW on a twin model
//! on the same device (so the forward and backward are the same floats and
//! only the optimizer's arithmetic differs; the backends' own agreement is
//! the other tests').

use super::{batch, pair, pair_on, relative_l2_of};
use lowcomm::model::Gpt;
use lowcomm::model::{ComputeDevice, GptConfig};
use lowcomm::optim::{clip_global_norm, AdamW, AdamWConfig, DecaySegments, Optimizer};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Three host steps on both models (so the round starts from moments that
/// are not zero: a round that did not upload them fails), then 17 steps of
/// two micro-batches each, the gradient clipped to 0.5 (clipped at most
/// steps: counted, so a clip that never bites fails) and decayed: a
/// libtorch model with the host AdamW against its twin in a device round.
/// The gradient norms, the parameters and both moments agree within 1e-5
/// (relative), and the round counts its steps. On `cuda:0` too where
/// libtorch sees a GPU.
#[test]
fn a_device_round_takes_the_host_adamw_steps() {
    let gpu = lowcomm::model::device::cuda_count() > 0;
    let devices = [ComputeDevice::TorchCpu, ComputeDevice::Cuda(Some(0))];
    for device in devices.into_iter().take(if gpu { 2 } else { 1 }) {
        for cfg in [GptConfig::nano(), GptConfig::llama_nano()] {
            let (first, mut torch) = pair_on(&cfg, device);
            // "native" below: the host AdamW's model, on the same device.
            let mut native = Gpt::from_params(cfg.clone(), first.params, 3).unwrap().on_device(device).unwrap();
            let (b, t, lr, clip) = (2, 32, 3e-3, 0.5);
            let decay = DecaySegments::new(native.layout.decay_ranges());
            let mut opt_n = AdamW::new(AdamWConfig::default(), native.num_params());
            let mut opt_t = AdamW::new(AdamWConfig::default(), torch.num_params());
            let (mut clipped, mut worst_norm) = (0, 0.0f32);
            for step in 0..20 {
                let (x1, y1) = batch(&cfg, b, t, 200 + 2 * step);
                let (x2, y2) = batch(&cfg, b, t, 201 + 2 * step);
                if step == 3 {
                    assert!(torch.begin_device_adamw(&mut opt_t), "a libtorch model begins a device round");
                }
                for m in [&mut native, &mut torch] {
                    m.zero_grads();
                    m.forward_backward(&x1, &y1, b, t, 0.5);
                    m.forward_backward(&x2, &y2, b, t, 0.5);
                }
                let norm = clip_global_norm(native.grads_mut(), clip);
                let (params, grads) = native.params_and_grads();
                opt_n.step(params, grads, lr, &decay);
                if step < 3 {
                    clip_global_norm(torch.grads_mut(), clip);
                    let (params, grads) = torch.params_and_grads();
                    opt_t.step(params, grads, lr, &decay);
                    continue;
                }
                let device_norm = torch.device_clip(clip);
                worst_norm = worst_norm.max(((device_norm - norm) / norm).abs());
                clipped += usize::from(norm > clip);
                torch.device_adamw_step(&mut opt_t, lr, &decay);
            }
            torch.end_device_adamw(&mut opt_t);
            assert!(clipped >= 10, "the clip bit at only {clipped} of 17 steps: raise the batch or lower the bound");
            assert_eq!(opt_t.steps_taken(), 20);
            let name = cfg.arch.name();
            eprintln!("{name} on {device}: gradient norms at most {worst_norm:e} apart (relative)");
            assert!(worst_norm < 1e-5, "{name} on {device}: a gradient norm {worst_norm:e} from the native one");
            let p = relative_l2_of(&torch.params, &native.params);
            eprintln!("{name} on {device}: after a 17-step device round the parameters differ by {p:e} (relative L2)");
            assert!(p < 1e-5, "{name} on {device}: parameters {p:e} apart");
            for ((key, dev), (_, host)) in opt_t.state_tensors().into_iter().zip(opt_n.state_tensors()) {
                let d = relative_l2_of(dev, host);
                eprintln!("{name} on {device}: {key} differs by {d:e}");
                assert!(d < 1e-5, "{name} on {device}: {key} {d:e} apart");
            }
            // After the round the host is the truth again: an evaluation reads it.
            let (x, y) = batch(&cfg, b, t, 99);
            let (ln, lt) = (native.loss(&x, &y, b, t), torch.loss(&x, &y, b, t));
            assert!(((ln - lt) / ln).abs() < 1e-5, "{name} on {device}: loss after the round {lt}, native {ln}");
        }
    }
}

/// Inside a round the host's parameters and gradient are stale: an
/// evaluation (which would upload them over the device's) and a read of
/// the host gradient each panic naming the round; natively no round begins.
#[test]
fn the_host_copies_are_refused_inside_a_device_round() {
    let cfg = GptConfig::nano();
    let (x, y) = batch(&cfg, 2, 16, 5);
    type HostUse = fn(&mut Gpt, &[u32], &[u32]);
    let uses: [(&str, HostUse); 2] = [
        ("an evaluation", |m, x, y| {
            m.loss(x, y, 2, 16);
        }),
        ("a read of the gradient", |m, _, _| {
            m.grads();
        }),
    ];
    for (what, use_host) in uses {
        let (mut native, mut torch) = pair(&cfg);
        let mut opt = AdamW::new(AdamWConfig::default(), torch.num_params());
        assert!(!native.begin_device_adamw(&mut opt), "natively no round begins");
        assert!(torch.begin_device_adamw(&mut opt));
        torch.zero_grads();
        torch.forward_backward(&x, &y, 2, 16, 1.0);
        let e = catch_unwind(AssertUnwindSafe(|| use_host(&mut torch, &x, &y))).expect_err(what);
        let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("during a device round"), "{what}: {msg}");
    }
}

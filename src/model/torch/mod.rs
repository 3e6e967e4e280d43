//! The model's forward and backward on libtorch (`--device cpu|cuda|cuda:N`,
//! cargo feature `torch`): the same GPT-2 and llama blocks as the native
//! kernels, over the same flat parameter layout.
//!
//! The host buffers stay the truth the strategies read and write
//! (`Gpt::params`, `Gpt::grads()`). The data moves once per accumulation
//! window, not per micro-batch: the window's first micro-batch uploads the
//! host parameters (one copy into one device tensor whose views are the
//! model's tensors); every micro-batch's gradient accumulates on the device
//! (one sum per tensor); reading the gradient (`Gpt::grads`
//! and the like) adds the sum into the host gradient in one transfer and
//! ends the window, as `Gpt::zero_grads` does. So a strategy that changes the
//! parameters between micro-batches must zero the gradient first; every one
//! does, and debug builds (the tests) check it on each micro-batch.
//!
//! Dropout is not offered here (its masks come from lowcomm's own random
//! stream, so the two backends could not agree): a run with dropout > 0 on
//! libtorch is refused before it starts.

mod blocks;
mod resident;

use super::device::{ComputeDevice, ComputePrecision};
use super::layout::ParamLayout;
use super::GptConfig;
use anyhow::{bail, Result};
use tch::{Device, Kind, Reduction, Tensor};

/// The model's math on one libtorch device.
pub struct TorchGpt {
    cfg: GptConfig,
    layout: ParamLayout,
    device: Device,
    /// The kind the forward and backward compute in (`Float`, or
    /// `BFloat16` under `--precision bf16`: the f32 parameters are cast
    /// each pass, so autograd brings the gradient back in f32).
    kind: Kind,
    /// Every parameter, flat, in `layout` order, on the device (one copy
    /// uploads them all).
    params: Tensor,
    /// One autograd leaf per tensor of `layout`, in its order: views of
    /// `params`' storage. Not slices of one flat leaf: autograd's backward
    /// of a slice writes a zero tensor the size of the whole model, once per
    /// slice (measured: 28 s per micro-batch of `gpt2`, against 2 s natively).
    leaves: Vec<Tensor>,
    /// The window's gradient so far, one tensor per leaf (empty: none
    /// pending). The first micro-batch's gradients are kept as autograd
    /// returns them, later ones added in place: no `.grad` to zero and
    /// refill each window.
    grads: Vec<Tensor>,
    /// Whether `params` holds the host parameters of the current
    /// accumulation window (its first micro-batch uploads them; zeroing or
    /// reading the gradient ends the window).
    params_current: bool,
    /// Debug builds: the parameters last uploaded, to catch a caller that
    /// changes the host parameters inside an accumulation window.
    #[cfg(debug_assertions)]
    uploaded: Vec<f32>,
    /// The rotary tables of llama blocks (`[ctx, hs]` each, halves repeated),
    /// from the native table so both backends rotate by the same bits.
    rope: Option<(Tensor, Tensor)>,
    /// The last pass's logits `[rows, vocab]`, on the host.
    logits: Vec<f32>,
    /// On CUDA: a page-locked host buffer of the model's size, allocated
    /// once, that every upload and download goes through. A copy from
    /// pageable memory makes CUDA stage it itself, chunk by chunk, and a
    /// download into a fresh host tensor first-touches the whole model
    /// each step (docs/torch.md, "Transfers", measures both).
    /// `LOWCOMM_TORCH_PAGEABLE=1` copies without it, to measure the difference.
    staging: Option<Tensor>,
    /// Whether the host gradient is to be read as zero ([`Self::zero_grads`]
    /// ran since the last [`Self::take_grads_into`]): `Gpt::zero_grads`
    /// leaves clearing it to the next read.
    host_grads_zero: bool,
    /// Whether a device round is under way (resident.rs): `params` are the
    /// truth and the host's are stale until it ends, so nothing uploads.
    resident: bool,
    /// AdamW's moments on the device during a device round (allocated by
    /// the first, kept for the next).
    moments: Option<(Tensor, Tensor)>,
}

impl TorchGpt {
    /// A libtorch model of shape `cfg` on `device` (parameters arrive with
    /// each pass). Errors name what is missing: CUDA, or a GPU index.
    /// Dropout is refused before this, by [`ComputeDevice::check_for`].
    pub fn new(cfg: &GptConfig, device: ComputeDevice, precision: ComputePrecision) -> Result<Self> {
        let device = torch_device(device)?;
        let kind = match precision {
            ComputePrecision::F32 => Kind::Float,
            ComputePrecision::Bf16 => Kind::BFloat16,
        };
        let layout = ParamLayout::new(cfg);
        let params = Tensor::zeros([layout.len as i64], (Kind::Float, device));
        let mut end = 0;
        let leaves = layout
            .tensors
            .iter()
            .map(|spec| {
                // The gradient's gather (a concatenation in this order) needs the tensors back to back.
                assert_eq!(spec.range.start, end, "{}: the layout's tensors must tile the flat buffer", spec.name);
                end = spec.range.end;
                let shape: Vec<i64> = spec.shape.iter().map(|&d| d as i64).collect();
                let view = params.narrow(0, spec.range.start as i64, spec.range.len() as i64).view(shape.as_slice());
                view.detach().set_requires_grad(true)
            })
            .collect();
        assert_eq!(end, layout.len, "the layout's tensors must tile the flat buffer");
        let rope = (cfg.arch == super::Arch::Llama).then(|| blocks::rope_tables(cfg, device, kind));
        let pageable = std::env::var("LOWCOMM_TORCH_PAGEABLE").is_ok_and(|v| v == "1");
        let staging = (device.is_cuda() && !pageable)
            .then(|| Tensor::empty([layout.len as i64], (Kind::Float, Device::Cpu)).pin_memory(device));
        Ok(Self {
            cfg: cfg.clone(),
            layout,
            device,
            kind,
            params,
            leaves,
            grads: Vec::new(),
            params_current: false,
            #[cfg(debug_assertions)]
            uploaded: Vec::new(),
            rope,
            logits: Vec::new(),
            staging,
            host_grads_zero: false,
            resident: false,
            moments: None,
        })
    }

    /// Mean cross-entropy of `targets` given `inputs`, no gradients.
    pub fn loss(&mut self, params: &[f32], inputs: &[u32], targets: &[u32], b: usize, t: usize) -> f32 {
        let _guard = tch::no_grad_guard();
        let logits = self.forward(params, inputs, b, t);
        f32::try_from(self.cross_entropy(&logits, targets)).expect("a scalar loss")
    }

    /// Logits `[b*t, vocab]` for `inputs`.
    pub fn logits(&mut self, params: &[f32], inputs: &[u32], b: usize, t: usize) -> &[f32] {
        let _guard = tch::no_grad_guard();
        let logits = self.forward(params, inputs, b, t);
        self.logits.resize(b * t * self.cfg.vocab_size, 0.0);
        logits.copy_data(&mut self.logits, b * t * self.cfg.vocab_size);
        &self.logits
    }

    /// Forward and backward of `loss_scale x mean cross-entropy`; the
    /// gradient accumulates on the device until [`Self::take_grads_into`].
    /// Returns the unscaled mean loss.
    pub fn forward_backward(
        &mut self,
        params: &[f32],
        inputs: &[u32],
        targets: &[u32],
        (b, t): (usize, usize),
        loss_scale: f32,
    ) -> f32 {
        if self.resident {
            // The device's parameters are the truth (resident.rs).
        } else if self.params_current {
            self.check_unchanged(params);
        } else {
            self.upload(params);
            self.params_current = true;
        }
        let logits = self.graph(inputs, b, t);
        let loss = self.cross_entropy(&logits, targets);
        let grads = Tensor::run_backward(&[&loss * f64::from(loss_scale)], &self.leaves, false, false);
        if self.grads.is_empty() {
            self.grads = grads;
        } else {
            let _guard = tch::no_grad_guard();
            for (sum, g) in self.grads.iter_mut().zip(grads) {
                // A tensor no pass used has an undefined gradient.
                match (sum.defined(), g.defined()) {
                    (true, true) => *sum += g,
                    (false, true) => *sum = g,
                    _ => {}
                }
            }
        }
        f32::try_from(loss.detach()).expect("a scalar loss")
    }

    /// The parameters at `range` of the flat layout: one tensor's leaf, or
    /// the flattened leaves of consecutive tensors concatenated (llama's
    /// fused q|k|v and gate|up products span several).
    fn weights_at(&self, range: &std::ops::Range<usize>) -> Tensor {
        let tensors = &self.layout.tensors;
        let first = tensors.partition_point(|s| s.range.start < range.start);
        let last = tensors.partition_point(|s| s.range.end <= range.end);
        let ok = first < last && tensors[first].range.start == range.start && tensors[last - 1].range.end == range.end;
        assert!(ok, "no parameter tensors tile {range:?}");
        if last - first == 1 {
            return self.leaves[first].shallow_clone();
        }
        Tensor::cat(&self.leaves[first..last].iter().map(|l| l.view(-1)).collect::<Vec<_>>(), 0)
    }

    /// Adds the gradient accumulated on the device into `grads` (the host
    /// gradient), in one transfer, and ends the accumulation window. After
    /// [`Self::zero_grads`] the host gradient reads as zero without having
    /// been cleared: the sum is copied over it (or zeros written, when no
    /// micro-batch ran), which saves a pass over the whole model each step.
    pub fn take_grads_into(&mut self, grads: &mut [f32]) {
        self.refuse_in_round("read the host gradient");
        let overwrite = std::mem::take(&mut self.host_grads_zero);
        match self.flat_grads() {
            None if overwrite => grads.fill(0.0),
            None => {}
            Some(flat) => {
                assert_eq!(grads.len(), self.layout.len, "gradient buffer of another shape");
                let _guard = tch::no_grad_guard();
                let sum = self.staged(&flat);
                // SAFETY: the view is used and dropped here, while `grads` is borrowed.
                let mut host = unsafe { host_view(grads.as_mut_ptr(), grads.len()) };
                if overwrite {
                    host.copy_(&sum);
                } else {
                    host += sum.to_device(Device::Cpu);
                }
            }
        }
        self.params_current = false;
    }

    /// The window's gradient as one flat device tensor in layout order
    /// (None when no micro-batch ran); the device's pending sum is taken.
    fn flat_grads(&mut self) -> Option<Tensor> {
        if self.grads.is_empty() {
            return None;
        }
        let _guard = tch::no_grad_guard();
        // A tensor no pass used has no gradient: zeros in its place.
        let flat: Vec<Tensor> = (self.grads.drain(..).zip(&self.leaves))
            .map(|(g, leaf)| if g.defined() { g.view(-1) } else { leaf.zeros_like().view(-1) })
            .collect();
        Some(Tensor::cat(&flat, 0))
    }

    /// Drops the device's pending gradient, marks the host gradient as
    /// zero (written by the next [`Self::take_grads_into`]), and ends the
    /// accumulation window.
    pub fn zero_grads(&mut self) {
        self.grads.clear();
        self.host_grads_zero = true;
        self.params_current = false;
    }

    /// Debug builds: the host parameters must be the ones this window
    /// uploaded (a strategy that moves them between micro-batches without
    /// zeroing the gradient would otherwise train on stale ones).
    fn check_unchanged(&self, params: &[f32]) {
        #[cfg(debug_assertions)]
        assert!(
            params.len() == self.uploaded.len() && params.iter().zip(&self.uploaded).all(|(a, b)| a.to_bits() == b.to_bits()),
            "the host parameters changed between micro-batches of one accumulation window: call Gpt::zero_grads (or read the gradient) before changing them"
        );
        let _ = params;
    }

    fn forward(&mut self, params: &[f32], inputs: &[u32], b: usize, t: usize) -> Tensor {
        self.refuse_in_round("evaluate the host parameters");
        self.upload(params);
        self.graph(inputs, b, t)
    }

    /// Logits `[b, t, vocab]` in f32 from the device parameters, computed
    /// in `self.kind`.
    fn graph(&self, inputs: &[u32], b: usize, t: usize) -> Tensor {
        let tokens = self.tokens(inputs, b, t);
        let weight = |r: &std::ops::Range<usize>| {
            let w = self.weights_at(r);
            if self.kind == Kind::Float {
                w
            } else {
                w.to_kind(self.kind)
            }
        };
        let logits = blocks::forward(&self.cfg, &self.layout, &weight, self.rope.as_ref(), &tokens, t);
        logits.to_kind(Kind::Float)
    }

    /// The host parameters into the device tensor, one copy.
    fn upload(&mut self, params: &[f32]) {
        let mut device = self.params.shallow_clone();
        self.copy_up(params, &mut device);
        #[cfg(debug_assertions)]
        {
            self.uploaded.clear();
            self.uploaded.extend_from_slice(params);
        }
    }

    /// `src` copied into the pinned buffer, which is returned, or `src`
    /// itself where there is none: each transfer between host and device
    /// goes through it.
    fn staged(&mut self, src: &Tensor) -> Tensor {
        match &mut self.staging {
            Some(staging) => {
                staging.copy_(src);
                staging.shallow_clone()
            }
            None => src.shallow_clone(),
        }
    }

    fn tokens(&self, inputs: &[u32], b: usize, t: usize) -> Tensor {
        assert!(t <= self.cfg.ctx, "sequence of {t} tokens exceeds the context length {}", self.cfg.ctx);
        assert_eq!(inputs.len(), b * t, "inputs must hold batch x seq tokens");
        let ids: Vec<i64> = inputs.iter().map(|&x| i64::from(x)).collect();
        Tensor::from_slice(&ids).view([b as i64, t as i64]).to_device(self.device)
    }

    fn cross_entropy(&self, logits: &Tensor, targets: &[u32]) -> Tensor {
        let ids: Vec<i64> = targets.iter().map(|&x| i64::from(x)).collect();
        let targets = Tensor::from_slice(&ids).to_device(self.device);
        logits.view([-1, self.cfg.vocab_size as i64]).cross_entropy_loss::<Tensor>(
            &targets,
            None,
            Reduction::Mean,
            -100,
            0.0,
        )
    }
}

/// A CPU tensor over `len` host floats at `data`, without a copy: the
/// upload reads the parameters through it and the backward adds into the
/// host gradient through it (a fresh buffer per pass would cost a
/// first-touch of the whole model each time). Safety: the memory must stay
/// valid and unaliased by writers while the tensor lives; callers drop it
/// before they return.
unsafe fn host_view(data: *mut f32, len: usize) -> Tensor {
    Tensor::from_blob(data.cast::<u8>(), &[len as i64], &[1], Kind::Float, Device::Cpu)
}

/// The libtorch device of `device`, refusing CUDA where libtorch sees none.
fn torch_device(device: ComputeDevice) -> Result<Device> {
    Ok(match device {
        ComputeDevice::Native => bail!("the native device has no libtorch model"),
        ComputeDevice::TorchCpu => Device::Cpu,
        ComputeDevice::Cuda(n) => {
            let count = cuda_count();
            let n = n.unwrap_or(0);
            if count == 0 {
                bail!(
                    "--device {device}: libtorch sees no CUDA device (built against a CPU-only libtorch, no driver, or CUDA_VISIBLE_DEVICES empty); use --device cpu or native"
                );
            }
            if n >= count {
                bail!("--device {device}: libtorch sees {count} CUDA device(s), cuda:0 to cuda:{}", count - 1);
            }
            Device::Cuda(n)
        }
    })
}

/// How many CUDA devices libtorch sees (0 without CUDA).
pub fn cuda_count() -> usize {
    tch::Cuda::device_count() as usize
}

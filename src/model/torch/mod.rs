//! The model's forward and backward on libtorch (`--device cpu|cuda|cuda:N`,
//! cargo feature `torch`): the same GPT-2 and llama blocks as the native
//! kernels, over the same flat parameter layout.
//!
//! The host buffers stay the truth the strategies read and write
//! (`Gpt::params`, `Gpt::grads`): before each pass the parameters go up as
//! one copy into one device tensor whose views are the model's tensors, and
//! after a backward its gradient is added straight into the host gradient
//! (micro-batches accumulate there, as natively); both through views of
//! the host buffers, no staging copy. That is two
//! transfers of the model per micro-batch, not per optimizer step: simple and
//! always in step with whatever a strategy did to the host parameters; see
//! docs/torch.md for what it costs and the planned device-side accumulation.
//!
//! Dropout is not offered here (its masks come from lowcomm's own random
//! stream, so the two backends could not agree): a run with dropout > 0 on
//! libtorch is refused before it starts.

mod blocks;

use super::device::ComputeDevice;
use super::layout::ParamLayout;
use super::GptConfig;
use anyhow::{bail, Result};
use tch::{Device, Kind, Reduction, Tensor};

/// The model's math on one libtorch device.
pub struct TorchGpt {
    cfg: GptConfig,
    layout: ParamLayout,
    device: Device,
    /// Every parameter, flat, in `layout` order, on the device.
    params: Tensor,
    /// The rotary tables of llama blocks (`[ctx, hs]` each, halves repeated),
    /// from the native table so both backends rotate by the same bits.
    rope: Option<(Tensor, Tensor)>,
    /// The last pass's logits `[rows, vocab]`, on the host.
    logits: Vec<f32>,
}

impl TorchGpt {
    /// A libtorch model of shape `cfg` on `device` (parameters arrive with
    /// each pass). Errors name what is missing: CUDA, or a GPU index.
    /// Dropout is refused before this, by [`ComputeDevice::check_for`].
    pub fn new(cfg: &GptConfig, device: ComputeDevice) -> Result<Self> {
        let device = torch_device(device)?;
        let layout = ParamLayout::new(cfg);
        let params = Tensor::zeros([layout.len as i64], (Kind::Float, device));
        let rope = (cfg.arch == super::Arch::Llama).then(|| blocks::rope_tables(cfg, device));
        Ok(Self { cfg: cfg.clone(), layout, device, params, rope, logits: Vec::new() })
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
        logits.to_kind(Kind::Float).copy_data(&mut self.logits, b * t * self.cfg.vocab_size);
        &self.logits
    }

    /// Forward and backward of `loss_scale x mean cross-entropy`; the
    /// gradient is ADDED to `grads` (the host accumulator). Returns the
    /// unscaled mean loss.
    pub fn forward_backward(
        &mut self,
        params: &[f32],
        grads: &mut [f32],
        inputs: &[u32],
        targets: &[u32],
        (b, t): (usize, usize),
        loss_scale: f32,
    ) -> f32 {
        let leaf = {
            self.upload(params);
            self.params.detach().set_requires_grad(true)
        };
        let logits = blocks::forward(&self.cfg, &self.layout, &leaf, self.rope.as_ref(), &self.tokens(inputs, b, t), t);
        let loss = self.cross_entropy(&logits, targets);
        (&loss * f64::from(loss_scale)).backward();
        assert_eq!(grads.len(), self.layout.len, "gradient buffer of another shape");
        // SAFETY: the view is used and dropped here, while `grads` is borrowed.
        let mut host = unsafe { host_view(grads.as_mut_ptr(), grads.len()) };
        host += leaf.grad().to_device(Device::Cpu);
        f32::try_from(loss.detach()).expect("a scalar loss")
    }

    fn forward(&mut self, params: &[f32], inputs: &[u32], b: usize, t: usize) -> Tensor {
        self.upload(params);
        let tokens = self.tokens(inputs, b, t);
        blocks::forward(&self.cfg, &self.layout, &self.params, self.rope.as_ref(), &tokens, t)
    }

    /// The host parameters into the device tensor, one copy.
    fn upload(&mut self, params: &[f32]) {
        assert_eq!(params.len(), self.layout.len, "parameter buffer of another shape");
        let _guard = tch::no_grad_guard();
        // SAFETY: the view is only read, and dropped before `params` is released.
        self.params.copy_(&unsafe { host_view(params.as_ptr().cast_mut(), params.len()) });
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

//! f32 tensors to and from safetensors files.

use crate::util::fsio::atomic_write;
use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::Path;

/// Write named f32 tensors (name, shape, data) atomically.
pub fn write_f32_tensors(path: &Path, tensors: &[(&str, Vec<usize>, &[f32])]) -> Result<()> {
    write_f32_tensors_with_metadata(path, tensors, None)
}

/// Like [`write_f32_tensors`], with the safetensors header's `__metadata__`
/// (Hugging Face requires `{"format": "pt"}`).
pub fn write_f32_tensors_with_metadata(
    path: &Path,
    tensors: &[(&str, Vec<usize>, &[f32])],
    metadata: Option<HashMap<String, String>>,
) -> Result<()> {
    let bytes: Vec<Vec<u8>> =
        tensors.iter().map(|(_, _, d)| d.iter().flat_map(|v| v.to_le_bytes()).collect()).collect();
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), b)| Ok((name.to_string(), TensorView::new(Dtype::F32, shape.clone(), b)?)))
        .collect::<Result<_>>()?;
    let data = safetensors::serialize(views, metadata)?;
    atomic_write(path, &data)
}

/// A tensor read back: (name, shape, data).
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Read every tensor of a safetensors file as f32: (name, shape, data).
pub fn read_f32_tensors(path: &Path) -> Result<Vec<NamedTensor>> {
    Ok(read_f32_tensors_with_metadata(path)?.0)
}

/// Like [`read_f32_tensors`], with the header's `__metadata__` (empty if none).
pub fn read_f32_tensors_with_metadata(path: &Path) -> Result<(Vec<NamedTensor>, HashMap<String, String>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes)
        .with_context(|| format!("{} is not a valid safetensors file", path.display()))?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes)
        .with_context(|| format!("{} is not a valid safetensors file", path.display()))?;
    let mut out = Vec::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            bail!("tensor {name} in {} has dtype {:?}, expected F32", path.display(), view.dtype());
        }
        let data = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        out.push((name, view.shape().to_vec(), data));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((out, metadata))
}

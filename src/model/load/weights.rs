//! Tensors by their Hugging Face names, from safetensors checkpoints or GGUF files.
//!
//! Weight matrices come as [`Matrix`]: kept as stored (GGUF blocks, safetensors dtype) unless
//! [`WeightsMode::Expanded`] asks for every weight in the compute dtype at load (see matrix.rs
//! for why and how a stored matrix is used), or [`WeightsMode::Q8_0`] for a safetensors
//! checkpoint's matrices in Q8_0 blocks (a bf16 judge too big for the machine as stored).
//! Vectors (norms, biases) are small and always come
//! in the compute dtype. llama.cpp's layout differences are undone here so that every
//! architecture file sees the transformers layout.

use crate::model::load::config::Arch;
use crate::model::load::gguf_files::GgufFiles;
use crate::model::load::safetensors_reads::SafetensorsReads;
use crate::model::quant::IQuant;
use crate::model::quant::IqMatrix;
use crate::model::quant::{Matrix, WeightsMode};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Error, Result, Tensor};
use std::path::PathBuf;

pub struct Weights {
    source: Source,
    dtype: DType,
    device: Device,
    mode: WeightsMode,
}

enum Source {
    /// Read with plain file reads, not mapped (`safetensors_reads`): a mapped page read stays
    /// in the process's memory while the map lives, so the weights would be held twice.
    Safetensors(SafetensorsReads),
    Gguf {
        /// Boxed: its header maps make it several times the other variant's size.
        files: Box<GgufFiles>,
        arch: Arch,
        heads: usize,
        kv_heads: usize,
    },
}

impl Weights {
    pub fn safetensors(
        files: &[PathBuf],
        dtype: DType,
        device: &Device,
        mode: WeightsMode,
    ) -> Result<Self> {
        Ok(Weights {
            source: Source::Safetensors(SafetensorsReads::new(files)?),
            dtype,
            device: device.clone(),
            mode,
        })
    }

    pub fn gguf(
        files: GgufFiles,
        arch: Arch,
        heads: usize,
        kv_heads: usize,
        dtype: DType,
        device: &Device,
        mode: WeightsMode,
    ) -> Self {
        // A GGUF stays as stored under `q8_0` too: the provenance says what was done.
        let mode = match mode {
            WeightsMode::Q8_0 => WeightsMode::Stored,
            mode => mode,
        };
        Weights {
            source: Source::Gguf {
                files: Box::new(files),
                arch,
                heads,
                kv_heads,
            },
            dtype,
            device: device.clone(),
            mode,
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn mode(&self) -> WeightsMode {
        self.mode
    }

    /// The (out, in) matrix with this Hugging Face name: as stored, or in the compute dtype
    /// when expanded.
    pub fn matrix(&self, name: &str) -> Result<Matrix> {
        if self.mode == WeightsMode::Expanded {
            return Ok(Matrix::Dense(self.get(name)?));
        }
        match &self.source {
            Source::Safetensors(reads) => {
                if self.mode == WeightsMode::Q8_0
                    && let Some(q) = reads.read_q8_0(name, &self.device)?
                {
                    return Ok(Matrix::Quantized(std::sync::Arc::new(q)));
                }
                Ok(Matrix::Dense(reads.read(name)?.to_device(&self.device)?))
            }
            Source::Gguf { .. } => {
                let (gname, rope_heads) = self.gguf_name(name)?;
                // A tensor to reorder is read on the CPU, reordered, then placed on the device;
                // so is a dense one (`gguf_tensor`).
                let load_on = if rope_heads.is_some() {
                    &Device::Cpu
                } else {
                    &self.device
                };
                let m = match self.iq_matrix(&gname)? {
                    Some(m) => m,
                    None => Matrix::from_qtensor(self.gguf_tensor(&gname, load_on)?)?,
                };
                match rope_heads {
                    Some(n) => {
                        // The same reordering as `unpermute_rope_rows`, as a list of rows.
                        let (rows, _) = m.dims()?;
                        let index = Tensor::arange(0u32, rows as u32, &Device::Cpu)?
                            .to_dtype(DType::F32)?
                            .reshape((rows, 1))?;
                        let order: Vec<usize> = unpermute_rope_rows(&index, n)?
                            .flatten_all()?
                            .to_vec1::<f32>()?
                            .into_iter()
                            .map(|r| r as usize)
                            .collect();
                        m.permute_rows(&order, &self.device)
                    }
                    None => Ok(match m {
                        Matrix::Dense(t) => Matrix::Dense(t.to_device(&self.device)?),
                        quantized => quantized,
                    }),
                }
            }
        }
    }

    /// The tensor with this Hugging Face name, in the model's dtype, on its device.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        self.get_as(name, self.dtype)
    }

    /// The tensor with this Hugging Face name, in `dtype`, on the model's device.
    pub fn get_as(&self, name: &str, dtype: DType) -> Result<Tensor> {
        let t = match &self.source {
            Source::Safetensors(reads) => reads.read(name)?.to_device(&self.device)?,
            Source::Gguf { arch, files, .. } => {
                let (gname, rope_heads) = self.gguf_name(name)?;
                let mut t = match files.iquant_of(&gname) {
                    Some(_) => files.iquant_values(&gname, &self.device)?,
                    None => self
                        .gguf_tensor(&gname, &self.device)?
                        .dequantize(&self.device)?,
                };
                if let Some(n) = rope_heads {
                    t = unpermute_rope_rows(&t, n)?;
                }
                // convert_hf_to_gguf.py stores Gemma norms as 1 + w; the model adds the 1 itself.
                if arch.is_gemma() && gname.ends_with("norm.weight") {
                    t = (t - 1.0)?;
                }
                t
            }
        };
        t.to_dtype(dtype)
    }

    /// llama.cpp's name for a GGUF model's tensor, and — for Llama's q and k, whose rows
    /// llama.cpp permutes for its interleaved rotary embedding — the heads to undo that over.
    fn gguf_name(&self, name: &str) -> Result<(String, Option<usize>)> {
        let Source::Gguf {
            files,
            arch,
            heads,
            kv_heads,
        } = &self.source
        else {
            return Err(Error::Msg(format!("{name}: not a GGUF model")));
        };
        let gname = gguf_name(name, *arch).ok_or_else(|| {
            Error::Msg(format!(
                "{}: no GGUF tensor for {name}",
                files.path().display()
            ))
        })?;
        let rope_heads = match *arch {
            Arch::Llama if gname.ends_with("attn_q.weight") => Some(*heads),
            Arch::Llama if gname.ends_with("attn_k.weight") => Some(*kv_heads),
            _ => None,
        };
        Ok((gname, rope_heads))
    }

    /// An i-quant tensor kept in its blocks, when the model is on the CPU (`iq_rows`); None for
    /// any other tensor or device (on a GPU i-quants are read into Q8_0 or Q5_0 blocks).
    fn iq_matrix(&self, gname: &str) -> Result<Option<Matrix>> {
        let Source::Gguf { files, .. } = &self.source else {
            return Ok(None);
        };
        let Some(kind) = files.iquant_of(gname).filter(|_| self.keeps_own_blocks()) else {
            return Ok(None);
        };
        let blocks = files.iquant_blocks(gname)?;
        let at = |e: String| Error::Msg(format!("{}: {gname}: {e}", files.path().display()));
        let &[rows, cols] = blocks.dims.as_slice() else {
            return Err(at(format!("{:?}: not a matrix", blocks.dims)));
        };
        let m = IqMatrix::new(kind, rows, cols, blocks.bytes).map_err(|e| at(e.to_string()))?;
        Ok(Some(Matrix::Iq(std::sync::Arc::new(m))))
    }

    /// The i-quant types (with their tensor counts) that `matrix` holds in other blocks
    /// (`IQuant::held_as`: Q8_0 or Q5_0): on a GPU all; none on the CPU (kept in their own) or
    /// when expanded (their values read exactly).
    pub fn iquants_converted(&self) -> Vec<(IQuant, usize)> {
        let Source::Gguf { files, .. } = &self.source else {
            return Vec::new();
        };
        if self.mode == WeightsMode::Expanded || self.keeps_own_blocks() {
            return Vec::new();
        }
        files.iquant_counts()
    }

    /// Whether `matrix` keeps i-quant matrices in their own blocks (`iq_matrix`): on the CPU.
    fn keeps_own_blocks(&self) -> bool {
        self.device.is_cpu()
    }

    /// A GGUF tensor as stored, read onto `device` — except an unquantized one (F32, F16,
    /// BF16), read on the CPU for the caller to place once expanded: candle expands those on
    /// the CPU in any case (on CUDA it copies them back to the host first), and its CUDA f16
    /// expansion has no F16 case ("unsupported dtype for dequantize F16").
    fn gguf_tensor(&self, gname: &str, device: &Device) -> Result<candle_core::quantized::QTensor> {
        let Source::Gguf { files, .. } = &self.source else {
            return Err(Error::Msg(format!("{gname}: not a GGUF model")));
        };
        let dense = files.content.tensor_infos.get(gname).is_some_and(|i| {
            matches!(
                i.ggml_dtype,
                GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16
            )
        });
        let device = if dense { &Device::Cpu } else { device };
        files.tensor(gname, device)
    }
}

/// Undo convert_hf_to_gguf.py's `permute`: rows (heads, head_dim/2, 2) back to (heads, 2, head_dim/2).
fn unpermute_rope_rows(t: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = t.dims2()?;
    let half = rows / heads / 2;
    t.reshape((heads, half, 2, cols))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((rows, cols))
}

/// llama.cpp's tensor name for a transformers weight name.
fn gguf_name(hf: &str, arch: Arch) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, name) = rest.split_once('.')?;
    let (module, suffix) = name.rsplit_once('.')?;
    let mapped = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if arch.is_gemma() => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{mapped}.{suffix}"))
}

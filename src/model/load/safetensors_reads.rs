//! Tensors of safetensors files read with plain file reads rather than through the memory map.
//!
//! A judge's weights are copied out of the file once at load (onto the device, or converted:
//! `--weights q8_0`). Read through a map, each page read stays in the process's resident memory
//! as long as the map lives — the weights held twice: a 16 GB bf16 8B checkpoint peaked at
//! 22–24 GB resident on the CPU, 16.1 GB when loaded onto a GPU. Read here, the file's pages are
//! the kernel's cache, not the process's memory.

use crate::model::quant::q8_0_blocks;
use candle_core::quantized::k_quants::BlockQ8_0;
use candle_core::quantized::{GgmlType, QTensor};
use candle_core::{DType, Device, Error, Result, Tensor};
use half::{bf16, f16};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Where each tensor of a checkpoint's safetensors files is.
pub struct SafetensorsReads {
    tensors: HashMap<String, Entry>,
}

struct Entry {
    file: PathBuf,
    /// From the start of the file.
    start: u64,
    len: u64,
    /// Err: the file's name of a dtype hyoka does not read weights in (an integer buffer of some
    /// checkpoints): an error when read, not when listed.
    dtype: std::result::Result<DType, String>,
    shape: Vec<usize>,
}

impl Entry {
    /// The tensor's values, read straight into their memory (safetensors is little-endian, as
    /// every target hyoka builds for).
    fn values<T: candle_core::WithDType + bytemuck::Pod>(&self, name: &str) -> Result<Tensor> {
        const _: () = assert!(cfg!(target_endian = "little"));
        let mut f = self.open(name)?;
        // Zeroed by the allocator (fresh pages, not a pass over them before the read's).
        let mut values: Vec<T> =
            bytemuck::allocation::zeroed_vec(self.len as usize / std::mem::size_of::<T>());
        f.read_exact(bytemuck::cast_slice_mut(&mut values))
            .map_err(|err| self.io_error(name, err))?;
        Tensor::from_vec(values, self.shape.as_slice(), &Device::Cpu)
    }

    /// The file, at the tensor's first byte.
    fn open(&self, name: &str) -> Result<std::fs::File> {
        let mut f = std::fs::File::open(&self.file).map_err(|err| self.io_error(name, err))?;
        f.seek(SeekFrom::Start(self.start))
            .map_err(|err| self.io_error(name, err))?;
        Ok(f)
    }

    fn io_error(&self, name: &str, err: std::io::Error) -> Error {
        Error::Msg(format!("{}: {name}: {err}", self.file.display()))
    }

    fn dtype(&self, name: &str) -> Result<DType> {
        self.dtype.clone().map_err(|other| {
            Error::Msg(format!(
                "{}: tensor {name}: dtype {other}; hyoka reads BF16, F16 and F32 weights",
                self.file.display()
            ))
        })
    }
}

impl SafetensorsReads {
    /// Read the headers of `files`.
    pub fn new(files: &[PathBuf]) -> Result<Self> {
        let mut tensors = HashMap::new();
        for file in files {
            for (name, entry) in header(file)? {
                tensors.insert(name, entry);
            }
        }
        Ok(SafetensorsReads { tensors })
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::Msg(format!("weight {name}: not in the checkpoint")))
    }

    /// The tensor `name` on the CPU, in its file dtype, read straight into its values (an 8B's
    /// 1 GB embedding is not also held as bytes).
    pub fn read(&self, name: &str) -> Result<Tensor> {
        let e = self.entry(name)?;
        match e.dtype(name)? {
            DType::BF16 => e.values::<bf16>(name),
            DType::F16 => e.values::<f16>(name),
            _ => e.values::<f32>(name),
        }
    }

    /// The matrix `name` in Q8_0 blocks on `device`, quantized from its file bytes a few MiB of
    /// rows at a time on all threads (`q8_0_blocks`): nothing but the blocks is held whole. None
    /// when it is not a matrix of whole 32-value blocks per row (llama.cpp's converter keeps such
    /// tensors in their dtype).
    pub fn read_q8_0(&self, name: &str, device: &Device) -> Result<Option<QTensor>> {
        self.read_q8_0_in(name, device, CHUNK_BYTES)
    }

    fn read_q8_0_in(
        &self,
        name: &str,
        device: &Device,
        chunk_bytes: usize,
    ) -> Result<Option<QTensor>> {
        let e = self.entry(name)?;
        let dtype = e.dtype(name)?;
        let [rows, cols] = e.shape[..] else {
            return Ok(None);
        };
        if !cols.is_multiple_of(q8_0_blocks::BLOCK) || rows == 0 {
            return Ok(None);
        }
        let mut f = e.open(name)?;
        let in_row = cols * dtype.size_in_bytes();
        let out_row = cols / q8_0_blocks::BLOCK;
        let chunk_rows = (chunk_bytes / in_row).max(1);
        let mut out = vec![BlockQ8_0::zeros(); rows * out_row];
        let mut bytes = vec![0u8; chunk_rows.min(rows) * in_row];
        for out in out.chunks_mut(chunk_rows * out_row) {
            let take = out.len() / out_row * in_row;
            f.read_exact(&mut bytes[..take])
                .map_err(|err| e.io_error(name, err))?;
            q8_0_blocks::quantize_rows(&bytes[..take], dtype, cols, out);
        }
        Ok(Some(q8_0_blocks::onto(out, vec![rows, cols], device)?))
    }
}

/// File bytes read and quantized at a time (`read_q8_0`).
const CHUNK_BYTES: usize = 64 << 20;

/// The tensors a safetensors file's header lists. (The safetensors crate's `read_metadata`
/// wants the whole file as one buffer: the map this module avoids.)
fn header(file: &Path) -> Result<Vec<(String, Entry)>> {
    let bad = |what: String| Error::Msg(format!("{}: {what}", file.display()));
    let mut f = std::fs::File::open(file).map_err(|e| bad(e.to_string()))?;
    let size = f.metadata().map_err(|e| bad(e.to_string()))?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| bad(e.to_string()))?;
    let len = u64::from_le_bytes(len);
    // safetensors' own bound on a header (100 MB).
    if len > 100_000_000 || 8 + len > size {
        return Err(bad(format!("a header of {len} bytes")));
    }
    let mut text = vec![0u8; len as usize];
    f.read_exact(&mut text).map_err(|e| bad(e.to_string()))?;
    let json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&text).map_err(|e| bad(format!("header: {e}")))?;
    let data_start = 8 + len;
    let mut out = Vec::new();
    for (name, t) in json {
        if name == "__metadata__" {
            continue;
        }
        let field = |key: &str| {
            t.get(key)
                .ok_or_else(|| bad(format!("tensor {name}: no {key}")))
        };
        let dtype_name = field("dtype")?
            .as_str()
            .ok_or_else(|| bad(format!("tensor {name}: dtype not a string")))?;
        let (dtype, element_bytes) = match dtype_name {
            "BF16" => (Ok(DType::BF16), 2),
            "F16" => (Ok(DType::F16), 2),
            "F32" => (Ok(DType::F32), 4),
            // safetensors' other dtypes, by their sizes.
            "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => (Err(dtype_name.to_string()), 1),
            "U16" | "I16" => (Err(dtype_name.to_string()), 2),
            "U32" | "I32" => (Err(dtype_name.to_string()), 4),
            "U64" | "I64" | "F64" => (Err(dtype_name.to_string()), 8),
            other => return Err(bad(format!("tensor {name}: dtype {other:?}"))),
        };
        let numbers = |key: &str| -> Result<Vec<u64>> {
            field(key)?
                .as_array()
                .and_then(|a| a.iter().map(|v| v.as_u64()).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| bad(format!("tensor {name}: {key} not a list of numbers")))
        };
        let shape: Vec<usize> = numbers("shape")?.into_iter().map(|d| d as usize).collect();
        let offsets = numbers("data_offsets")?;
        let (begin, end) = match offsets[..] {
            [b, e] if b <= e && data_start.checked_add(e).is_some_and(|end| end <= size) => (b, e),
            _ => return Err(bad(format!("tensor {name}: data_offsets {offsets:?}"))),
        };
        let bytes = shape
            .iter()
            .try_fold(element_bytes, |n: u64, &d| n.checked_mul(d as u64));
        if bytes != Some(end - begin) {
            return Err(bad(format!(
                "tensor {name}: {shape:?} {dtype_name} in {} bytes",
                end - begin
            )));
        }
        out.push((
            name,
            Entry {
                file: file.to_path_buf(),
                start: data_start + begin,
                len: end - begin,
                dtype,
                shape,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny checkpoints read apart equal candle's safetensors reader, tensor for tensor;
    /// damaged headers are errors naming the file, never a panic or a huge allocation.
    #[test]
    fn reads_what_candle_reads_and_refuses_damaged_headers() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tiny/qwen2/model.safetensors");
        let reads = SafetensorsReads::new(std::slice::from_ref(&file)).unwrap();
        let all = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
        assert_eq!(reads.tensors.len(), all.len());
        for (name, t) in &all {
            let got = reads.read(name).unwrap();
            assert_eq!(got.dims(), t.dims(), "{name}");
            let (a, b) = (got.flatten_all().unwrap(), t.flatten_all().unwrap());
            assert_eq!(
                a.to_vec1::<f32>().unwrap(),
                b.to_vec1::<f32>().unwrap(),
                "{name}"
            );
        }
        // Matrices quantized from their bytes a few rows at a time (here 3 rows a read): the
        // blocks of candle's quantizer on the whole matrix; vectors are left to `read`.
        for (name, t) in &all {
            let chunk = 3 * t.dims().last().unwrap() * 4;
            let got = reads.read_q8_0_in(name, &Device::Cpu, chunk).unwrap();
            if t.rank() != 2 {
                assert!(got.is_none(), "{name}");
                continue;
            }
            let want = QTensor::quantize(t, candle_core::quantized::GgmlDType::Q8_0).unwrap();
            assert_eq!(got.unwrap().data().unwrap(), want.data().unwrap(), "{name}");
        }
        let dir = tempfile::tempdir().unwrap();
        // A tensor of a dtype hyoka reads no weights in is listed, and refused only when read.
        let mixed = dir.path().join("mixed.safetensors");
        let ids = Tensor::new(&[[1i64, 2, 3]], &Device::Cpu).unwrap();
        let norm = Tensor::new(&[0.5f32, 2.0], &Device::Cpu).unwrap();
        let w = Tensor::new(&[[1.5f32, -2.0, 3.25], [0.0, 7.0, -0.125]], &Device::Cpu).unwrap();
        let (w16, wb16) = (
            w.to_dtype(DType::F16).unwrap(),
            w.to_dtype(DType::BF16).unwrap(),
        );
        candle_core::safetensors::save(
            &HashMap::from([
                ("ids".to_string(), ids),
                ("norm".to_string(), norm),
                ("w16".to_string(), w16),
                ("wb16".to_string(), wb16),
            ]),
            &mixed,
        )
        .unwrap();
        let reads = SafetensorsReads::new(std::slice::from_ref(&mixed)).unwrap();
        for name in ["w16", "wb16"] {
            let got = reads.read(name).unwrap();
            assert_eq!(got.dims(), [2, 3]);
            let got = got.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
            assert_eq!(got, w.to_vec2::<f32>().unwrap(), "{name}");
        }
        assert_eq!(
            reads.read("norm").unwrap().to_vec1::<f32>().unwrap(),
            [0.5, 2.0]
        );
        let err = reads.read("ids").unwrap_err().to_string();
        assert!(
            err.contains("mixed.safetensors") && err.contains("I64"),
            "{err}"
        );
        let bytes = std::fs::read(&file).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("cut.safetensors", bytes[..header_len / 2].to_vec()),
            (
                "huge.safetensors",
                [u64::MAX.to_le_bytes().as_slice(), &bytes[8..]].concat(),
            ),
        ];
        let text = String::from_utf8(bytes[8..8 + header_len].to_vec()).unwrap();
        let offsets = text.find("\"data_offsets\":[").unwrap() + "\"data_offsets\":[".len();
        let mut far = bytes.clone();
        far[8 + offsets..8 + offsets + 1].copy_from_slice(b"9");
        cases.push(("offsets.safetensors", far));
        for (name, content) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            let err = SafetensorsReads::new(std::slice::from_ref(&path))
                .err()
                .map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(name)),
                "{name}: {err:?}"
            );
        }
    }
}

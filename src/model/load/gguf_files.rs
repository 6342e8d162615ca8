//! A GGUF model as one file or as the shards llama.cpp's `llama-gguf-split` writes —
//! `PREFIX-00001-of-0000N.gguf` … `PREFIX-0000N-of-0000N.gguf` — read as one model. Qwen's own
//! GGUF repositories ship their larger 7B/14B files so, and llama.cpp loads them given the first
//! shard; hyoka does the same, given any of them.
//!
//! Every shard is a GGUF file of its own with `split.no` (0-based), `split.count` and
//! `split.tensors.count`; the model's metadata is in the first shard only, and each tensor is in
//! exactly one shard (the first may hold none: `--no-tensor-first-split`).

use crate::model::error::ModelError;
use crate::model::load::gguf_tensor_reads::{
    IQUANT_CHUNK_BLOCKS, IQuantBlocks, iquant_to_held, read_in_place, read_iquant_bytes,
};
use crate::model::load::gguf_types;
use crate::model::quant::{IQuant, iquants};
use candle_core::quantized::{QTensor, gguf_file};
use candle_core::{Device, Error, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct GgufFiles {
    /// The model's metadata (the first shard's) and every shard's tensor descriptions. Its
    /// `tensor_data_offset` is the first shard's: read tensors with [`GgufFiles::tensor`]. An
    /// i-quant tensor is described as the Q8_0 tensor it is read into (see `iquants`).
    pub content: gguf_file::Content,
    shards: Vec<Shard>,
    /// The shard of each tensor.
    shard_of: HashMap<String, usize>,
    /// The tensors stored as i-quants, with their type.
    iquants: HashMap<String, IQuant>,
}

/// A shard's header: its metadata and tensors as candle reads them, its i-quant tensors, and
/// the file, kept open.
type ShardHeader = (gguf_file::Content, HashMap<String, IQuant>, std::fs::File);

struct Shard {
    path: PathBuf,
    tensor_data_offset: u64,
    file: Mutex<std::fs::File>,
}

impl Shard {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, std::fs::File>> {
        self.file
            .lock()
            .map_err(|_| Error::Msg("GGUF file lock poisoned".into()))
    }
}

/// The names of all shards of a split GGUF, from the name of one of them:
/// `PREFIX-0000K-of-0000N.gguf` → N names (a folder in the name is kept); None for a name
/// not so formed.
pub fn shard_names(name: &str) -> Option<Vec<String>> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !(digits(no) && digits(count)) {
        return None;
    }
    let (no, count): (usize, usize) = (no.parse().ok()?, count.parse().ok()?);
    if no == 0 || no > count {
        return None;
    }
    Some(
        (1..=count)
            .map(|i| format!("{prefix}-{i:05}-of-{count:05}.gguf"))
            .collect(),
    )
}

/// The GGUF file of a repository's `files` that a quantization tag names (`Q4_K_M`, `q8_0`,
/// `IQ4_XS`…, as llama.cpp's `-hf ORG/NAME:TAG` takes it): the one `.gguf` whose path holds the
/// tag as a whole word (any case; `Q4_K` is not `Q4_K_M`'s), or the first shard of the one split
/// GGUF that does. Multimodal projectors (`mmproj`) are not models. Err: a message listing what
/// matched, or the repository's GGUF files when nothing did.
pub fn file_for_tag(files: &[String], tag: &str) -> std::result::Result<String, String> {
    let tag_lower = tag.to_lowercase();
    let is_word = |path: &str| {
        let lower = path.to_lowercase();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        lower.match_indices(&tag_lower).any(|(at, _)| {
            !word(lower[..at].chars().next_back())
                && !word(lower[at + tag_lower.len()..].chars().next())
        })
    };
    let models = gguf_models(files);
    let mut chosen: Vec<String> = models.iter().filter(|f| is_word(f)).cloned().collect();
    match chosen.len() {
        1 => Ok(chosen.remove(0)),
        0 if models.is_empty() => Err("the repository holds no .gguf file".into()),
        0 => Err(format!(
            "no .gguf file names {tag}; the repository's: {}",
            listing(&models)
        )),
        _ => Err(format!(
            "{tag} names several files: {}; give one as ORG/NAME:FILE.gguf",
            listing(&chosen)
        )),
    }
}

/// The GGUF models among a repository's `files`: each `.gguf` but multimodal projectors
/// (`mmproj`), a split GGUF once, as its first shard; in the listing's order.
pub fn gguf_models(files: &[String]) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for f in files {
        let lower = f.to_lowercase();
        if !lower.ends_with(".gguf") || lower.contains("mmproj") {
            continue;
        }
        let first = shard_names(f).map_or_else(|| f.clone(), |names| names[0].clone());
        if !models.contains(&first) {
            models.push(first);
        }
    }
    models
}

/// Names for a message: the first 30, then how many more.
pub fn listing(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(30).map(String::as_str).collect();
    match names.len() - shown.len() {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

impl GgufFiles {
    /// Open `path`: a whole GGUF file, or any shard of a split one (the others beside it).
    pub fn open(path: &Path) -> std::result::Result<Self, ModelError> {
        let given = read_header(path)?;
        let Some((no, count)) = split_of(path, &given.0)? else {
            return Self::from_shards(vec![(path.to_path_buf(), given)]);
        };
        let origin = path.display().to_string();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let names = shard_names(&name)
            .filter(|names| names.len() == count && names[no] == name)
            .ok_or_else(|| ModelError::Missing {
                origin: origin.clone(),
                message: format!(
                    "shard {} of {count} of a split GGUF, but not named \
                     PREFIX-{:05}-of-{count:05}.gguf as llama-gguf-split names it, so its other \
                     shards cannot be found: restore the names, or merge the shards into one file \
                     (llama-gguf-split --merge FIRST-SHARD OUT.gguf)",
                    no + 1,
                    no + 1
                ),
            })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut given = Some(given);
        let mut shards = Vec::with_capacity(count);
        for (i, shard_name) in names.iter().enumerate() {
            let shard = dir.join(shard_name);
            let header = if i == no {
                given.take().expect("the given shard is read once")
            } else {
                if !shard.is_file() {
                    return Err(ModelError::Missing {
                        origin: origin.clone(),
                        message: format!(
                            "shard {} of {count} ({}) is missing: a split GGUF needs all its \
                             shards in one folder",
                            i + 1,
                            shard.display()
                        ),
                    });
                }
                read_header(&shard)?
            };
            if split_of(&shard, &header.0)? != Some((i, count)) {
                return Err(ModelError::Missing {
                    origin: shard.display().to_string(),
                    message: format!(
                        "is not shard {} of {count} of the split GGUF {origin} (its split.no / \
                         split.count say otherwise): shards of different files mixed?",
                        i + 1
                    ),
                });
            }
            shards.push((shard, header));
        }
        let expected_tensors = given_tensor_count(&shards[0].1.0);
        let files = Self::from_shards(shards)?;
        if let Some(expected) = expected_tensors
            && expected != files.content.tensor_infos.len()
        {
            return Err(ModelError::Missing {
                origin,
                message: format!(
                    "its {count} shards hold {} tensors, split.tensors.count says {expected}",
                    files.content.tensor_infos.len()
                ),
            });
        }
        Ok(files)
    }

    /// Merge the shards' tensor descriptions, keeping each shard's file open for its tensors'
    /// reads; a tensor in two shards is an error.
    fn from_shards(shards: Vec<(PathBuf, ShardHeader)>) -> std::result::Result<Self, ModelError> {
        let mut merged: Option<gguf_file::Content> = None;
        let mut shard_of = HashMap::new();
        let mut all_iquants = HashMap::new();
        let mut opened = Vec::with_capacity(shards.len());
        for (i, (path, (mut content, iquants, file))) in shards.into_iter().enumerate() {
            all_iquants.extend(iquants);
            opened.push(Shard {
                path: path.clone(),
                tensor_data_offset: content.tensor_data_offset,
                file: Mutex::new(file),
            });
            let infos = std::mem::take(&mut content.tensor_infos);
            let merged = merged.get_or_insert(content);
            for (name, info) in infos {
                if shard_of.insert(name.clone(), i).is_some() {
                    return Err(ModelError::Missing {
                        origin: path.display().to_string(),
                        message: format!("tensor {name} is also in an earlier shard"),
                    });
                }
                merged.tensor_infos.insert(name, info);
            }
        }
        Ok(GgufFiles {
            content: merged.expect("at least one shard"),
            shards: opened,
            shard_of,
            iquants: all_iquants,
        })
    }

    /// The files, in shard order (one for a whole file).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.shards.iter().map(|s| s.path.clone()).collect()
    }

    /// The first (or only) file: the one that names the model in messages.
    pub fn path(&self) -> &Path {
        &self.shards[0].path
    }

    /// A tensor's description and shard.
    fn locate(&self, name: &str) -> Result<(&gguf_file::TensorInfo, &Shard)> {
        match (self.content.tensor_infos.get(name), self.shard_of.get(name)) {
            (Some(info), Some(&i)) => Ok((info, &self.shards[i])),
            _ => Err(Error::Msg(format!(
                "{}: no tensor {name}",
                self.path().display()
            ))),
        }
    }

    /// A tensor as stored, read from its shard onto `device` (an i-quant in the blocks it is
    /// held in: `IQuant::held_as`).
    pub fn tensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let (info, shard) = self.locate(name)?;
        let at = |e: Error| Error::Msg(format!("{}: tensor {name}: {e}", shard.path.display()));
        if !self.iquants.contains_key(name) {
            let mut file = shard.lock()?;
            return match device {
                Device::Cpu => read_in_place(&mut file, shard.tensor_data_offset, info),
                _ => info.read(&mut *file, shard.tensor_data_offset, device),
            }
            .map_err(at);
        }
        let blocks = self.iquant_blocks(name)?;
        // Converted on all threads with the file free for other tensors' reads.
        iquant_to_held(&blocks.bytes, info, blocks.kind, device).map_err(at)
    }

    /// An i-quant tensor's type, shape and file bytes (whole blocks along its rows).
    pub fn iquant_blocks(&self, name: &str) -> Result<IQuantBlocks> {
        let (info, shard) = self.locate(name)?;
        let Some(&kind) = self.iquants.get(name) else {
            return Err(Error::Msg(format!(
                "{}: tensor {name} is no i-quant",
                shard.path.display()
            )));
        };
        let mut file = shard.lock()?;
        read_iquant_bytes(&mut file, shard.tensor_data_offset, info, kind)
            .map(|bytes| IQuantBlocks {
                kind,
                dims: info.shape.dims().to_vec(),
                bytes,
            })
            .map_err(|e| Error::Msg(format!("{}: tensor {name}: {e}", shard.path.display())))
    }

    /// The i-quant type a tensor is stored in, if any.
    pub fn iquant_of(&self, name: &str) -> Option<IQuant> {
        self.iquants.get(name).copied()
    }

    /// An i-quant tensor's values in f32 on `device`, exactly as ggml decodes them (not through
    /// the Q8_0 blocks `tensor` gives).
    pub fn iquant_values(&self, name: &str, device: &Device) -> Result<candle_core::Tensor> {
        let IQuantBlocks { kind, dims, bytes } = self.iquant_blocks(name)?;
        let mut values = vec![0f32; dims.iter().product()];
        bytes
            .par_chunks(IQUANT_CHUNK_BLOCKS * kind.block_bytes())
            .zip(values.par_chunks_mut(IQUANT_CHUNK_BLOCKS * kind.block_values()))
            .for_each(|(src, dst)| dst.copy_from_slice(&iquants::dequantize(kind, src)));
        candle_core::Tensor::from_vec(values, dims, device)
    }

    /// The i-quant types the model's tensors are stored in, by name.
    pub fn iquant_types(&self) -> Vec<IQuant> {
        self.iquant_counts().into_iter().map(|(t, _)| t).collect()
    }

    /// The i-quant types the model's tensors are stored in, by name, each with its tensors.
    pub fn iquant_counts(&self) -> Vec<(IQuant, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for t in self.iquants.values() {
            counts.entry(t.name()).or_insert((*t, 0)).1 += 1;
        }
        counts.into_values().collect()
    }
}

/// Read a GGUF file's header with candle (and keep the file open for its tensors). Tensors of
/// the types candle does not know are found by walking the header without it: i-quants are
/// described as Q8_0 tensors (what they are read into) and listed; any other type is named, with
/// its tensors.
/// A shard's header, with every tensor's data offset checked against the file's alignment (as
/// llama.cpp's reader checks it: `general.alignment`, 32 by default).
fn read_header(path: &Path) -> std::result::Result<ShardHeader, ModelError> {
    let header = read_header_unchecked(path)?;
    let content = &header.0;
    let alignment = content
        .metadata
        .get("general.alignment")
        .and_then(|v| v.to_u32().ok())
        .unwrap_or(32) as u64;
    let bad = |field: String, message: String| ModelError::Config {
        origin: path.display().to_string(),
        field,
        message,
    };
    if alignment == 0 || !alignment.is_power_of_two() {
        return Err(bad(
            "general.alignment".into(),
            format!("{alignment}: must be a power of two"),
        ));
    }
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let offset = content.tensor_infos[name].offset;
        if !offset.is_multiple_of(alignment) {
            return Err(bad(
                name.clone(),
                format!(
                    "data offset {offset} is not a multiple of the file's alignment {alignment} (llama.cpp refuses such a file)"
                ),
            ));
        }
    }
    Ok(header)
}

fn read_header_unchecked(path: &Path) -> std::result::Result<ShardHeader, ModelError> {
    let mut file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let not_gguf = |e: Error| {
        // candle adds a backtrace to its message when RUST_BACKTRACE is set: not for users.
        let e = match e {
            Error::WithBacktrace { inner, .. } => *inner,
            e => e,
        };
        ModelError::Missing {
            origin: path.display().to_string(),
            message: format!("not a readable GGUF file: {e}"),
        }
    };
    let first_error = match gguf_file::Content::read(&mut file) {
        Ok(content) => return Ok((content, HashMap::new(), file)),
        Err(e) => e,
    };
    let header = match gguf_types::walk_header(path) {
        Ok(header) if !header.unreadable.is_empty() => header,
        _ => return Err(not_gguf(first_error)),
    };
    let others: Vec<_> = header
        .unreadable
        .iter()
        .filter(|t| IQuant::from_type_id(t.type_id).is_none())
        .collect();
    if !others.is_empty() {
        return Err(ModelError::Unsupported {
            origin: path.display().to_string(),
            what: gguf_types::describe(&gguf_types::by_type(others)),
        });
    }
    // candle reads the header with each i-quant's type number made Q8_0's.
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = vec![0u8; header.end as usize];
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.read_exact(&mut bytes).map_err(io)?;
    let q8_0 = 8u32.to_le_bytes();
    let mut iquants = HashMap::new();
    for t in &header.unreadable {
        let at = t.type_at as usize;
        bytes[at..at + 4].copy_from_slice(&q8_0);
        if let Some(kind) = IQuant::from_type_id(t.type_id) {
            iquants.insert(t.name.clone(), kind);
        }
    }
    let content = gguf_file::Content::read(&mut std::io::Cursor::new(bytes)).map_err(not_gguf)?;
    Ok((content, iquants, file))
}

/// (split.no, split.count) of a shard of a split GGUF; None for a whole file.
fn split_of(
    path: &Path,
    content: &gguf_file::Content,
) -> std::result::Result<Option<(usize, usize)>, ModelError> {
    let field = |key: &str| -> std::result::Result<Option<usize>, ModelError> {
        content
            .metadata
            .get(key)
            .map(|v| {
                v.to_u64()
                    .map(|n| n as usize)
                    .map_err(|e| ModelError::Config {
                        origin: path.display().to_string(),
                        field: key.into(),
                        message: e.to_string(),
                    })
            })
            .transpose()
    };
    let count = field("split.count")?.unwrap_or(1);
    if count <= 1 {
        return Ok(None);
    }
    let no = field("split.no")?.ok_or_else(|| ModelError::Config {
        origin: path.display().to_string(),
        field: "split.no".into(),
        message: format!("missing in a shard of a split.count = {count} file"),
    })?;
    if no >= count {
        return Err(ModelError::Config {
            origin: path.display().to_string(),
            field: "split.no".into(),
            message: format!("{no}, but split.count is {count}"),
        });
    }
    Ok(Some((no, count)))
}

fn given_tensor_count(content: &gguf_file::Content) -> Option<usize> {
    content
        .metadata
        .get("split.tensors.count")
        .and_then(|v| v.to_i32().ok())
        .and_then(|n| usize::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::{GgufFiles, file_for_tag, shard_names};
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    use candle_core::{Device, Tensor};

    const TYPES: [GgmlDType; 15] = [
        GgmlDType::Q8_1,
        GgmlDType::Q8K,
        GgmlDType::F32,
        GgmlDType::F16,
        GgmlDType::BF16,
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];

    /// A tensor read into its blocks in place holds exactly the blocks candle's own reader
    /// gives, for every type candle reads; a file cut short is an error naming the tensor.
    #[test]
    fn tensors_read_in_place_are_candles_blocks() {
        let dev = Device::Cpu;
        let values = Tensor::randn(0f32, 1.0, (3, 512), &dev).unwrap();
        let tensors: Vec<(String, QTensor)> = TYPES
            .iter()
            .map(|&t| (format!("t.{t:?}"), QTensor::quantize(&values, t).unwrap()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("types.gguf");
        let named: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut file = std::fs::File::create(&path).unwrap();
        gguf_file::write(&mut file, &[], &named).unwrap();
        drop(file);

        let files = GgufFiles::open(&path).unwrap();
        let mut reader = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut reader).unwrap();
        for (name, _) in &tensors {
            let want = content.tensor(&mut reader, name, &dev);
            let got = files.tensor(name, &dev);
            let (Ok(want), Ok(got)) = (&want, &got) else {
                // Q8_1 and Q8_K, refused by both.
                assert!(want.is_err() && got.is_err(), "{name}");
                assert!(name.ends_with("Q8_1") || name.ends_with("Q8K"), "{name}");
                continue;
            };
            assert_eq!(got.dtype(), want.dtype(), "{name}");
            assert_eq!(got.shape(), want.shape(), "{name}");
            assert_eq!(got.data().unwrap(), want.data().unwrap(), "{name}");
        }

        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 100)
            .unwrap();
        let files = GgufFiles::open(&path).unwrap();
        let last = &tensors.last().unwrap().0;
        let err = files.tensor(last, &dev).unwrap_err().to_string();
        assert!(
            err.contains(last.as_str()) && err.contains("needs") && err.contains("types.gguf"),
            "{err}"
        );
        assert!(files.tensor(&tensors[2].0, &dev).is_ok());
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// File lists in the forms of Qwen's own GGUF repositories (split files), of repositories
    /// with one file per type (and types whose names contain others'), and of one type per
    /// folder.
    #[test]
    fn a_tag_names_one_file_or_one_split_file() {
        let qwen = names(&[
            ".gitattributes",
            "README.md",
            "qwen2.5-7b-instruct-fp16-00001-of-00004.gguf",
            "qwen2.5-7b-instruct-fp16-00002-of-00004.gguf",
            "qwen2.5-7b-instruct-q4_0-00001-of-00002.gguf",
            "qwen2.5-7b-instruct-q4_0-00002-of-00002.gguf",
            "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
            "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf",
            "qwen2.5-7b-instruct-q8_0-00002-of-00003.gguf",
            "qwen2.5-7b-instruct-q8_0-00001-of-00003.gguf",
            "qwen2.5-7b-instruct-q8_0-00003-of-00003.gguf",
            "qwen2.5-7b-instruct-q2_k.gguf",
        ]);
        let err = file_for_tag(&qwen, "Q5_K_M").unwrap_err();
        assert!(
            err.contains("no .gguf file names Q5_K_M") && err.contains("q2_k.gguf"),
            "{err}"
        );

        let one_per_type = names(&[
            "ELYZA-JP-8B-Q4_K.gguf",
            "ELYZA-JP-8B-Q4_K_M.gguf",
            "ELYZA-JP-8B-IQ4_XS.gguf",
            "ELYZA-JP-8B-Q4_K_M-mmproj-f16.gguf",
            "ELYZA-JP-8B-Q8_0.gguf",
        ]);
        for (files, tag, want) in [
            (
                &qwen,
                "Q4_K_M",
                "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
            ),
            (
                &qwen,
                "q8_0",
                "qwen2.5-7b-instruct-q8_0-00001-of-00003.gguf",
            ),
            (&qwen, "Q2_K", "qwen2.5-7b-instruct-q2_k.gguf"),
            (&one_per_type, "Q4_K", "ELYZA-JP-8B-Q4_K.gguf"),
            (&one_per_type, "q4_k_m", "ELYZA-JP-8B-Q4_K_M.gguf"),
            (&one_per_type, "IQ4_XS", "ELYZA-JP-8B-IQ4_XS.gguf"),
        ] {
            assert_eq!(file_for_tag(files, tag).unwrap(), want, "{tag}");
        }
        assert!(file_for_tag(&one_per_type, "Q4_XS").is_err());

        let folders = names(&[
            "Q4_K_M/model-Q4_K_M-00001-of-00002.gguf",
            "Q4_K_M/model-Q4_K_M-00002-of-00002.gguf",
            "Q6_K/model-Q6_K.gguf",
            "model-Q4_K_M.gguf",
        ]);
        let err = file_for_tag(&folders, "Q4_K_M").unwrap_err();
        assert!(
            err.contains("several files")
                && err.contains("Q4_K_M/model-Q4_K_M-00001-of-00002.gguf, model-Q4_K_M.gguf"),
            "{err}"
        );
        assert_eq!(
            file_for_tag(&folders, "q6_k").unwrap(),
            "Q6_K/model-Q6_K.gguf"
        );
        assert!(
            file_for_tag(&names(&["config.json"]), "Q4_K_M")
                .unwrap_err()
                .contains("no .gguf file")
        );
    }

    #[test]
    fn shard_names_as_llama_gguf_split_writes_them() {
        assert_eq!(
            shard_names("Q4_K_M/qwen2.5-14b-instruct-q4_k_m-00002-of-00003.gguf").unwrap(),
            [
                "Q4_K_M/qwen2.5-14b-instruct-q4_k_m-00001-of-00003.gguf",
                "Q4_K_M/qwen2.5-14b-instruct-q4_k_m-00002-of-00003.gguf",
                "Q4_K_M/qwen2.5-14b-instruct-q4_k_m-00003-of-00003.gguf",
            ]
        );
        for not_a_shard in [
            "model.gguf",
            "model-1-of-3.gguf",
            "model-00004-of-00003.gguf",
            "model-00000-of-00003.gguf",
            "model-00001-of-00003.bin",
        ] {
            assert_eq!(shard_names(not_a_shard), None, "{not_a_shard}");
        }
    }
}

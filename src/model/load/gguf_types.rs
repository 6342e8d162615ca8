//! The tensor types of a GGUF file, read without candle, for what candle's reader cannot say:
//! which tensors hold a type it does not know, and where. candle stops at the first such tensor
//! with "unknown dtype for tensor 20"; hyoka reads the i-quants itself (`iquants`), and a user
//! with a file of another type (TQ1_0, MXFP4…) needs to hear which type is the problem, which of
//! its tensors hold it, and what to take instead.

use crate::model::quant::ggml_type_name as type_name;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

/// The types hyoka reads (what candle's GGUF reader knows, and the i-quants), as a sentence.
pub const READABLE: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the K-quants Q2_K, \
                            Q3_K, Q4_K, Q5_K, Q6_K and the i-quants IQ1_S, IQ1_M, IQ2_XXS, \
                            IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS";

/// Whether candle reads tensors of GGML type `id`.
pub fn candle_reads(id: u32) -> bool {
    matches!(id, 0..=3 | 6..=15 | 30)
}

/// Tensors of one type candle cannot read.
#[derive(Debug, PartialEq)]
pub struct Unreadable {
    pub type_id: u32,
    pub count: usize,
    pub first_tensor: String,
}

/// A tensor of a type candle cannot read, where its header says so.
#[derive(Debug, PartialEq)]
pub struct UnreadableTensor {
    pub name: String,
    pub type_id: u32,
    /// Where in the file its type number (u32) lies.
    pub type_at: u64,
}

/// A GGUF header walked without candle: the tensors of types candle cannot read, and where the
/// tensor descriptions end (the tensor data follows, aligned).
#[derive(Debug)]
pub struct Header {
    pub unreadable: Vec<UnreadableTensor>,
    pub end: u64,
}

/// Walk `path`'s header. Err: the header itself is not GGUF v2/v3 as written.
pub fn walk_header(path: &Path) -> std::io::Result<Header> {
    let mut r = BufReader::new(std::fs::File::open(path)?);
    if &bytes::<4>(&mut r)? != b"GGUF" {
        return Err(bad("no GGUF magic"));
    }
    if !matches!(u32::from_le_bytes(bytes(&mut r)?), 2 | 3) {
        return Err(bad("not GGUF version 2 or 3"));
    }
    let tensors = u64::from_le_bytes(bytes(&mut r)?);
    let keys = u64::from_le_bytes(bytes(&mut r)?);
    for _ in 0..keys {
        skip_string(&mut r)?;
        let value_type = u32::from_le_bytes(bytes(&mut r)?);
        skip_value(&mut r, value_type)?;
    }
    let mut unreadable = Vec::new();
    for _ in 0..tensors {
        let name = read_string(&mut r)?;
        let dims = u32::from_le_bytes(bytes(&mut r)?);
        if dims > 8 {
            return Err(bad("a tensor of more than 8 dimensions"));
        }
        r.seek_relative(8 * i64::from(dims))?;
        let type_at = r.stream_position()?;
        let type_id = u32::from_le_bytes(bytes(&mut r)?);
        r.seek_relative(8)?; // offset
        if !candle_reads(type_id) {
            unreadable.push(UnreadableTensor {
                name,
                type_id,
                type_at,
            });
        }
    }
    let end = r.stream_position()?;
    Ok(Header { unreadable, end })
}

/// `tensors` by type, in the order each type's first tensor comes.
pub fn by_type<'a>(tensors: impl IntoIterator<Item = &'a UnreadableTensor>) -> Vec<Unreadable> {
    let mut found: Vec<Unreadable> = Vec::new();
    for t in tensors {
        match found.iter_mut().find(|u| u.type_id == t.type_id) {
            Some(u) => u.count += 1,
            None => found.push(Unreadable {
                type_id: t.type_id,
                count: 1,
                first_tensor: t.name.clone(),
            }),
        }
    }
    found
}

/// `found` as the end of an error message: the types, how many tensors, and what to do.
pub fn describe(found: &[Unreadable]) -> String {
    let types: Vec<String> = found
        .iter()
        .map(|u| {
            let name = type_name(u.type_id).unwrap_or("a type unknown to llama.cpp's ggml.h");
            format!(
                "{name} (GGML type {}) in {} tensor{}, first {}",
                u.type_id,
                u.count,
                if u.count == 1 { "" } else { "s" },
                u.first_tensor
            )
        })
        .collect();
    format!(
        "tensor type {}: hyoka reads {READABLE}; take this model in one of those (a Q4_K_M, \
         Q5_K_M or Q8_0 file)",
        types.join("; ")
    )
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

fn bytes<const N: usize>(r: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn skip_string(r: &mut (impl Read + Seek)) -> std::io::Result<()> {
    let len = u64::from_le_bytes(bytes(r)?);
    let len = i64::try_from(len).map_err(|_| bad("a string longer than the file"))?;
    r.seek(SeekFrom::Current(len)).map(|_| ())
}

/// A tensor name: llama.cpp caps them at 64 bytes; more than 64 KiB is not a name.
fn read_string(r: &mut impl Read) -> std::io::Result<String> {
    let len = u64::from_le_bytes(bytes(r)?);
    if len > 1 << 16 {
        return Err(bad("a tensor name over 64 KiB"));
    }
    let mut b = vec![0u8; len as usize];
    r.read_exact(&mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

/// Skip one metadata value of GGUF type `value_type`.
fn skip_value(r: &mut (impl Read + Seek), value_type: u32) -> std::io::Result<()> {
    let fixed = |t: u32| match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    };
    match value_type {
        8 => skip_string(r),
        9 => {
            let item = u32::from_le_bytes(bytes(r)?);
            let count = u64::from_le_bytes(bytes(r)?);
            match fixed(item) {
                Some(size) => {
                    let len = count
                        .checked_mul(size)
                        .and_then(|n| i64::try_from(n).ok())
                        .ok_or_else(|| bad("an array longer than the file"))?;
                    r.seek(SeekFrom::Current(len)).map(|_| ())
                }
                None => (0..count).try_for_each(|_| skip_value(r, item)),
            }
        }
        t => match fixed(t) {
            Some(size) => r.seek_relative(size as i64),
            None => Err(bad("an unknown metadata value type")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_ggml_h() {
        assert_eq!(type_name(20), Some("IQ4_NL"));
        assert_eq!(type_name(23), Some("IQ4_XS"));
        assert_eq!(type_name(30), Some("BF16"));
        assert_eq!(type_name(39), Some("MXFP4"));
        assert_eq!(type_name(4), None);
        assert_eq!(type_name(99), None);
        for id in 0..43 {
            // Every type candle reads has a name.
            assert!(!candle_reads(id) || type_name(id).is_some(), "{id}");
        }
    }
}

//! sha256 as hyoka records it everywhere (rubrics, chat templates, items, weights): lowercase
//! hex, as `sha256sum` prints it.

use sha2::{Digest, Sha256};
use std::io::Read;

/// sha256 of `data`, hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// sha256 of what `readers` give, one after the other (a split GGUF's shards in order: what
/// `cat PREFIX-*-of-*.gguf | sha256sum` gives), hex; the first read error with its reader's
/// index.
pub fn sha256_readers<R: Read>(
    readers: impl IntoIterator<Item = R>,
) -> Result<String, (usize, std::io::Error)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    for (i, mut r) in readers.into_iter().enumerate() {
        loop {
            let n = r.read(&mut buf).map_err(|e| (i, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(hex(&h.finalize()))
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    /// The digest of "abc" in FIPS 180-2's example.
    #[test]
    fn abc_is_the_standards_example() {
        let want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(super::sha256_hex(b"abc"), want);
        let parts = [&b"a"[..], &b"bc"[..]];
        assert_eq!(super::sha256_readers(parts).unwrap(), want);
    }
}

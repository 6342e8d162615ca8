//! Lines of a JSONL file, read as bytes with a bound on their length and decoded as UTF-8 one
//! by one: a line of invalid UTF-8 is an error of that line (which `--skip-invalid` can skip),
//! and a line longer than the bound — a wrong file (`/dev/zero`), a runaway writer — stops the
//! read with an error instead of taking all memory.

use std::io::BufRead;

/// The longest line read (64 MiB): far beyond any dialogue item or results line.
pub const MAX_LINE_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineError {
    /// Not UTF-8 from this byte of the line on.
    NotUtf8 { offset: usize },
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::NotUtf8 { offset } => {
                write!(f, "not valid UTF-8 (from byte {offset} of the line)")
            }
        }
    }
}

/// One line: its number (from 1), the bytes it took in the file with its newline, and its text
/// without a trailing `\r` (nor, on the first line, a UTF-8 byte-order mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: usize,
    pub bytes: u64,
    /// Whether a newline ended it (the last line of a file may have none).
    pub newline: bool,
    pub text: Result<String, LineError>,
}

/// The lines of a reader (see [`Line`]).
pub struct Lines<R> {
    reader: R,
    max: usize,
    number: usize,
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, max: usize) -> Self {
        Lines {
            reader,
            max,
            number: 0,
        }
    }
}

/// A read that cannot go on: I/O, or a line over the bound (numbered).
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    TooLong { line: usize, max: usize },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => e.fmt(f),
            ReadError::TooLong { max, .. } => {
                write!(f, "a line longer than {} MiB: not a JSONL file", max >> 20)
            }
        }
    }
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = Result<Line, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = Vec::new();
        let mut read_any = false;
        let mut bytes = 0u64;
        let mut ended = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(ReadError::Io(e))),
            };
            if available.is_empty() {
                break;
            }
            read_any = true;
            let (chunk, newline) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..i], true),
                None => (available, false),
            };
            if buf.len() + chunk.len() > self.max {
                return Some(Err(ReadError::TooLong {
                    line: self.number + 1,
                    max: self.max,
                }));
            }
            buf.extend_from_slice(chunk);
            let used = chunk.len() + usize::from(newline);
            bytes += used as u64;
            self.reader.consume(used);
            if newline {
                ended = true;
                break;
            }
        }
        if !read_any {
            return None;
        }
        self.number += 1;
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if self.number == 1 && buf.starts_with("\u{feff}".as_bytes()) {
            buf.drain(..3);
        }
        let text = String::from_utf8(buf).map_err(|e| LineError::NotUtf8 {
            offset: e.utf8_error().valid_up_to(),
        });
        Some(Ok(Line {
            number: self.number,
            bytes,
            newline: ended,
            text,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Numbered = Result<(usize, Result<String, LineError>), String>;

    fn all(bytes: &[u8], max: usize) -> Vec<Numbered> {
        Lines::new(bytes, max)
            .map(|r| r.map(|l| (l.number, l.text)).map_err(|e| format!("{e:?}")))
            .collect()
    }

    #[test]
    fn lines_numbers_bom_crlf_and_invalid_utf8() {
        let got = all(b"\xef\xbb\xbf{\"a\":1}\r\n\n\xff\xfe\nlast", 100);
        assert_eq!(got[0], Ok((1, Ok("{\"a\":1}".into()))));
        assert_eq!(got[1], Ok((2, Ok(String::new()))));
        assert_eq!(got[2], Ok((3, Err(LineError::NotUtf8 { offset: 0 }))));
        assert_eq!(got[3], Ok((4, Ok("last".into()))));
        assert_eq!(got.len(), 4);
        let sizes: Vec<u64> = Lines::new(&b"\xef\xbb\xbfab\r\n\nc"[..], 100)
            .map(|l| l.unwrap().bytes)
            .collect();
        assert_eq!(
            sizes,
            [7, 1, 1],
            "bytes as in the file, BOM, \\r and newline included"
        );
    }

    #[test]
    fn an_endless_line_stops_the_read() {
        // /dev/zero: no newline ever. The bound stops it after `max` bytes.
        let zeros = std::io::BufReader::with_capacity(7, std::io::repeat(0));
        let mut lines = Lines::new(zeros, 1000);
        assert!(matches!(
            lines.next(),
            Some(Err(ReadError::TooLong { line: 1, max: 1000 }))
        ));
    }
}

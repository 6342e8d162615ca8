//! Reading results back (`meta`, `merge`, `eval`): every line a typed record, all of one run,
//! one line per item — a second line for an item, or a line of another run (other model,
//! settings, version), would change the correlations silently.

use super::ResultsError;
use super::provenance::{Provenance, SharedProvenance};
use super::record::Record;
use crate::data::lines::{Line, Lines, MAX_LINE_BYTES, ReadError};
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// A results file to read, perhaps more than once: by its path, or — a pipe or another stream
/// (`meta -s <(…)`), which can be read only once — by its bytes, read on opening.
pub struct ResultsInput {
    pub path: PathBuf,
    bytes: Option<Vec<u8>>,
}

impl ResultsInput {
    pub fn open(path: &Path) -> Result<Self, ResultsError> {
        let io = |source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let stream = std::fs::metadata(path).map_err(io)?.file_type();
        let bytes = if stream.is_file() {
            None
        } else {
            Some(Self::hold(path)?)
        };
        Ok(ResultsInput {
            path: path.to_path_buf(),
            bytes,
        })
    }

    /// Results lines held in memory (the Python package's lists of results), named `name` in
    /// messages (`scores[0]`); each is checked as a file's line would be.
    pub fn from_lines(name: &str, lines: &[String]) -> Self {
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        ResultsInput {
            path: PathBuf::from(name),
            bytes: Some(bytes),
        }
    }

    /// A stream's lines, read once and bounded as a file's are: an endless line is refused at
    /// its line, not held until memory runs out.
    fn hold(path: &Path) -> Result<Vec<u8>, ResultsError> {
        let file = std::fs::File::open(path).map_err(|source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut held = Vec::new();
        for line in Lines::new(BufReader::new(file), MAX_LINE_BYTES) {
            let (_, text) = line_text(path, line)?;
            held.extend_from_slice(text.as_bytes());
            held.push(b'\n');
        }
        Ok(held)
    }

    fn reader(&self) -> Result<Box<dyn Read + '_>, ResultsError> {
        Ok(match &self.bytes {
            Some(bytes) => Box::new(bytes.as_slice()),
            None => {
                Box::new(
                    std::fs::File::open(&self.path).map_err(|source| ResultsError::Io {
                        path: self.path.clone(),
                        source,
                    })?,
                )
            }
        })
    }
}

/// The task of the run that wrote `input`, from its first line (None: no lines).
pub fn first_task(input: &ResultsInput) -> Result<Option<super::Task>, ResultsError> {
    records(input)?
        .next()
        .transpose()
        .map(|r| r.map(|(_, _, record)| record.task()))
}

/// Call `each(line number, line text, record)` for every line of the results file `path`, in
/// order; the provenance of its run (None: no lines).
pub fn read_records(
    path: &Path,
    each: impl FnMut(usize, &str, Record) -> Result<(), ResultsError>,
) -> Result<Option<Provenance>, ResultsError> {
    read_input_records(&ResultsInput::open(path)?, each)
}

/// `read_records` of an opened input.
pub fn read_input_records(
    input: &ResultsInput,
    mut each: impl FnMut(usize, &str, Record) -> Result<(), ResultsError>,
) -> Result<Option<Provenance>, ResultsError> {
    let path = input.path.as_path();
    let corrupt = |line: usize, message: String| ResultsError::Corrupt {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut first: Option<Provenance> = None;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in records(input)? {
        let (number, text, record) = line?;
        match &first {
            None => first = Some((*record.provenance).clone()),
            Some(p) if *p == *record.provenance => {}
            Some(p) => {
                if let Some((what, theirs, ours)) = record.provenance.difference(p) {
                    return Err(corrupt(
                        number,
                        format!(
                            "provenance: from another run than the file's first line ({what}: {theirs} here, {ours} there); one run per file"
                        ),
                    ));
                }
            }
        }
        if let Some(earlier) = seen.insert(record.id.clone(), number) {
            return Err(corrupt(
                number,
                format!(
                    "id: {:?} again (first on line {earlier}): one line per item",
                    record.id
                ),
            ));
        }
        each(number, &text, record)?;
    }
    Ok(first)
}

/// The non-blank lines of `input` as (line number, text, record), read bounded and as UTF-8.
fn records(
    input: &ResultsInput,
) -> Result<impl Iterator<Item = Result<(usize, String, Record), ResultsError>> + '_, ResultsError>
{
    let path = input.path.as_path();
    let mut shared = SharedProvenance::default();
    Ok(
        Lines::new(BufReader::new(input.reader()?), MAX_LINE_BYTES).filter_map(move |line| {
            let read = (|| {
                let (number, text) = line_text(path, line)?;
                if text.trim().is_empty() {
                    return Ok(None);
                }
                let record = Record::parse_sharing(&text, &mut shared).map_err(|e| {
                    ResultsError::Corrupt {
                        path: path.to_path_buf(),
                        line: number,
                        message: e.to_string(),
                    }
                })?;
                Ok(Some((number, text, record)))
            })();
            read.transpose()
        }),
    )
}

/// A line read bounded, as (line number, text): an I/O error, a line over the bound or one
/// that is not UTF-8 is an error naming the file and line.
fn line_text(path: &Path, line: Result<Line, ReadError>) -> Result<(usize, String), ResultsError> {
    let corrupt = |line: usize, message: String| ResultsError::Corrupt {
        path: path.to_path_buf(),
        line,
        message,
    };
    let Line { number, text, .. } = line.map_err(|e| match e {
        ReadError::Io(source) => ResultsError::Io {
            path: path.to_path_buf(),
            source,
        },
        ReadError::TooLong { line, .. } => corrupt(line, e.to_string()),
    })?;
    let text = text.map_err(|e| corrupt(number, e.to_string()))?;
    Ok((number, text))
}

//! Where a model's files are: a local folder or `.gguf` file, or a Hugging Face id fetched with
//! hf-hub into the standard cache (HF_HOME; HF_HUB_OFFLINE=1 reads the cache only, so an
//! air-gapped lab can copy a cache in).
//!
//! Model names: `PATH` | `ORG/NAME[@REVISION]` (safetensors checkpoint) |
//! `ORG/NAME[@REVISION]:FILE.gguf` (one GGUF file of a repository; a shard of a split GGUF,
//! `…-00001-of-0000N.gguf`, fetches every shard) | `ORG/NAME[@REVISION]:TAG` (the GGUF file
//! whose name holds a quantization tag such as Q4_K_M, as llama.cpp's `-hf` takes it).

use crate::model::error::ModelError;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq)]
pub enum Format {
    /// A folder with config.json and safetensors weights.
    Safetensors,
    /// One GGUF file.
    Gguf,
}

/// A model's files, found or downloaded.
#[derive(Clone, Debug)]
pub struct ModelFiles {
    /// The name the user gave.
    pub name: String,
    pub format: Format,
    /// The folder (safetensors) or the .gguf file.
    pub path: PathBuf,
    /// The hub commit the files come from, when they come from the hub.
    pub revision: Option<String>,
}

const CHECKPOINT_FILES: &[&str] = &["config.json", "tokenizer.json"];
/// Fetched when the repository has them: some encoders' repositories (roberta-large) carry no
/// tokenizer_config.json, and a judge without a chat template is refused where it is read.
const OPTIONAL_FILES: &[&str] = &["tokenizer_config.json", "chat_template.jinja"];

/// Whether `name` can only be a local path: it starts with `/`, `./`, `../` or `~`, or names a
/// weights file (`.gguf`, `.safetensors`). Such a name is never looked up on the Hub, so a
/// mistyped path in an air-gapped lab is a missing file, not a network error.
pub fn is_path_only(name: &str) -> bool {
    let lower = name.split(['@', ':']).next().unwrap_or(name).to_lowercase();
    ["/", "./", "../", "~"].iter().any(|p| name.starts_with(p))
        || name == "."
        || name == ".."
        || lower.ends_with(".gguf")
        || lower.ends_with(".safetensors")
        || name.contains('\\')
}

/// `~` or `~/…` with the home folder put in (as a shell would); any other name unchanged.
fn expand_home(name: &str) -> PathBuf {
    match (name.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(name),
    }
}

pub fn resolve(name: &str) -> Result<ModelFiles, ModelError> {
    let expanded = expand_home(name);
    let local = expanded.as_path();
    if !local.exists() && is_path_only(name) {
        return Err(ModelError::Missing {
            origin: name.into(),
            message: format!(
                "no such file or folder ({}); a name that starts with /, ./, ../ or ~, or ends in .gguf or .safetensors, is a local path, never a Hugging Face id",
                local.display()
            ),
        });
    }
    if local.exists() {
        let format = if local.is_dir() {
            Format::Safetensors
        } else {
            Format::Gguf
        };
        if format == Format::Gguf && local.extension().and_then(|e| e.to_str()) != Some("gguf") {
            return Err(ModelError::Missing {
                origin: name.into(),
                message: "a model file must be a .gguf; a checkpoint is a folder".into(),
            });
        }
        return Ok(ModelFiles {
            name: name.into(),
            format,
            path: local.to_path_buf(),
            revision: None,
        });
    }
    let looks_like_id = name
        .split(['@', ':'])
        .next()
        .is_some_and(|id| id.matches('/').count() == 1 && !id.starts_with('.'));
    if !looks_like_id {
        return Err(ModelError::Missing {
            origin: name.into(),
            message: "no such file or folder (and not a Hugging Face id ORG/NAME)".into(),
        });
    }
    let (id, file) = match name.split_once(':') {
        Some((id, file)) => (id, Some(file)),
        None => (name, None),
    };
    let (id, revision) = match id.split_once('@') {
        Some((id, rev)) => (id, rev.to_string()),
        None => (id, "main".to_string()),
    };
    check_hub_part(name, "repository", id)?;
    check_hub_part(name, "revision", &revision)?;
    if let Some(file) = file {
        check_hub_part(name, "file", file)?;
    }
    let repo = hf_hub::Repo::with_revision(id.to_string(), hf_hub::RepoType::Model, revision);
    let fetcher = Fetcher::new(repo, name)?;
    match file {
        Some(file) => {
            let gguf = if file.to_lowercase().ends_with(".gguf") {
                file.to_string()
            } else {
                crate::model::load::gguf_files::file_for_tag(&fetcher.list()?, file).map_err(
                    |message| ModelError::Missing {
                        origin: name.into(),
                        message,
                    },
                )?
            };
            // A shard of a split GGUF brings the others: the loader finds them beside it.
            for shard in crate::model::load::gguf_files::shard_names(&gguf).unwrap_or_default() {
                fetcher.get(&shard)?;
            }
            let path = fetcher.get(&gguf)?;
            Ok(ModelFiles {
                name: name.into(),
                format: Format::Gguf,
                revision: commit_of(&path, &gguf),
                path,
            })
        }
        None => {
            for f in CHECKPOINT_FILES {
                fetcher.get(f).map_err(|e| fetcher.if_gguf_repository(e))?;
            }
            for f in OPTIONAL_FILES {
                let _ = fetcher.get(f);
            }
            let weights = match fetcher.get("model.safetensors") {
                Ok(p) => vec![p],
                Err(_) => {
                    let index = fetcher.get("model.safetensors.index.json")?;
                    let shards = crate::model::load::checkpoint_files::safetensors_files(
                        index.parent().expect("a file has a folder"),
                    )?;
                    shards
                        .iter()
                        .map(|s| {
                            fetcher.get(
                                &s.file_name()
                                    .expect("shard names are files")
                                    .to_string_lossy(),
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()?
                }
            };
            let dir = weights[0]
                .parent()
                .expect("a file has a folder")
                .to_path_buf();
            Ok(ModelFiles {
                name: name.into(),
                format: Format::Safetensors,
                revision: commit_of(&weights[0], "model.safetensors"),
                path: dir,
            })
        }
    }
}

/// A Hub id's repository, revision and file are joined onto the cache's folders: a part that
/// climbs out of its folder (`..`), starts at the root, or holds a backslash, NUL or an empty
/// component would read a file outside the repository's snapshot and name it as the
/// repository's in the provenance.
fn check_hub_part(name: &str, what: &str, part: &str) -> Result<(), ModelError> {
    let bad = part.is_empty()
        || part.starts_with('/')
        || part.contains(['\\', '\0'])
        || part
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(ModelError::Missing {
            origin: name.into(),
            message: format!(
                "{what} {part:?}: not a Hugging Face name (no `..`, `.`, empty parts, leading `/`, \
                 backslash or NUL; a local file is named by its path, not after an id)"
            ),
        });
    }
    Ok(())
}

/// The hub API, or the cache alone when HF_HUB_OFFLINE is set.
enum Fetcher {
    Online(hf_hub::api::sync::ApiRepo, String),
    Offline(hf_hub::CacheRepo, String, hf_hub::Repo),
}

impl Fetcher {
    fn new(repo: hf_hub::Repo, name: &str) -> Result<Self, ModelError> {
        let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
        if offline {
            return Ok(Fetcher::Offline(
                hf_hub::Cache::from_env().repo(repo.clone()),
                name.into(),
                repo,
            ));
        }
        let mut builder = hf_hub::api::sync::ApiBuilder::from_env()
            .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        // hf-hub reads only the token file `huggingface-cli login` writes; the Python hub (and
        // users' labs) also take HF_TOKEN, first, then the older HUGGING_FACE_HUB_TOKEN.
        if let Some(token) = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]
            .iter()
            .find_map(|k| std::env::var(k).ok().filter(|t| !t.trim().is_empty()))
        {
            builder = builder.with_token(Some(token.trim().to_string()));
        }
        let api = builder.build().map_err(|e| ModelError::Missing {
            origin: name.into(),
            message: format!("Hugging Face hub client: {e}"),
        })?;
        Ok(Fetcher::Online(api.repo(repo), name.into()))
    }

    fn get(&self, file: &str) -> Result<PathBuf, ModelError> {
        match self {
            Fetcher::Online(repo, name) => repo.get(file).map_err(|e| ModelError::Missing {
                origin: name.clone(),
                message: format!("cannot fetch {file} from the Hugging Face hub: {e} (a gated or private repository needs a token: HF_TOKEN or `huggingface-cli login`; set HF_HUB_OFFLINE=1 to use a copied cache, or give a local path)"),
            }),
            Fetcher::Offline(repo, name, _) => repo.get(file).ok_or_else(|| ModelError::Missing {
                origin: name.clone(),
                message: format!("{file} is not in the Hugging Face cache ({}) and HF_HUB_OFFLINE is set", hf_hub::Cache::from_env().path().display()),
            }),
        }
    }

    /// `e` (a checkpoint's file missing) or, for a repository of GGUF files named without one
    /// of them, what to name instead and the files to choose from.
    fn if_gguf_repository(&self, e: ModelError) -> ModelError {
        let models = self
            .list()
            .map(|files| crate::model::load::gguf_files::gguf_models(&files))
            .unwrap_or_default();
        if models.is_empty() {
            return e;
        }
        let name = match self {
            Fetcher::Online(_, name) | Fetcher::Offline(_, name, _) => name,
        };
        ModelError::Missing {
            origin: name.clone(),
            message: format!(
                "a repository of GGUF files, not a checkpoint: name one as {name}:TAG (the \
                 quantization in its name, e.g. Q4_K_M) or {name}:FILE.gguf — {}",
                crate::model::load::gguf_files::listing(&models)
            ),
        }
    }

    /// The repository's files (paths in it): from the hub, or those of the cache's snapshot.
    fn list(&self) -> Result<Vec<String>, ModelError> {
        match self {
            Fetcher::Online(repo, name) => Ok(repo
                .info()
                .map_err(|e| ModelError::Missing {
                    origin: name.clone(),
                    message: format!("cannot list the repository's files on the Hugging Face hub: {e} (a gated or private repository needs a token: HF_TOKEN or `huggingface-cli login`; set HF_HUB_OFFLINE=1 to use a copied cache, or give a local path)"),
                })?
                .siblings
                .into_iter()
                .map(|s| s.rfilename)
                .collect()),
            Fetcher::Offline(_, name, repo) => {
                let folder = hf_hub::Cache::from_env().path().join(repo.folder_name());
                let missing = || ModelError::Missing {
                    origin: name.clone(),
                    message: format!(
                        "{} holds no snapshot of revision {} and HF_HUB_OFFLINE is set",
                        folder.display(),
                        repo.revision()
                    ),
                };
                let commit = std::fs::read_to_string(folder.join("refs").join(repo.revision()))
                    .map_err(|_| missing())?;
                let snapshot = folder.join("snapshots").join(commit.trim());
                let mut files = Vec::new();
                let mut folders = vec![snapshot.clone()];
                while let Some(dir) = folders.pop() {
                    for entry in std::fs::read_dir(&dir).map_err(|_| missing())? {
                        let path = entry.map_err(|_| missing())?.path();
                        if path.is_dir() {
                            folders.push(path);
                        } else if let Ok(rel) = path.strip_prefix(&snapshot) {
                            files.push(rel.to_string_lossy().replace('\\', "/"));
                        }
                    }
                }
                files.sort();
                Ok(files)
            }
        }
    }
}

/// `.../snapshots/<commit>/<file>` → the commit (`file` as fetched: it may name folders of
/// the repository, as GGUF repositories that keep each type in a folder do).
fn commit_of(path: &Path, file: &str) -> Option<String> {
    let commit = path.ancestors().nth(file.split('/').count())?;
    (commit.parent()?.file_name()? == "snapshots")
        .then(|| commit.file_name().map(|c| c.to_string_lossy().into_owned()))?
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    sha256_files(&[path.to_path_buf()])
}

/// sha256 of files' bytes one after the other (a split GGUF's shards in order: what
/// `cat PREFIX-*-of-*.gguf | sha256sum` gives), hex.
pub fn sha256_files(paths: &[PathBuf]) -> Result<String, ModelError> {
    let files = paths
        .iter()
        .map(|path| {
            std::fs::File::open(path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    crate::checksum::sha256_readers(files).map_err(|(i, source)| ModelError::Io {
        path: paths[i].clone(),
        source,
    })
}

/// Fail clearly when a file's sha256 is not the expected one.
pub fn verify_sha256(path: &Path, expected: &str) -> Result<String, ModelError> {
    verify_sha256_files(&[path.to_path_buf()], expected)
}

/// Fail clearly when the sha256 of files one after the other (`sha256_files`) is not the
/// expected one.
pub fn verify_sha256_files(paths: &[PathBuf], expected: &str) -> Result<String, ModelError> {
    let got = sha256_files(paths)?;
    if !got.eq_ignore_ascii_case(expected) {
        let first = paths.first().map(|p| p.display().to_string());
        return Err(ModelError::Checksum {
            origin: match paths.len() {
                1 => first.unwrap_or_default(),
                n => format!(
                    "{} and its other {} shards, in order",
                    first.unwrap_or_default(),
                    n - 1
                ),
            },
            expected: expected.to_lowercase(),
            got,
        });
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_never_taken_for_hub_ids() {
        for path in [
            "gg/nosuch.gguf",
            "models/judge.Q4_K_M.GGUF",
            "org/model.safetensors",
            "./org/name",
            "../org/name",
            "/models/org/name",
            "~/models/judge",
        ] {
            assert!(is_path_only(path), "{path}");
            let e = resolve(path).expect_err("no such file");
            assert!(e.to_string().contains("local path"), "{path}: {e}");
        }
        for id in [
            "Qwen/Qwen2.5-Coder-0.5B-Instruct",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "org/name@main:Q4_K_M",
        ] {
            assert!(!is_path_only(id), "{id}");
        }
    }

    #[test]
    fn hub_names_never_reach_outside_the_cache() {
        // Refused before the cache or the network is asked, naming the part. (A backslash makes
        // any name a local path: `is_path_only`.)
        for (name, part) in [
            ("org/name:../../x.gguf", "file"),
            ("org/name:/abs/x.gguf", "file"),
            ("org/name:a//x.gguf", "file"),
            ("org/name@../../refs:Q4_K_M", "revision"),
            ("org/..:x.gguf", "repository"),
        ] {
            let e = resolve(name).expect_err(name).to_string();
            assert!(
                e.contains(part) && e.contains("not a Hugging Face name"),
                "{name}: {e}"
            );
        }
        for good in ["org/name:sub/x.gguf", "org/name@refs/pr/1:x.gguf"] {
            let (id, file) = good.split_once(':').expect("a file part");
            let (id, rev) = id.split_once('@').unwrap_or((id, "main"));
            for (what, part) in [("repository", id), ("revision", rev), ("file", file)] {
                assert!(check_hub_part(good, what, part).is_ok(), "{good}: {what}");
            }
        }
    }
}

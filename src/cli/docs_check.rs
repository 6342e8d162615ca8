//! The documentation against the command line it documents: every `hyoka …` command in
//! README.md, README.ja.md and docs/*.md must parse with the real clap definition, every flag of
//! every command must be documented somewhere, the exit-code tables must list `EXIT_CODES`, and
//! every relative link must reach a file.

use std::path::{Path, PathBuf};

/// The documents checked, relative to the repository.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md"), root.join("README.ja.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// A command found in a document: where, its words after `hyoka`, and whether it is a whole
/// command (a line of a code block) or a mention in running text (an inline code span, which
/// may leave out required arguments: "`hyoka judge` writes …").
#[derive(Debug)]
struct Documented {
    place: String,
    words: Vec<String>,
    whole: bool,
}

/// Splits a simple shell command into words: single and double quotes group, a backslash
/// escapes. Stops at a redirection (`>`, `<`), a comment or a closing backquote.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '>' | '<' | '`' => break,
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The hyoka commands of a shell line: each simple command (between `&&`, `||`, `;`, `|` and
/// `&`) that runs `hyoka` (or a path ending in `/hyoka`) or `cargo run … --`, past `do`,
/// `then` and `VAR=value` prefixes, as hyoka's own words; a quoted word that is a hyoka
/// command (`sbatch --wrap "hyoka …"`) counts too.
fn hyoka_commands(line: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for segment in line.split(['&', ';', '|']) {
        let words = shell_words(segment);
        let start = words
            .iter()
            .position(|w| !(w == "do" || w == "then" || (w.contains('=') && !w.starts_with('-'))))
            .unwrap_or(words.len());
        let words = &words[start..];
        let Some(first) = words.first() else {
            continue;
        };
        if first == "hyoka" || first.ends_with("/hyoka") {
            found.push(words[1..].to_vec());
        } else if first == "cargo" && words.get(1).map(String::as_str) == Some("run") {
            if let Some(dashes) = words.iter().position(|w| w == "--") {
                found.push(words[dashes + 1..].to_vec());
            }
        } else {
            for quoted in words.iter().filter(|w| w.starts_with("hyoka ")) {
                found.extend(hyoka_commands(quoted));
            }
        }
    }
    found
}

/// Every hyoka command of a Markdown text: lines of fenced code blocks (joined where they end
/// in a backslash) and inline code spans.
fn commands_of(file: &Path, text: &str) -> Vec<Documented> {
    let name = file
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(file)
        .display()
        .to_string();
    let mut found = Vec::new();
    let mut fenced = false;
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let (start, mut joined) = pending.take().unwrap_or((n + 1, String::new()));
            let body = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            if let Some(head) = body.strip_suffix('\\') {
                joined.push_str(head);
                joined.push(' ');
                pending = Some((start, joined));
                continue;
            }
            joined.push_str(body);
            for words in hyoka_commands(&joined) {
                found.push(Documented {
                    place: format!("{name}:{start}"),
                    words,
                    whole: true,
                });
            }
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 && (span.starts_with("hyoka ") || span.starts_with("cargo run")) {
                for words in hyoka_commands(span) {
                    found.push(Documented {
                        place: format!("{name}:{}", n + 1),
                        words,
                        whole: false,
                    });
                }
            }
        }
    }
    found
}

/// A documented command's words as an argument list: `…` (more of the same) is dropped, and a
/// shell variable (`$k`, `$((k-1))`) stands for the number 1.
fn as_argv(words: &[String]) -> Vec<String> {
    std::iter::once("hyoka".to_string())
        .chain(
            words
                .iter()
                .filter(|w| *w != "…" && *w != "...")
                .map(|w| without_variables(w)),
        )
        .collect()
}

fn without_variables(word: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let skip = if let Some(inner) = after.strip_prefix("((") {
            inner.find("))").map_or(after.len(), |end| end + 4)
        } else {
            after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after.len())
        };
        out.push('1');
        rest = &after[skip..];
    }
    out.push_str(rest);
    out
}

/// A flag of a command: (`hyoka judge`, `--input`, `-i`).
type Flag = (String, String, Option<String>);

/// Every long flag of a command and its subcommands, with its short form.
fn flags(command: &clap::Command, path: &str, out: &mut Vec<Flag>) {
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long()
            && long != "help"
            && long != "version"
        {
            let short = arg.get_short().map(|c| format!("-{c}"));
            out.push((path.to_string(), format!("--{long}"), short));
        }
    }
    for sub in command.get_subcommands() {
        flags(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

/// Whether `text` mentions `flag` as itself, not as the start of a longer flag (`--seed` in
/// `--seeds`).
fn mentions(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        !text[at + flag.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_documented_command_parses() {
    let mut failures = Vec::new();
    let mut count = 0;
    for doc in documents() {
        for found in commands_of(&doc, &read(&doc)) {
            count += 1;
            let argv = as_argv(&found.words);
            if let Err(e) = super::commands::command().try_get_matches_from(&argv) {
                use clap::error::ErrorKind as K;
                // `--help` and `--version` end parsing the way clap reports it; a mention may
                // leave out required arguments, or end at a flag whose value it does not give.
                let accepted = match e.kind() {
                    K::DisplayHelp | K::DisplayVersion => true,
                    K::MissingRequiredArgument
                    | K::MissingSubcommand
                    | K::DisplayHelpOnMissingArgumentOrSubcommand => !found.whole,
                    K::InvalidValue => {
                        !found.whole && argv.last().is_some_and(|w| w.starts_with("--"))
                    }
                    _ => false,
                };
                if !accepted {
                    let first = e.to_string().lines().next().unwrap_or_default().to_string();
                    failures.push(format!("{}: `{}`: {first}", found.place, argv.join(" ")));
                }
            }
        }
    }
    assert!(count > 20, "only {count} documented commands found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_flag_is_documented() {
    let text: String = documents().iter().map(|d| read(d)).collect();
    let mut all = Vec::new();
    flags(&super::commands::command(), "hyoka", &mut all);
    let missing: Vec<String> = all
        .iter()
        .filter(|(_, long, short)| {
            !mentions(&text, long)
                && !short
                    .as_ref()
                    .is_some_and(|s| text.contains(&format!(" {s} ")))
        })
        .map(|(command, long, _)| format!("{command} {long}"))
        .collect();
    assert!(
        missing.is_empty(),
        "flags no document mentions:\n{}",
        missing.join("\n")
    );
}

/// Every argument of every command says in `--help` what it is.
#[test]
fn every_argument_has_help() {
    fn undescribed(command: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if id != "help" && id != "version" && arg.get_help().is_none() {
                out.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            undescribed(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut missing = Vec::new();
    undescribed(&super::commands::command(), "hyoka", &mut missing);
    assert!(
        missing.is_empty(),
        "arguments without help:\n{}",
        missing.join("\n")
    );
}

/// The exit codes of `EXIT_CODES` with their first word(s) before the colon.
fn exit_codes() -> Vec<(String, String)> {
    super::exit::EXIT_CODES
        .lines()
        .skip(1)
        .filter_map(|line| {
            let line = line.trim_start();
            let (code, rest) = line.split_once("  ")?;
            code.parse::<u8>().ok()?;
            Some((code.to_string(), rest.split(':').next()?.trim().to_string()))
        })
        .collect()
}

#[test]
fn the_exit_code_tables_are_exit_codes() {
    let codes = exit_codes();
    assert_eq!(codes.len(), 5, "{codes:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, same_words) in [("README.md", true), ("README.ja.md", false)] {
        let text = read(&root.join(file));
        let rows: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = cells.get(1)?;
                (cells.len() > 3 && code.len() == 1 && code.parse::<u8>().is_ok())
                    .then(|| (code.to_string(), cells[2].to_string()))
            })
            .collect();
        let listed: Vec<&String> = rows.iter().map(|(c, _)| c).collect();
        let expected: Vec<&String> = codes.iter().map(|(c, _)| c).collect();
        assert_eq!(listed, expected, "{file}: the exit-code table's codes");
        if same_words {
            for ((code, meaning), (_, words)) in rows.iter().zip(&codes) {
                assert!(
                    meaning.starts_with(words.as_str()),
                    "{file}: exit code {code} is {meaning:?}; EXIT_CODES says {words:?}"
                );
            }
        }
    }
}

#[test]
fn every_relative_link_reaches_a_file() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let folder = doc.parent().expect("a document's folder");
        for (n, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = rest[..end].split('#').next().unwrap_or_default();
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                if !folder.join(target).exists() {
                    broken.push(format!("{}:{}: {target}", doc.display(), n + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn commands_are_found_where_docs_write_them() {
    let text = "Run `hyoka validate items.jsonl` first.\n```sh\nHF_HUB_OFFLINE=1 hyoka judge \\\n  --rubric dialogue6-ja -i a.jsonl -o b.jsonl  # offline\npython3 x.py && cargo run --release -- meta -i a.jsonl -s b.jsonl > out.md\nfor k in 1 2; do hyoka eval --shard $k/2 -o o & done; wait\nsbatch --wrap \"hyoka merge a b -o o\"\n```\n";
    let found = commands_of(Path::new("t.md"), text);
    let words: Vec<String> = found.iter().map(|f| f.words.join(" ")).collect();
    assert_eq!(
        words,
        [
            "validate items.jsonl",
            "judge --rubric dialogue6-ja -i a.jsonl -o b.jsonl",
            "meta -i a.jsonl -s b.jsonl",
            "eval --shard $k/2 -o o",
            "merge a b -o o",
        ]
    );
    assert_eq!(found[1].place, "t.md:3");
    assert_eq!(
        shell_words(r#"a "b c" 'd e' f\ g"#),
        ["a", "b c", "d e", "f g"]
    );
    assert_eq!(without_variables("cuda:$((k-1))"), "cuda:1");
    assert_eq!(without_variables("$k/4"), "1/4");
}

//! Pairs of candidate responses: items that share a `context_id` are responses of different
//! systems to one context, and `hyoka compare` judges them two at a time. Each pair is a unit
//! of its own, with an id, resumed and merged like an item.

use super::{DataError, Item};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which pairs a context's candidates form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pairing {
    /// Every two systems of a context (systems in name order: the first is the lesser name).
    All,
    /// Each other system against this one (the baseline is the pair's second).
    Baseline(String),
}

impl Pairing {
    /// The setting as provenance records it.
    pub fn describe(&self) -> String {
        match self {
            Pairing::All => "all".into(),
            Pairing::Baseline(b) => format!("baseline:{b}"),
        }
    }

    /// The setting from its record (`describe`'s text).
    pub fn from_record(text: &str) -> Option<Pairing> {
        match text {
            "all" => Some(Pairing::All),
            _ => text
                .strip_prefix("baseline:")
                .map(|b| Pairing::Baseline(b.to_string())),
        }
    }
}

/// Two candidate responses to one context.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// `{context_id}|{first system}|{second system}`.
    pub id: String,
    pub context_id: String,
    /// The two candidates; both carry the context's turns and setting.
    pub first: Item,
    pub second: Item,
}

impl Pair {
    pub fn first_system(&self) -> &str {
        self.first.system.as_deref().unwrap_or_default()
    }

    pub fn second_system(&self) -> &str {
        self.second.system.as_deref().unwrap_or_default()
    }

    /// The two candidates in the order a judge reads them: `swapped` shows the second first.
    pub fn shown(&self, swapped: bool) -> (&Item, &Item) {
        if swapped {
            (&self.second, &self.first)
        } else {
            (&self.first, &self.second)
        }
    }
}

/// The pairs of a set of items, and the contexts that gave none.
#[derive(Clone, Debug)]
pub struct Pairs {
    pub pairs: Vec<Pair>,
    /// How they were formed.
    pub pairing: Pairing,
    /// Contexts with candidates, in the items' order.
    pub contexts: usize,
    /// Contexts with one system only (nothing to compare).
    pub single: Vec<String>,
    /// Contexts without the baseline's response (`Pairing::Baseline`).
    pub without_baseline: Vec<String>,
}

/// Where each item was read, for errors: a file and each item's line, or items in memory.
#[derive(Clone, Copy, Debug)]
pub enum Origin<'a> {
    File { path: &'a Path, lines: &'a [usize] },
    Memory,
}

impl Origin<'_> {
    fn error(&self, index: usize, field: &str, message: String) -> DataError {
        match self {
            Origin::File { path, lines } => DataError::Invalid {
                file: path.to_path_buf(),
                line: lines.get(index).copied().unwrap_or(index + 1),
                field: field.into(),
                message,
            },
            Origin::Memory => DataError::Field {
                file: PathBuf::from(format!("items[{index}]")),
                field: field.into(),
                message,
            },
        }
    }
}

/// The pairs `pairing` forms from `items`. Every item needs a `context_id` and a `system`;
/// items of one context must show the same context turns and setting, and a system answers a
/// context once. A context's pairs keep the items' order of contexts.
pub fn form_pairs(items: &[Item], origin: Origin, pairing: &Pairing) -> Result<Pairs, DataError> {
    // Per context, in first-appearance order: the indices of its candidates.
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let Some(context) = item.context_id.as_deref() else {
            return Err(origin.error(
                i,
                "context_id",
                "missing: a pairwise comparison needs the context each response answers (items with the same context_id are compared)".into(),
            ));
        };
        if item.system.as_deref().is_none_or(str::is_empty) {
            return Err(origin.error(
                i,
                "system",
                "missing: a pairwise comparison needs the system that wrote each response".into(),
            ));
        }
        let group = groups.entry(context).or_default();
        if group.is_empty() {
            order.push(context);
        }
        if let Some(&first) = group.first() {
            check_same_context(&items[first], item)
                .map_err(|(field, message)| origin.error(i, field, message))?;
        }
        if let Some(&same) = group.iter().find(|&&j| items[j].system == item.system) {
            return Err(origin.error(
                i,
                "system",
                format!(
                    "context {context:?} already has a response of system {:?} (item {:?}): each system answers a context once",
                    item.system.as_deref().unwrap_or_default(),
                    items[same].id
                ),
            ));
        }
        group.push(i);
    }
    let mut out = Pairs {
        pairs: Vec::new(),
        pairing: pairing.clone(),
        contexts: order.len(),
        single: Vec::new(),
        without_baseline: Vec::new(),
    };
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for context in order {
        let mut members: Vec<&Item> = groups[context].iter().map(|&i| &items[i]).collect();
        members.sort_by(|a, b| a.system.cmp(&b.system));
        if members.len() < 2 {
            out.single.push(context.to_string());
            continue;
        }
        let system = |it: &Item| it.system.clone().unwrap_or_default();
        let mut formed: Vec<(&Item, &Item)> = Vec::new();
        match pairing {
            Pairing::All => {
                for (a, first) in members.iter().enumerate() {
                    for second in &members[a + 1..] {
                        formed.push((first, second));
                    }
                }
            }
            Pairing::Baseline(baseline) => match members.iter().find(|m| system(m) == *baseline) {
                None => out.without_baseline.push(context.to_string()),
                Some(base) => {
                    for m in &members {
                        if system(m) != *baseline {
                            formed.push((m, base));
                        }
                    }
                }
            },
        }
        for (first, second) in formed {
            let id = format!("{context}|{}|{}", system(first), system(second));
            // A '|' inside a context id or a system name could make two pairs one id.
            if let Some(other) = ids.insert(id.clone(), first.id.clone()) {
                return Err(DataError::Field {
                    file: PathBuf::from("items"),
                    field: "context_id".into(),
                    message: format!(
                        "items {other:?} and {:?} give two pairs the one id {id:?}: take '|' out of context ids and system names",
                        first.id
                    ),
                });
            }
            out.pairs.push(Pair {
                id,
                context_id: context.to_string(),
                first: first.clone(),
                second: second.clone(),
            });
        }
    }
    Ok(out)
}

/// Candidates of one context show the judge one context: the same turns and setting.
fn check_same_context(first: &Item, other: &Item) -> Result<(), (&'static str, String)> {
    let differs = |field: &'static str| {
        Err((
            field,
            format!(
                "differs from item {:?}'s, which has the same context_id {:?}: candidates of one context answer the same turns",
                first.id,
                first.context_id.as_deref().unwrap_or_default()
            ),
        ))
    };
    if first.context != other.context {
        return differs("context");
    }
    if first.setting != other.setting {
        return differs("setting");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Turn;

    fn item(id: &str, context_id: &str, system: &str, text: &str) -> Item {
        let turn = |speaker: &str, text: &str| Turn {
            speaker: speaker.into(),
            text: text.into(),
        };
        Item {
            id: id.into(),
            context: vec![turn("B", "こんにちは"), turn("A", "お元気ですか")],
            response: turn("B", text),
            reference: Vec::new(),
            setting: None,
            system: Some(system.into()),
            dialogue: None,
            scope: Default::default(),
            context_id: Some(context_id.into()),
            human: Default::default(),
            raters: Vec::new(),
            meta: None,
            translation: None,
            numeric_id: false,
        }
    }

    #[test]
    fn all_pairs_and_baseline_pairs() {
        let items = vec![
            item("1", "c1", "zeta", "z"),
            item("2", "c1", "alpha", "a"),
            item("3", "c1", "mid", "m"),
            item("4", "c2", "alpha", "a2"),
            item("5", "c3", "zeta", "z3"),
            item("6", "c3", "mid", "m3"),
        ];
        let all = form_pairs(&items, Origin::Memory, &Pairing::All).unwrap();
        let ids: Vec<&str> = all.pairs.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "c1|alpha|mid",
                "c1|alpha|zeta",
                "c1|mid|zeta",
                "c3|mid|zeta"
            ]
        );
        assert_eq!(all.single, ["c2"]);
        assert_eq!(all.contexts, 3);
        let base = form_pairs(&items, Origin::Memory, &Pairing::Baseline("alpha".into())).unwrap();
        let ids: Vec<&str> = base.pairs.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["c1|mid|alpha", "c1|zeta|alpha"]);
        assert_eq!(base.without_baseline, ["c3"]);
        assert_eq!(base.pairs[0].first.response.text, "m");
        assert_eq!(base.pairs[0].second.response.text, "a");
    }

    #[test]
    fn bad_groups_are_named() {
        let mut other = item("2", "c1", "b", "y");
        other.context[0].text = "changed".into();
        let items = vec![item("1", "c1", "a", "x"), other];
        let e = form_pairs(&items, Origin::Memory, &Pairing::All).unwrap_err();
        assert_eq!(
            e.to_string(),
            "items[1]: context: differs from item \"1\"'s, which has the same context_id \"c1\": candidates of one context answer the same turns"
        );
        let items = vec![item("1", "c1", "a", "x"), item("2", "c1", "a", "y")];
        let lines = [3, 7];
        let origin = Origin::File {
            path: Path::new("items.jsonl"),
            lines: &lines,
        };
        let e = form_pairs(&items, origin, &Pairing::All).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("items.jsonl:7: system: context \"c1\" already has a response of system \"a\" (item \"1\")"),
            "{e}"
        );
        let mut bare = item("1", "c1", "a", "x");
        bare.context_id = None;
        let e = form_pairs(&[bare], Origin::Memory, &Pairing::All).unwrap_err();
        assert!(
            e.to_string().starts_with("items[0]: context_id: missing"),
            "{e}"
        );
        // Two contexts whose pairs read as one id are refused, never merged.
        let collide = vec![
            item("1", "c", "a|b", "x"),
            item("2", "c", "c", "y"),
            item("3", "c|a", "b", "x"),
            item("4", "c|a", "c", "y"),
        ];
        let e = form_pairs(&collide, Origin::Memory, &Pairing::All).unwrap_err();
        assert!(e.to_string().contains("one id \"c|a|b|c\""), "{e}");
    }
}

//! Choosing which items a run covers: a seeded sample of whole dialogues, and deterministic
//! shards for splitting one evaluation over several GPUs or machines.

use super::Item;
use crate::rng::keyed_hash;
use std::collections::{BTreeMap, BTreeSet};

/// The dialogue an item belongs to (its own id when it has none).
fn dialogue_key(item: &Item) -> &str {
    item.dialogue.as_deref().unwrap_or(&item.id)
}

/// The context an item answers (its own id when it has none): a pairwise run keeps a
/// context's candidates together.
fn context_key(item: &Item) -> &str {
    item.context_id.as_deref().unwrap_or(&item.id)
}

/// How items are kept together when a run covers some of them: whole dialogues (absolute
/// scores, whose within-dialogue statistics need them), or whole contexts (pairwise runs,
/// whose pairs need every candidate of a context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grouping {
    Dialogues,
    Contexts,
}

impl Grouping {
    fn key(self, item: &Item) -> &str {
        match self {
            Grouping::Dialogues => dialogue_key(item),
            Grouping::Contexts => context_key(item),
        }
    }
}

/// Keep `n` whole dialogues chosen by `seed` (all items when there are at most `n`), in their
/// original order. A dialogue is in or out by its own hash, so the choice is stable.
pub fn sample_dialogues(items: Vec<Item>, n: usize, seed: u64) -> Vec<Item> {
    sample_groups(items, n, seed, Grouping::Dialogues)
}

/// `sample_dialogues` with groups of either kind.
pub fn sample_groups(items: Vec<Item>, n: usize, seed: u64, grouping: Grouping) -> Vec<Item> {
    let groups: BTreeSet<&str> = items.iter().map(|i| grouping.key(i)).collect();
    if groups.len() <= n {
        return items;
    }
    let mut ranked: Vec<(u64, &str)> = groups
        .into_iter()
        .map(|d| (keyed_hash(seed, d), d))
        .collect();
    ranked.sort();
    let keep: BTreeSet<String> = ranked
        .into_iter()
        .take(n)
        .map(|(_, d)| d.to_string())
        .collect();
    items
        .into_iter()
        .filter(|i| keep.contains(grouping.key(i)))
        .collect()
}

/// One shard of `count`, numbered from 1 as on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The folder `eval --shard K/N` writes into: `shard-K-of-N`.
    pub fn folder_name(&self) -> String {
        format!("shard-{}-of-{}", self.index, self.count)
    }

    /// The shard a folder named `shard-K-of-N` holds (None: another name).
    pub fn of_folder(name: &str) -> Option<Shard> {
        let (k, n) = name.strip_prefix("shard-")?.split_once("-of-")?;
        let (index, count) = (k.parse().ok()?, n.parse().ok()?);
        (index >= 1 && index <= count).then_some(Shard { index, count })
    }

    /// `K/N` with 1 ≤ K ≤ N.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("shard `{text}` is not K/N (e.g. 2/4)"))?;
        let index: usize = k
            .trim()
            .parse()
            .map_err(|_| format!("shard `{text}`: K is not a number"))?;
        let count: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("shard `{text}`: N is not a number"))?;
        if count == 0 || index == 0 || index > count {
            return Err(format!("shard `{text}`: need 1 ≤ K ≤ N"));
        }
        Ok(Shard { index, count })
    }

    /// From SLURM job arrays: SLURM_ARRAY_TASK_ID (as numbered by `--array`, from
    /// SLURM_ARRAY_TASK_MIN) and SLURM_ARRAY_TASK_COUNT; `None` outside an array job.
    pub fn from_slurm(env: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, String> {
        let (Some(id), Some(count)) = (env("SLURM_ARRAY_TASK_ID"), env("SLURM_ARRAY_TASK_COUNT"))
        else {
            return Ok(None);
        };
        let num = |name: &str, v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("{name}={v} is not a number"))
        };
        let id = num("SLURM_ARRAY_TASK_ID", &id)?;
        let count = num("SLURM_ARRAY_TASK_COUNT", &count)?;
        let min = match env("SLURM_ARRAY_TASK_MIN") {
            Some(m) => num("SLURM_ARRAY_TASK_MIN", &m)?,
            None => 0,
        };
        let index = id
            .checked_sub(min)
            .map(|i| i + 1)
            .ok_or_else(|| format!("SLURM_ARRAY_TASK_ID={id} below SLURM_ARRAY_TASK_MIN={min}"))?;
        if count == 0 || index > count {
            return Err(format!(
                "SLURM array task {id} (min {min}) is outside its {count} tasks (use --shard K/N with --array ranges that are contiguous)"
            ));
        }
        Ok(Some(Shard { index, count }))
    }

    /// This shard's items: whole dialogues dealt round-robin in order of first appearance, so the
    /// shards are balanced, disjoint, cover everything, and within-dialogue statistics never
    /// need two shards.
    pub fn select(&self, items: Vec<Item>) -> Vec<Item> {
        self.select_groups(items, Grouping::Dialogues)
    }

    /// `select` with groups of either kind (whole contexts for a pairwise run).
    pub fn select_groups(&self, items: Vec<Item>, grouping: Grouping) -> Vec<Item> {
        let mut order: BTreeMap<String, usize> = BTreeMap::new();
        for item in &items {
            let next = order.len();
            order.entry(grouping.key(item).to_string()).or_insert(next);
        }
        items
            .into_iter()
            .filter(|i| order[grouping.key(i)] % self.count == self.index - 1)
            .collect()
    }
}

/// A set of items' count and digest: sha256 over its items in id order, each item's id, a NUL,
/// and its line as an items file holds it. Shards record the set they were cut from with it.
pub fn set_digest<'a>(items: impl IntoIterator<Item = &'a Item>) -> (usize, String) {
    let mut lines: Vec<(&str, String)> = items
        .into_iter()
        .map(|it| (it.id.as_str(), it.to_json_line()))
        .collect();
    let count = lines.len();
    lines.sort();
    let mut text = String::new();
    for (id, line) in lines {
        text.push_str(id);
        text.push('\0');
        text.push_str(&line);
        text.push('\n');
    }
    (count, crate::checksum::sha256_hex(text.as_bytes()))
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Turn;

    fn item(id: &str, dialogue: &str) -> Item {
        Item {
            id: id.into(),
            context: vec![],
            response: Turn {
                speaker: "S".into(),
                text: "x".into(),
            },
            reference: vec![],
            setting: None,
            system: None,
            dialogue: Some(dialogue.into()),
            scope: Default::default(),
            context_id: None,
            human: Default::default(),
            raters: vec![],
            meta: None,
            translation: None,
            numeric_id: false,
        }
    }

    fn items() -> Vec<Item> {
        (0..40)
            .flat_map(|d| (0..3).map(move |t| item(&format!("{d}/{t}"), &d.to_string())))
            .collect()
    }

    #[test]
    fn shards_are_disjoint_whole_dialogues_and_cover_all() {
        let all = items();
        let mut seen = Vec::new();
        for k in 1..=3 {
            let part = Shard { index: k, count: 3 }.select(all.clone());
            assert!(
                part.len() >= 39 && part.len() <= 42,
                "balanced: {}",
                part.len()
            );
            assert_eq!(part.len() % 3, 0, "whole dialogues");
            seen.extend(part.into_iter().map(|i| i.id));
        }
        seen.sort();
        let mut ids: Vec<String> = all.into_iter().map(|i| i.id).collect();
        ids.sort();
        assert_eq!(seen, ids);
    }

    #[test]
    fn shard_parsing_and_slurm() {
        assert_eq!(Shard::parse("2/4"), Ok(Shard { index: 2, count: 4 }));
        assert!(
            Shard::parse("0/4").is_err()
                && Shard::parse("5/4").is_err()
                && Shard::parse("x").is_err()
        );
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Shard::from_slurm(env(&[])), Ok(None));
        assert_eq!(
            Shard::from_slurm(env(&[
                ("SLURM_ARRAY_TASK_ID", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "0")
            ])),
            Ok(Some(Shard { index: 1, count: 4 }))
        );
        assert_eq!(
            Shard::from_slurm(env(&[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "1")
            ])),
            Ok(Some(Shard { index: 4, count: 4 }))
        );
        assert!(
            Shard::from_slurm(env(&[
                ("SLURM_ARRAY_TASK_ID", "9"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]))
            .is_err()
        );
    }

    #[test]
    fn dialogue_sample_is_whole_seeded_and_stable() {
        let a = sample_dialogues(items(), 10, 7);
        assert_eq!(a.len(), 30);
        assert_eq!(a, sample_dialogues(items(), 10, 7));
        assert_ne!(a, sample_dialogues(items(), 10, 8));
        // Dropping other dialogues from the input does not change the choice among the rest.
        let fewer: Vec<Item> = items()
            .into_iter()
            .filter(|i| a.iter().any(|x| x.dialogue == i.dialogue) || i.id.starts_with('1'))
            .collect();
        assert_eq!(sample_dialogues(fewer, 10, 7), a);
    }
}

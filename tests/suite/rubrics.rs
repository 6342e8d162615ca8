//! The built-in rubrics follow the user's seed documents (copied into tests/fixtures/seeds from
//! the project's ../shared/seeds, which they must equal where it exists): checked here against
//! the seed texts themselves, not against hyoka's own output.

use hyoka::prompt::{PromptBuilder, sample_item, sample_pair};
use hyoka::rubric::{OutputMode, Rubric, builtin_names};

fn seed(prefix: &str) -> String {
    let dir = crate::common::fixtures().join("seeds");
    let entry = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap();
    std::fs::read_to_string(entry).unwrap()
}

/// The copies are the user's seeds, where the project's shared folder is beside the repository.
#[test]
fn the_seed_copies_are_the_users_seeds() {
    let shared = crate::common::repo_root().join("../shared/seeds");
    let Ok(entries) = std::fs::read_dir(&shared) else {
        eprintln!(
            "{} is not here: the copies are not compared",
            shared.display()
        );
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let copy = crate::common::fixtures()
            .join("seeds")
            .join(path.file_name().unwrap());
        assert_eq!(
            std::fs::read(&copy).ok(),
            std::fs::read(&path).ok(),
            "{} differs from {}",
            copy.display(),
            path.display()
        );
    }
}

fn rubric(name: &str) -> Rubric {
    Rubric::resolve(name).unwrap().0
}

#[test]
fn every_builtin_validates() {
    assert_eq!(builtin_names().len(), 16);
    for name in builtin_names() {
        let r = rubric(name);
        assert_eq!(r.name, name);
        let builder = PromptBuilder::new(&r).unwrap();
        let prompt = match r.pairwise {
            None => builder.render(&sample_item()).unwrap(),
            Some(_) => builder
                .render_pair_keeping(&sample_pair(), false, usize::MAX)
                .unwrap(),
        };
        let expect = if r.output == OutputMode::Score {
            r.aspects.len()
        } else {
            1
        };
        assert_eq!(prompt.answers.len(), expect);
    }
}

/// Table 2 of the paper: aspect names and scales, in order.
#[test]
fn dialogue6_scales_follow_table_2() {
    let paper = seed("002_");
    let start = paper.find("表2 主観評価データの評価項目と定義").unwrap();
    let table: Vec<(String, Vec<i64>)> = paper[start..]
        .lines()
        .skip(3)
        .take_while(|l| l.contains('\t'))
        .map(|l| {
            let head = l.split('\t').next().unwrap();
            let (name, scale) = head.split_once('(').unwrap();
            let scale = scale
                .trim_end_matches(')')
                .split(',')
                .map(|s| s.trim().parse().unwrap())
                .collect();
            (name.trim().to_string(), scale)
        })
        .collect();
    assert_eq!(table.len(), 6, "{table:?}");
    for lang in ["dialogue6-ja", "dialogue6-en"] {
        let r = rubric(lang);
        assert_eq!(r.aspects.len(), 6);
        for (a, (name, scale)) in r.aspects.iter().zip(&table) {
            assert_eq!(a.scores(), *scale, "{lang}: {}", a.key);
            if lang == "dialogue6-ja" {
                assert_eq!(&a.name, name);
            }
        }
    }
}

/// The pairwise versions ask about the paper's aspects (keys, names, definitions and the human
/// ratings they are compared with, as the absolute rubrics checked above), each a verdict of
/// response 1, response 2 or a tie; both responses are shown, in the order given.
#[test]
fn pairwise_rubrics_ask_about_the_absolute_rubrics_aspects() {
    for (pair, single) in [
        ("dialogue6-pair-ja", "dialogue6-ja"),
        ("dialogue6-pair-en", "dialogue6-en"),
        ("breakdown-pair-ja", "breakdown3-ja"),
        ("breakdown-pair-en", "breakdown3-en"),
    ] {
        let (p, s) = (rubric(pair), rubric(single));
        assert_eq!(p.language, s.language, "{pair}");
        let v = p.pairwise.expect(pair);
        assert_eq!((v.first, v.second, v.tie), (1, 2, Some(0)), "{pair}");
        assert_eq!(p.aspects.len(), s.aspects.len(), "{pair}");
        for (a, b) in p.aspects.iter().zip(&s.aspects) {
            assert_eq!((&a.key, &a.human), (&b.key, &b.human), "{pair}");
            if pair.starts_with("dialogue6") {
                assert_eq!((&a.name, &a.definition), (&b.name, &b.definition), "{pair}");
            }
        }
        let builder = PromptBuilder::new(&p).unwrap();
        let pair_item = sample_pair();
        let text = |swapped| {
            let prompt = builder
                .render_pair_keeping(&pair_item, swapped, usize::MAX)
                .unwrap();
            prompt.messages.last().unwrap().content.clone()
        };
        let (a, b) = (
            &pair_item.first.response.text,
            &pair_item.second.response.text,
        );
        let (ab, ba) = (text(false), text(true));
        assert!(
            ab.find(a.as_str()).unwrap() < ab.find(b.as_str()).unwrap(),
            "{pair}"
        );
        assert!(
            ba.find(b.as_str()).unwrap() < ba.find(a.as_str()).unwrap(),
            "{pair}"
        );
    }
}

/// Appendix A: level labels and definitions of the five aspects it defines.
#[test]
fn dialogue6_ja_levels_follow_appendix_a() {
    let paper = seed("002_");
    let start = paper.find("A 各評価項目のレベルごとの定義").unwrap();
    let end = paper[start..].find("図 1").unwrap() + start;
    let appendix = &paper[start..end];
    let r = rubric("dialogue6-ja");
    for (i, a) in r.aspects.iter().take(5).enumerate() {
        let marker = format!("{}{}", ["①", "②", "③", "④", "⑤"][i], a.name);
        let from = appendix
            .find(&marker)
            .unwrap_or_else(|| panic!("{marker} not in appendix A"));
        let section = &appendix[from..];
        let section = &section[..section[marker.len()..]
            .find("<p>")
            .map_or(section.len(), |e| e + marker.len())];
        for level in &a.levels {
            let tag = format!("・{} ({}) : ", level.score, level.label.as_deref().unwrap());
            let at = section
                .find(&tag)
                .unwrap_or_else(|| panic!("{tag} not in appendix A for {}", a.name));
            let definition = section[at + tag.len()..]
                .split(['<', '・'])
                .next()
                .unwrap()
                .trim();
            let core = definition.trim_start_matches("応答文が");
            assert!(
                level.description.contains(core),
                "{}: {:?} does not contain {core:?}",
                a.name,
                level.description
            );
        }
    }
}

/// Appendix B: the paper's own prompt lines for 自然さ, with its examples.
#[test]
fn dialogue6_ja_prompt_reproduces_appendix_b() {
    let paper = seed("002_").replace(" さん", "さん");
    let r = rubric("dialogue6-ja");
    let prompt = PromptBuilder::new(&r)
        .unwrap()
        .render(&sample_item())
        .unwrap();
    let user = &prompt.messages[0].content;
    for line in [
        "・1 (不自然) : 応答文が日本語として不自然である際は、スコアを 1 として下さい。",
        "・3 (自然) : 応答文が日本語として自然である際は、スコアを 3 として下さい。",
        "例: Bさん「おなかがすいてきましたね。なにか食べたいものはありますか？」",
        "→Aさん「私は私はお寿司が食べたいですよ？」",
        "→Aさん「私は食べたいですよお寿司が」",
        "それでは評価していただく対話を示します。",
        "評価結果は必ず以下の形式で出力してください。",
    ] {
        assert!(paper.contains(line), "the seed lacks {line:?}");
        assert!(user.contains(line), "the prompt lacks {line:?}:\n{user}");
    }
    assert!(user.contains("①自然さ (1~3)\nこの項目では応答文が日本語として自然な文であるかどうかを 1~3 の整数値で評価して下さい。"));
    assert!(
        user.contains(
            "Aさんの応答 (評価対象) 「はい、週に数回ジムに行って、ランニングや水泳をしています。」"
        ),
        "{user}"
    );
    assert!(
        user.ends_with("首尾一貫性: 「」\n総合的な品質: 「」"),
        "{user}"
    );
    let names: Vec<String> = r
        .aspects
        .iter()
        .map(|a| format!("{}: 「", a.name))
        .collect();
    assert_eq!(prompt.answers, names);
}

#[test]
fn roleplay8_system_prompt_is_the_seed() {
    let r = rubric("roleplay8-ja");
    assert_eq!(
        r.prompt.system.as_deref().unwrap().trim_end(),
        seed("000_").trim_end()
    );
    assert_eq!(r.output, OutputMode::Json);
    assert_eq!(r.json.as_ref().unwrap().reason_key, "Evaluation Reason");
    let names: Vec<&str> = r.aspects.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Roleplay Adherence",
            "Consistency",
            "Contextual Understanding",
            "Expressiveness",
            "Creativity",
            "Naturalness of Japanese",
            "Enjoyment of the Dialogue",
            "Appropriateness of Turn-Taking",
        ]
    );
    for a in &r.aspects {
        assert_eq!((a.min, a.max, a.levels.len()), (1, 5, 5), "{}", a.name);
        // Every output-format key of the seed is an aspect name.
        assert!(seed("000_").contains(&format!("\"{}\": score (integer 1-5)", a.name)));
    }
    let mut item = sample_item();
    item.setting = Some("あなたは喫茶店の店主です。".into());
    let prompt = PromptBuilder::new(&r).unwrap().render(&item).unwrap();
    let user = &prompt.messages[1].content;
    assert!(user.contains("あなたは喫茶店の店主です。"));
    assert!(
        user.ends_with("assistant: はい、週に数回ジムに行って、ランニングや水泳をしています。"),
        "{user}"
    );
    assert!(user.contains("user: ああ、久しぶりです。"), "{user}");
}

#[test]
fn emotion_fit_prompt_is_the_seed_with_its_examples() {
    let r = rubric("emotion-fit");
    let seed_text = seed("001_").replace("canâ€™t", "can’t");
    let mut item = sample_item();
    item.setting = Some("Exercise".into());
    let prompt = PromptBuilder::new(&r).unwrap().render(&item).unwrap();
    let user = &prompt.messages[0].content;
    assert!(
        user.starts_with(seed_text.trim_end()),
        "prompt does not start with the seed"
    );
    assert!(user.contains("Output Evaluation Form (score ONLY):\n5\n\nExample 2:"));
    assert!(
        user.contains("Dialogue in [Exercise]:\nA: こんにちは！お元気でしたか？\nB: "),
        "{user}"
    );
    assert!(user.ends_with("Evaluation sentence:\nA: はい、週に数回ジムに行って、ランニングや水泳をしています。\n\nOutput Evaluation Form (score ONLY):"), "{user}");
    assert_eq!((r.aspects[0].min, r.aspects[0].max), (1, 5));
}

#[test]
fn context_limit_and_labels() {
    let r = rubric("dialogue6-ja");
    let builder = PromptBuilder::new(&r).unwrap();
    let mut item = sample_item();
    // Six turns; the rubric keeps the paper's four.
    item.context.insert(0, item.context[1].clone());
    item.context.insert(0, item.context[1].clone());
    let p = builder.render(&item).unwrap();
    assert_eq!(p.dropped_turns, 2);
    let p = builder.render_keeping(&item, 1).unwrap();
    assert_eq!(p.dropped_turns, 5);
    // With one context turn by B, B is labelled A (first to speak) and the responder B.
    assert!(
        p.messages[0]
            .content
            .contains("Aさん「そうですね。令和になっちゃったものなあ。")
    );
    assert!(p.messages[0].content.contains("Bさんの応答 (評価対象)"));
}

#[test]
fn rubric_hash_changes_with_wording() {
    let a = rubric("dialogue6-ja");
    let mut b = a.clone();
    assert_eq!(a.hash(), b.hash());
    b.aspects[0].definition.push('。');
    assert_ne!(a.hash(), b.hash());
}

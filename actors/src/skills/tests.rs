use super::parse::{self, parse};
use super::registry::{self, SkillConfig, SkillRegistry, resolve};
use super::scan::{self, Entry};
use super::tool::read_resource;
use super::*;
use std::fs;
use std::path::Path;

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\nDo the thing.\n")
}

fn write_skill(root: &Path, rel: &str, text: &str) {
    let dir = root.join(rel);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("SKILL.md"), text).unwrap();
}

#[test]
fn a_plain_skill_parses_with_its_optional_fields() {
    let text = "---\nname: pdf\ndescription: Fill PDF forms.\nlicense: MIT\ncompatibility: needs python3\nallowed-tools: bash read\nmetadata:\n  author: me\n  version: \"1.0\"\n---\n\n# PDF\nbody\n";
    let p = parse(text, "pdf").unwrap();
    assert_eq!(p.name, "pdf");
    assert_eq!(p.description, "Fill PDF forms.");
    assert_eq!(p.license.as_deref(), Some("MIT"));
    assert_eq!(p.compatibility.as_deref(), Some("needs python3"));
    assert_eq!(p.allowed_tools.as_deref(), Some("bash read"));
    assert_eq!(p.metadata["author"], "me");
    assert_eq!(p.metadata["version"], "1.0");
    assert_eq!(p.body, "# PDF\nbody\n");
}

#[test]
fn a_bom_and_crlf_line_ends_parse() {
    let text = "\u{feff}---\r\nname: win\r\ndescription: Made on Windows.\r\n---\r\nline one\r\nline two\r\n";
    let p = parse(text, "win").unwrap();
    assert_eq!(p.description, "Made on Windows.");
    assert_eq!(p.body, "line one\nline two\n");
}

#[test]
fn colons_inside_an_unquoted_description_parse() {
    let text = "---\nname: colons\ndescription: Use when: the user says a: b: c\nmetadata:\n  note: x: y\n---\nbody\n";
    let p = parse(text, "colons").unwrap();
    assert_eq!(p.description, "Use when: the user says a: b: c");
    assert_eq!(p.metadata["note"], "x: y");
}

#[test]
fn yes_no_booleans_and_other_tools_fields_parse() {
    let text = "---\nname: flags\ndescription: Has flags.\ndisable-model-invocation: no\nuser-invocable: yes\nmetadata:\n  internal: yes\n  beta: true\n---\nbody\n";
    let p = parse(text, "flags").unwrap();
    assert_eq!(p.metadata["beta"], "true");
    assert!(["yes", "true"].contains(&p.metadata["internal"].as_str()));
}

#[test]
fn a_folded_description_and_a_list_of_tools_parse() {
    let text = "---\nname: folded\ndescription: >\n  Long text\n  over lines.\nallowed-tools:\n  - bash\n  - read\n---\nbody\n";
    let p = parse(text, "folded").unwrap();
    assert_eq!(p.description, "Long text over lines.");
    assert_eq!(p.allowed_tools.as_deref(), Some("bash read"));
}

#[test]
fn each_refusal_names_its_line_and_the_fix() {
    let cases: Vec<(String, &str, usize, &str)> = vec![
        ("# no frontmatter\n".into(), "x", 1, "must start with"),
        (
            "---\nname: x\ndescription: d\n".into(),
            "x",
            1,
            "never closed",
        ),
        (
            "---\nname: other\ndescription: d\n---\n".into(),
            "x",
            2,
            "differs from its folder `x`",
        ),
        ("---\nname: x\ndescription:\n---\n".into(), "x", 3, "empty"),
        (
            "---\nname: x\ndescription: \"\"\n---\n".into(),
            "x",
            3,
            "empty",
        ),
        ("---\nname: x\n---\n".into(), "x", 3, "no `description`"),
        ("---\ndescription: d\n---\n".into(), "x", 3, "no `name`"),
        (
            "---\nname: Bad_Name\ndescription: d\n---\n".into(),
            "Bad_Name",
            2,
            "lowercase letters",
        ),
        (
            "---\nname: a--b\ndescription: d\n---\n".into(),
            "a--b",
            2,
            "single hyphens",
        ),
        (
            format!("---\nname: x\ndescription: {}\n---\n", "d".repeat(1025)),
            "x",
            3,
            "1025 characters",
        ),
        (
            "---\nname: x\ndescription: d\nthis line is not a field\n  - [oops\n---\n".into(),
            "x",
            4,
            "not a `key: value` line",
        ),
        (
            format!(
                "---\nname: x\ndescription: d\n---\n{}",
                "a".repeat(parse::BODY_MAX + 1)
            ),
            "x",
            5,
            "move details into references/",
        ),
    ];
    for (text, folder, line, reason) in cases {
        let e = parse(&text, folder).expect_err(&text[..text.len().min(60)]);
        assert_eq!(e.line, line, "{text:.60}: {e:?}");
        assert!(e.reason.contains(reason), "{text:.60}: {e:?}");
    }
}

#[test]
fn every_builtin_skill_is_valid_and_embedded() {
    let set = resolve(scan::builtins(embedded::FILES));
    assert!(set.broken.is_empty(), "{:?}", set.broken);
    let names: Vec<&str> = set.skills.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "flyto-memory",
            "flyto-plans",
            "flyto-schedule",
            "skill-authoring"
        ]
    );
    let authoring = &set.skills["skill-authoring"];
    assert_eq!(authoring.resources, ["references/checklist.md"]);
    let text = read_resource(authoring, "references/checklist.md").unwrap();
    assert!(text.starts_with("# Skill review checklist"));
    assert!(read_resource(authoring, "../flyto-plans/SKILL.md").is_err());
}

#[test]
fn higher_sources_win_and_the_set_says_what_they_shadowed() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("config/skills");
    let work = tmp.path().join("work");
    write_skill(
        &user,
        "flyto-plans",
        &skill_md("flyto-plans", "user's plans"),
    );
    write_skill(&user, "deploy", &skill_md("deploy", "user deploy"));
    write_skill(&user, "only-user", &skill_md("only-user", "mine"));
    write_skill(
        &work,
        ".flyto/skills/deploy",
        &skill_md("deploy", "flyto deploy"),
    );
    write_skill(
        &work,
        ".agents/skills/deploy",
        &skill_md("deploy", "agents deploy"),
    );
    write_skill(&work, ".flyto/skills/broken", "no frontmatter\n");
    let reg = SkillRegistry::new(SkillConfig {
        user_dir: Some(user.clone()),
        project: true,
        rescan_every: None,
    });
    let set = reg.for_workdir(&work);
    assert_eq!(set.skills["flyto-plans"].parsed.description, "user's plans");
    assert_eq!(set.skills["flyto-plans"].origin, Origin::User);
    assert_eq!(
        set.shadowed["flyto-plans"],
        ["<builtin>/flyto-plans".to_string()]
    );
    assert_eq!(set.skills["deploy"].parsed.description, "agents deploy");
    assert_eq!(
        set.shadowed["deploy"],
        [
            work.join(".flyto/skills/deploy").display().to_string(),
            user.join("deploy").display().to_string()
        ]
    );
    assert!(set.skills.contains_key("only-user"));
    assert_eq!(set.broken.len(), 1);
    assert!(
        set.broken[0]
            .file
            .ends_with(".flyto/skills/broken/SKILL.md")
    );
    assert_eq!(set.broken[0].line, 1);

    // Project skills off: only built-ins and the user's.
    reg.reconfigure(SkillConfig {
        user_dir: Some(user),
        project: false,
        rescan_every: None,
    });
    let set = reg.for_workdir(&work);
    assert_eq!(set.skills["deploy"].parsed.description, "user deploy");
    assert!(set.broken.is_empty());
}

#[test]
fn reload_sees_new_skills_and_the_scan_skips_hidden_git_and_node_modules() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("skills");
    fs::create_dir_all(&user).unwrap();
    let reg = SkillRegistry::new(SkillConfig {
        user_dir: Some(user.clone()),
        project: true,
        rescan_every: None,
    });
    let work = tmp.path().join("w");
    fs::create_dir_all(&work).unwrap();
    assert!(!reg.for_workdir(&work).skills.contains_key("fresh"));
    write_skill(&user, "group/fresh", &skill_md("fresh", "new"));
    write_skill(&user, ".hidden/secret", &skill_md("secret", "no"));
    write_skill(&user, "node_modules/dep", &skill_md("dep", "no"));
    write_skill(&user, "a/.git/inside", &skill_md("inside", "no"));
    write_skill(&user, "1/2/3/4/5/6/too-deep", &skill_md("too-deep", "no"));
    write_skill(&user, "1/2/3/4/5/deep-ok", &skill_md("deep-ok", "yes"));
    // Cached until a reload.
    assert!(!reg.for_workdir(&work).skills.contains_key("fresh"));
    reg.reload();
    let set = reg.for_workdir(&work);
    let user_names: Vec<&str> = set
        .skills
        .values()
        .filter(|s| s.origin == Origin::User)
        .map(|s| s.name())
        .collect();
    assert_eq!(user_names, ["deep-ok", "fresh"]);
}

/// A tiny deterministic generator (no proptest here): xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

fn summary(set: &SkillSet) -> Vec<String> {
    let mut out: Vec<String> = set
        .skills
        .values()
        .map(|s| format!("{} <- {}", s.name(), s.folder))
        .collect();
    out.extend(
        set.shadowed
            .iter()
            .map(|(n, f)| format!("{n} shadows {f:?}")),
    );
    out.extend(set.broken.iter().map(|b| format!("broken {b:?}")));
    out
}

#[test]
fn resolution_is_the_same_whatever_order_entries_are_listed_in() {
    let names = ["alpha", "beta", "gamma", "delta"];
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        let work = tmp.path().join("work");
        let roots = [
            user.clone(),
            work.join(".flyto/skills"),
            work.join(".agents/skills"),
        ];
        for _ in 0..(4 + rng.below(12)) {
            let root = &roots[rng.below(3) as usize];
            let name = names[rng.below(4) as usize];
            let nest = ["", "x/", "y/z/", "x/y/"][rng.below(4) as usize];
            let text = match rng.below(5) {
                0 => "broken\n".to_string(),
                _ => skill_md(name, &format!("from seed {seed}")),
            };
            write_skill(root, &format!("{nest}{name}"), &text);
        }
        let config = SkillConfig {
            user_dir: Some(user.clone()),
            project: true,
            rescan_every: None,
        };
        let resolve_with = |order_seed: u64| {
            let rng = std::cell::RefCell::new(Rng(order_seed | 1));
            let lister = |dir: &Path| -> std::io::Result<Vec<Entry>> {
                let mut v = scan::list_fs(dir)?;
                rng.borrow_mut().shuffle(&mut v);
                Ok(v)
            };
            let mut candidates = scan::builtins(embedded::FILES);
            candidates.extend(scan::scan(&user, 1, Origin::User, &lister));
            candidates.extend(registry::scan_project(&config, &work, &lister));
            rng.borrow_mut().shuffle(&mut candidates);
            summary(&resolve(candidates))
        };
        let first = resolve_with(seed);
        for order in 0..6u64 {
            assert_eq!(
                resolve_with(seed * 1000 + order + 7),
                first,
                "seed {seed}, order {order}"
            );
        }
    }
}

#[test]
fn load_skill_paths_stay_inside_the_skill_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("skills");
    write_skill(&user, "conf", &skill_md("conf", "confined"));
    let dir = user.join("conf");
    fs::create_dir_all(dir.join("references")).unwrap();
    fs::write(dir.join("references/ok.md"), "inside\n").unwrap();
    fs::write(tmp.path().join("outside.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside.txt"), dir.join("link-out")).unwrap();
    std::os::unix::fs::symlink("references/ok.md", dir.join("link-in")).unwrap();
    fs::write(
        dir.join("big.txt"),
        "x".repeat(tool::MAX_RESOURCE_BYTES as usize + 1),
    )
    .unwrap();
    let reg = SkillRegistry::new(SkillConfig {
        user_dir: Some(user),
        project: false,
        rescan_every: None,
    });
    let set = reg.for_workdir(tmp.path());
    let skill = &set.skills["conf"];
    assert_eq!(
        skill.resources,
        ["big.txt", "link-in", "references/ok.md"],
        "the symlink out is not listed"
    );
    assert_eq!(
        read_resource(skill, "references/ok.md").unwrap(),
        "inside\n"
    );
    assert_eq!(read_resource(skill, "./link-in").unwrap(), "inside\n");
    let refused = [
        ("../../outside.txt", "leaves the skill's folder"),
        ("references/../../outside.txt", "leaves the skill's folder"),
        (
            &tmp.path().join("outside.txt").display().to_string(),
            "is absolute",
        ),
        ("link-out", "points outside"),
        ("big.txt", "more than"),
        ("references", "is a folder"),
        ("nope.md", "has no file"),
    ];
    for (path, why) in refused {
        let e = read_resource(skill, path).unwrap_err();
        assert!(e.contains(why), "{path}: {e}");
        assert!(!e.contains("secret"), "{path}: {e}");
    }
}

#[test]
fn the_catalogue_shortens_descriptions_but_never_drops_a_name() {
    let tmp = tempfile::tempdir().unwrap();
    let user = tmp.path().join("skills");
    for i in 0..60 {
        let name = format!("skill-{i:02}");
        write_skill(&user, &name, &skill_md(&name, &"word ".repeat(100)));
    }
    write_skill(&user, "bad", "---\nname: bad\n---\n");
    let reg = SkillRegistry::new(SkillConfig {
        user_dir: Some(user),
        project: false,
        rescan_every: None,
    });
    let set = reg.for_workdir(tmp.path());
    // 128 K tokens: 2 % is 10 K chars, so the 8,000 cap applies.
    let big = catalogue(&set, 128_000);
    assert_eq!(big.budget, 8000);
    assert!(big.shortened);
    // 10 K tokens: 2 % = 200 tokens = 800 chars, below the names alone.
    let small = catalogue(&set, 10_000);
    assert_eq!(small.budget, 800);
    for c in [&big, &small] {
        for i in 0..60 {
            assert!(c.text.contains(&format!("- skill-{i:02}")), "{}", c.text);
        }
        assert!(
            c.text
                .contains("1 skill could not be loaded (a broken SKILL.md)")
        );
    }
    assert!(small.text.contains("- skill-00\n"));
    let list_chars: usize = big
        .text
        .lines()
        .filter(|l| l.starts_with("- "))
        .map(|l| l.chars().count() + 1)
        .sum();
    assert!(list_chars <= 8000, "{list_chars}");
    // Not shortened when it fits.
    let one = resolve(scan::builtins(embedded::FILES));
    let c = catalogue(&one, 128_000);
    assert!(!c.shortened);
    assert!(
        c.text
            .contains(&one.skills["flyto-plans"].parsed.description)
    );
}

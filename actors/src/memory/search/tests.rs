use super::*;
use crate::memory::entry::{Entry, Kind, Meta, rfc3339};

const NOW: u64 = 1_700_000_000_000;
const DAY: u64 = 86_400_000;

fn entry(name: &str, kind: Kind, description: &str, headings: &[&str], age_days: u64) -> Entry {
    let updated_ms = NOW - age_days * DAY;
    Entry {
        meta: Meta {
            name: name.into(),
            description: description.into(),
            kind,
            created: rfc3339(updated_ms),
            updated: rfc3339(updated_ms),
            source: "s-1".into(),
            version: 1,
            session: None,
        },
        body: String::new(),
        created_ms: updated_ms,
        updated_ms,
        headings: headings.iter().map(|h| h.to_string()).collect(),
    }
}

#[test]
fn words_split_and_lowercase() {
    assert_eq!(
        tokenize("Run `cargo test-all` in CI_Server!"),
        ["run", "cargo", "test", "all", "in", "ci", "server"]
    );
    assert_eq!(tokenize("Größe 42x"), ["größe", "42x"]);
    assert!(tokenize("  -- !! ").is_empty());
}

#[test]
fn cjk_becomes_bigrams() {
    assert_eq!(tokenize("数据库迁移"), ["数据", "据库", "库迁", "迁移"]);
    // A lone character is a token; mixed text splits at the script change.
    assert_eq!(tokenize("用 sqlite 存储"), ["用", "sqlite", "存储"]);
    assert_eq!(tokenize("部署到k8s集群"), ["部署", "署到", "k8s", "集群"]);
    assert_eq!(tokenize("テスト"), ["テス", "スト"]);
}

#[test]
fn bm25_prefers_rare_terms_and_name_matches() {
    let a = entry("deploy-steps", Kind::Project, "how we release", &[], 0);
    let b = entry("notes", Kind::Project, "deploy notes and more", &[], 0);
    let c = entry("misc", Kind::Project, "nothing relevant here", &[], 0);
    let all = [&a, &b, &c];
    let r = rank(&all, "deploy", NOW, 10);
    assert_eq!(r.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1]);
    assert!(r[0].score > r[1].score);
    // No shared token: never returned, however fresh.
    assert!(rank(&all, "kubernetes", NOW, 10).is_empty());
    assert!(rank(&all, "", NOW, 10).is_empty());
}

#[test]
fn ties_break_by_name_and_recency_and_type_count() {
    let b = entry("b", Kind::Project, "same words", &[], 0);
    let a = entry("a", Kind::Project, "same words", &[], 0);
    let r = rank(&[&b, &a], "words", NOW, 10);
    assert_eq!(r.iter().map(|s| s.index).collect::<Vec<_>>(), [1, 0]);
    let old = entry("a", Kind::Project, "same words", &[], 300);
    let r = rank(&[&old, &b], "words", NOW, 10);
    assert_eq!(r[0].index, 1, "fresher wins a tie");
    let fb = entry("z", Kind::Feedback, "same words", &[], 0);
    let r = rank(&[&b, &fb], "words", NOW, 10);
    assert_eq!(r[0].index, 1, "feedback outweighs project");
}

/// Topics of the fixture: (name, description, heading) for English and
/// Chinese entries a query should find.
const TOPICS: &[(&str, &str, &str)] = &[
    (
        "test-command",
        "run the test suite with cargo nextest",
        "Tests",
    ),
    (
        "release-process",
        "how a release is tagged and published",
        "Release",
    ),
    (
        "db-migrations",
        "database migrations run with sqlx before deploy",
        "Migrations",
    ),
    (
        "code-style",
        "rustfmt defaults, no wildcard imports",
        "Style",
    ),
    (
        "ci-pipeline",
        "github actions pipeline, cache keys and matrix",
        "Pipeline",
    ),
    (
        "user-editor",
        "the user edits with neovim and likes short answers",
        "Editor",
    ),
    (
        "api-auth",
        "api authentication uses oauth tokens from the vault",
        "Authentication",
    ),
    (
        "logging",
        "structured logging with tracing, json in production",
        "Logging",
    ),
    ("shujuku-qianyi", "数据库迁移在部署之前运行", "迁移步骤"),
    ("bushu-liucheng", "部署流程：先构建镜像再推送到集群", "部署"),
    (
        "ceshi-mingling",
        "测试命令使用 cargo nextest 运行全部测试",
        "测试",
    ),
    ("daima-fengge", "代码风格遵循 rustfmt 默认配置", "代码风格"),
    ("rizhi-guifan", "日志规范：生产环境输出结构化日志", "日志"),
    ("yonghu-pianhao", "用户偏好简短的回答和中文注释", "用户偏好"),
];

/// Filler words for entries no query should rank high.
const FILLER: &[&str] = &[
    "meeting",
    "notes",
    "weekly",
    "sync",
    "office",
    "lunch",
    "holiday",
    "printer",
    "badge",
    "parking",
    "coffee",
    "budget",
    "hiring",
    "slides",
    "roadmap",
    "会议",
    "午餐",
    "假期",
    "打印机",
    "预算",
    "招聘",
    "幻灯片",
    "路线图",
    "咖啡",
    "停车",
];

/// 200 entries: each topic three times (strong: in the name and
/// description; medium: in the description; weak: in a heading only),
/// then filler.
fn fixture() -> Vec<Entry> {
    let mut out = Vec::new();
    for (i, (name, desc, heading)) in TOPICS.iter().enumerate() {
        out.push(entry(name, Kind::Project, desc, &[heading], (i as u64) % 7));
        out.push(entry(
            &format!("note-{i}-detail"),
            Kind::Reference,
            &format!("{desc}; details"),
            &[],
            10,
        ));
        out.push(entry(
            &format!("note-{i}-aside"),
            Kind::Reference,
            "an aside among other things",
            &[heading],
            20,
        ));
    }
    let mut k = 0usize;
    while out.len() < 200 {
        let w = |j: usize| FILLER[(k * 7 + j * 3) % FILLER.len()];
        out.push(entry(
            &format!("filler-{k}"),
            Kind::Project,
            &format!("{} {} {}", w(0), w(1), w(2)),
            &[w(3)],
            k as u64 % 90,
        ));
        k += 1;
    }
    out
}

#[test]
fn relevance_fixture_top_three() {
    let corpus = fixture();
    assert_eq!(corpus.len(), 200);
    let refs: Vec<&Entry> = corpus.iter().collect();
    let cases: &[(&str, [&str; 3])] = &[
        (
            "cargo nextest tests",
            ["test-command", "note-0-detail", "ceshi-mingling"],
        ),
        (
            "release tagging",
            ["release-process", "note-1-detail", "note-1-aside"],
        ),
        (
            "database migrations",
            ["db-migrations", "note-2-detail", "note-2-aside"],
        ),
        (
            "ci pipeline cache",
            ["ci-pipeline", "note-4-detail", "note-4-aside"],
        ),
        (
            "oauth authentication",
            ["api-auth", "note-6-detail", "note-6-aside"],
        ),
        (
            "数据库迁移",
            ["shujuku-qianyi", "note-8-detail", "note-8-aside"],
        ),
        (
            "部署流程是什么",
            ["bushu-liucheng", "note-9-detail", "shujuku-qianyi"],
        ),
        (
            "代码风格",
            ["daima-fengge", "note-11-detail", "note-11-aside"],
        ),
        (
            "用户偏好",
            ["yonghu-pianhao", "note-13-detail", "note-13-aside"],
        ),
        (
            "日志规范",
            ["rizhi-guifan", "note-12-detail", "note-12-aside"],
        ),
    ];
    for (query, want) in cases {
        let got: Vec<&str> = rank(&refs, query, NOW, 3)
            .iter()
            .map(|s| corpus[s.index].meta.name.as_str())
            .collect();
        assert_eq!(&got, want, "query {query:?}");
        // Stable: the same inputs, the same answer, in a shuffled corpus too.
        let mut shuffled = refs.clone();
        shuffled.reverse();
        let again: Vec<&str> = rank(&shuffled, query, NOW, 3)
            .iter()
            .map(|s| shuffled[s.index].meta.name.as_str())
            .collect();
        assert_eq!(&again, want, "query {query:?} reversed");
    }
}

#[test]
fn function_words_in_a_query_find_nothing_by_themselves() {
    let a = entry(
        "deploy-steps",
        Kind::Project,
        "how the deploy runs",
        &["The steps"],
        0,
    );
    let b = entry("tabs", Kind::User, "the user prefers tabs", &[], 0);
    let all = [&a, &b];
    assert!(rank(&all, "what is the plan for it", NOW, 10).is_empty());
    let r = rank(&all, "how does the deploy work", NOW, 10);
    assert_eq!(r.iter().map(|s| s.index).collect::<Vec<_>>(), [0]);
}

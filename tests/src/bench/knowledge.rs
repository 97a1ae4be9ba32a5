//! The `knowledge` benchmark: what memory and skills cost per model call.
//! In process (no daemon): it measures the rooms, not the transport.
//!
//! 1. Relevance: 1,000 memory entries (seeded, English and Chinese,
//!    300-2,000 bytes) in the two scopes' folders; a few hundred queries
//!    through the real search API (the manager, the scope actors,
//!    `Memory::search`), p50/p99, interleaved with a baseline that reads
//!    every file of the folders and substring-scans them for the query's
//!    words. Target: p99 under 5 ms.
//! 2. Skill discovery: 500 skills in the user source; the start-up scan
//!    (`SkillRegistry::new`) and a reload, and the catalogue's size for a
//!    128k and a 16k window.
//! 3. Prompt overhead per call, in estimated tokens
//!    (`compaction::estimate`): the catalogue (built-ins alone, and with
//!    the 500 skills), and memory (both indexes at their caps, filled
//!    through `Memory::write` until it refused, plus 5 injected entries of
//!    the corpus's median size).

use crate::{machine, percentile, verdict};
use anyhow::Context;
use flyto_actors::clock::SystemClock;
use flyto_actors::compaction::estimate::text_tokens;
use flyto_actors::memory::entry::{Kind, Meta, render, rfc3339};
use flyto_actors::memory::{Memory, MemoryArgs, MemoryError, MemoryManager, WriteReq};
use flyto_actors::skills::{SkillConfig, SkillRegistry, catalogue};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the `knowledge` benchmark runs.
pub struct Args {
    pub entries: usize,
    pub queries: usize,
    pub skills: usize,
}

const SEED: u64 = 0x6b6e_6f77;
const WARMUP: usize = 20;
const TARGET_P99: Duration = Duration::from_millis(5);
/// Entries the session injects per call (issue 12: at most 5).
const INJECTED: usize = 5;
const DAY_MS: u64 = 86_400_000;
const MANAGER: &str = "flyto-bench.memory";

const WORDS: &[&str] = &[
    "cargo",
    "test",
    "build",
    "release",
    "deploy",
    "staging",
    "database",
    "migration",
    "schema",
    "index",
    "query",
    "cache",
    "redis",
    "postgres",
    "sqlite",
    "docker",
    "image",
    "container",
    "kubernetes",
    "cluster",
    "helm",
    "nginx",
    "proxy",
    "certificate",
    "tls",
    "token",
    "auth",
    "login",
    "session",
    "cookie",
    "api",
    "endpoint",
    "latency",
    "timeout",
    "retry",
    "backoff",
    "queue",
    "worker",
    "cron",
    "schedule",
    "backup",
    "restore",
    "snapshot",
    "volume",
    "disk",
    "memory",
    "leak",
    "profile",
    "flamegraph",
    "benchmark",
    "lint",
    "clippy",
    "format",
    "rustfmt",
    "commit",
    "branch",
    "rebase",
    "merge",
    "review",
    "ci",
    "pipeline",
    "github",
    "actions",
    "secret",
    "vault",
    "config",
    "toml",
    "yaml",
    "json",
    "logging",
    "tracing",
    "metrics",
    "grafana",
    "alert",
    "oncall",
    "incident",
    "rollback",
    "feature",
    "flag",
    "frontend",
    "react",
    "typescript",
    "webpack",
    "vite",
    "css",
    "layout",
    "mobile",
    "android",
    "ios",
    "python",
    "pytest",
    "poetry",
    "virtualenv",
    "node",
    "npm",
    "pnpm",
    "monorepo",
    "workspace",
    "crate",
    "tokio",
    "async",
    "thread",
    "mutex",
    "deadlock",
    "panic",
    "error",
    "handling",
    "parser",
    "lexer",
    "grammar",
    "protocol",
    "socket",
    "http",
    "grpc",
    "websocket",
    "stream",
    "upload",
    "download",
    "s3",
    "bucket",
    "region",
    "terraform",
    "ansible",
    "ssh",
    "firewall",
    "dns",
    "domain",
    "email",
    "smtp",
    "invoice",
    "billing",
    "payment",
    "stripe",
    "customer",
    "report",
    "export",
    "csv",
    "pdf",
    "translation",
    "locale",
    "timezone",
    "calendar",
    "search",
    "ranking",
];

const CJK_WORDS: &[&str] = &[
    "数据库",
    "迁移",
    "部署",
    "测试",
    "发布",
    "缓存",
    "索引",
    "查询",
    "容器",
    "集群",
    "证书",
    "登录",
    "会话",
    "接口",
    "延迟",
    "超时",
    "重试",
    "队列",
    "定时任务",
    "备份",
    "恢复",
    "快照",
    "磁盘",
    "内存",
    "泄漏",
    "性能",
    "基准",
    "格式化",
    "提交",
    "分支",
    "合并",
    "代码审查",
    "流水线",
    "密钥",
    "配置",
    "日志",
    "监控",
    "告警",
    "值班",
    "故障",
    "回滚",
    "功能开关",
    "前端",
    "移动端",
    "依赖",
    "工作区",
    "线程",
    "死锁",
    "错误处理",
    "解析器",
    "协议",
    "上传",
    "下载",
    "存储桶",
    "防火墙",
    "域名",
    "邮件",
    "发票",
    "计费",
    "支付",
    "客户",
    "报表",
    "导出",
    "翻译",
    "时区",
    "日历",
    "搜索",
    "排序",
    "用户偏好",
    "项目约定",
    "代码风格",
    "文档",
    "权限",
];

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from[rng.gen_range(0..from.len())]
}

fn chinese(rng: &mut StdRng) -> bool {
    // About a third of the entries and queries are Chinese.
    rng.gen_ratio(1, 3)
}

/// A sentence of `n` words, in one language.
fn sentence(rng: &mut StdRng, zh: bool, n: usize) -> String {
    let words: Vec<&str> = (0..n)
        .map(|_| pick(rng, if zh { CJK_WORDS } else { WORDS }))
        .collect();
    if zh {
        // Chinese has no spaces; a comma now and then, as people write.
        words
            .chunks(3)
            .map(|c| c.concat())
            .collect::<Vec<_>>()
            .join("，")
    } else {
        words.join(" ")
    }
}

/// One generated entry: its meta and body, about `size` bytes in all.
fn gen_entry(rng: &mut StdRng, i: usize, now_ms: u64) -> (Meta, String) {
    let zh = chinese(rng);
    let name = format!("{}-{}-{i}", pick(rng, WORDS), pick(rng, WORDS));
    let mut description = sentence(rng, zh, if zh { 5 } else { 9 });
    while description.chars().count() > 150 {
        description.pop();
    }
    let kind = match rng.gen_range(0..10) {
        0 => Kind::User,
        1..=3 => Kind::Feedback,
        4..=7 => Kind::Project,
        _ => Kind::Reference,
    };
    let size = rng.gen_range(300..2000);
    let mut body = String::new();
    while body.len() < size {
        body.push_str(&format!("## {}\n\n", sentence(rng, zh, 3)));
        for _ in 0..rng.gen_range(1..4) {
            let n = rng.gen_range(6..20);
            body.push_str(&sentence(rng, zh, n));
            body.push_str(if zh { "。\n" } else { ".\n" });
        }
        body.push('\n');
    }
    let updated = now_ms - rng.gen_range(0..200) * DAY_MS;
    let meta = Meta {
        name,
        description,
        kind,
        created: rfc3339(updated - DAY_MS),
        updated: rfc3339(updated),
        source: "s-bench".into(),
        version: 1,
        session: None,
    };
    (meta, body)
}

/// A query of 1-4 words, as a user's message might name a topic.
fn gen_query(rng: &mut StdRng) -> Vec<String> {
    let zh = chinese(rng);
    let n = rng.gen_range(1..=4);
    (0..n)
        .map(|_| pick(rng, if zh { CJK_WORDS } else { WORDS }).to_string())
        .collect()
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let total = Instant::now();
    machine();
    if cfg!(debug_assertions) {
        println!(
            "WARNING: a debug build; the timings are meaningless. Run `cargo run --release -p flyto-tests --bin flyto-bench -- knowledge`"
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let tmp = tempfile::tempdir().context("temp dir")?;
    let median_entry = relevance(&rt, tmp.path(), args)?;
    let catalogue_tokens = skills(tmp.path(), args.skills)?;
    overhead(&rt, tmp.path(), median_entry, catalogue_tokens, args.skills)?;
    dream_gates(tmp.path())?;
    println!("knowledge done in {:.1}s", total.elapsed().as_secs_f64());
    Ok(())
}

fn start_memory(rt: &tokio::runtime::Runtime, state: &Path, name: &str) -> anyhow::Result<Memory> {
    rt.block_on(ractor::Actor::spawn(
        Some(name.into()),
        MemoryManager,
        MemoryArgs {
            state_dir: state.to_path_buf(),
            clock: Arc::new(SystemClock),
            idle: Duration::from_secs(3600),
            shared: None,
        },
    ))
    .context("memory manager")?;
    Ok(Memory {
        manager: name.into(),
        state_dir: state.to_path_buf(),
    })
}

/// Relevance over `args.entries` entries; returns the corpus's median
/// entry, in estimated tokens.
fn relevance(rt: &tokio::runtime::Runtime, root: &Path, args: &Args) -> anyhow::Result<u64> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let work = root.join("work");
    let state = root.join("state");
    std::fs::create_dir_all(&work).context("workdir")?;
    let mem = start_memory(rt, &state, MANAGER)?;
    let paths = mem.paths(&work).map_err(|e| anyhow::anyhow!("{e}"))?;
    for d in [&paths.project, &paths.user] {
        std::fs::create_dir_all(d).context("memory folders")?;
    }
    // Written as files, the way a person editing by hand would: 1,000
    // entries are past the index cap (200 lines a scope) that
    // `memory_write` enforces, and reading is what is measured.
    let now = flyto_actors::clock::Clock::now_ms(&SystemClock);
    let mut sizes: Vec<(usize, u64)> = Vec::new();
    for i in 0..args.entries {
        let (meta, body) = gen_entry(&mut rng, i, now);
        let text = render(&meta, &body);
        let dir = if meta.kind == Kind::User {
            &paths.user
        } else {
            &paths.project
        };
        std::fs::write(dir.join(format!("{}.md", meta.name)), &text).context("write entry")?;
        sizes.push((text.len(), text_tokens(&text)));
    }
    // The scope actor trusts its cache only for files that changed more
    // than `RACY` ago (a second edit within a coarse timestamp tick could
    // look unchanged); wait that out, as for any folder not being written.
    std::thread::sleep(flyto_actors::memory::cache::RACY);
    let mut bytes: Vec<usize> = sizes.iter().map(|s| s.0).collect();
    let mut tokens: Vec<u64> = sizes.iter().map(|s| s.1).collect();
    bytes.sort();
    tokens.sort();
    let median_tokens = tokens[tokens.len() / 2];
    let user_n = std::fs::read_dir(&paths.user)
        .context("user scope")?
        .count();
    println!(
        "\n== knowledge: relevance over {} memory entries ({} project, {user_n} user; {} to {} bytes, median {} bytes / {median_tokens} tokens), {} queries after {WARMUP} warm-up ==",
        args.entries,
        args.entries - user_n,
        bytes[0],
        bytes[bytes.len() - 1],
        bytes[bytes.len() / 2],
        args.queries
    );
    let queries: Vec<Vec<String>> = (0..WARMUP + args.queries)
        .map(|_| gen_query(&mut rng))
        .collect();
    let dirs = [paths.project.clone(), paths.user.clone()];
    let search = |q: &[String]| -> anyhow::Result<(Duration, usize)> {
        let query = q.join(" ");
        let start = Instant::now();
        let found = rt
            .block_on(mem.search(&work, &query, now, INJECTED))
            .map_err(|e| anyhow::anyhow!("memory search: {e}"))?;
        Ok((start.elapsed(), found.len()))
    };
    let (first, _) = search(&queries[0])?;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let (mut hits, mut base_hits) = (0usize, 0usize);
    // Interleaved, so drift on the machine hits both alike.
    for (i, q) in queries.iter().enumerate() {
        let (took, n) = search(q)?;
        let start = Instant::now();
        let m = substring_scan(&dirs, q)?;
        let base_took = start.elapsed();
        if i >= WARMUP {
            ours.push(took.as_nanos() as u64);
            base.push(base_took.as_nanos() as u64);
            hits += n;
            base_hits += m;
        }
    }
    ours.sort();
    base.sort();
    let n = ours.len().max(1);
    let ms = |ns: u64| format!("{:.2}ms", ns as f64 / 1e6);
    let (p50, p99) = (percentile(&ours, 0.50), percentile(&ours, 0.99));
    let (b50, b99) = (percentile(&base, 0.50), percentile(&base, 0.99));
    println!(
        "first search (the scope actors start and read the folders): {}",
        ms(first.as_nanos() as u64)
    );
    println!(
        "memory search (BM25 top {INJECTED}): p50 {}, p99 {}; {:.1} results a query",
        ms(p50),
        ms(p99),
        hits as f64 / n as f64
    );
    println!(
        "baseline (read every file, substring-scan for the query words): p50 {}, p99 {}; {:.1} files matched a query",
        ms(b50),
        ms(b99),
        base_hits as f64 / n as f64
    );
    println!(
        "relevance p50 ratio {:.2}, p99 ratio {:.2} (ours / baseline); target p99 under 5 ms: {}",
        p50 as f64 / b50.max(1) as f64,
        p99 as f64 / b99.max(1) as f64,
        verdict(Duration::from_nanos(p99) < TARGET_P99)
    );
    Ok(median_tokens)
}

/// The baseline: every file read and lowercased, each query word counted;
/// returns how many files matched any word.
fn substring_scan(dirs: &[PathBuf], words: &[String]) -> anyhow::Result<usize> {
    let mut matched = 0;
    for dir in dirs {
        for d in std::fs::read_dir(dir).context("list memory folder")? {
            let path = d.context("list memory folder")?.path();
            if path.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .context("read entry")?
                .to_lowercase();
            let count: usize = words.iter().map(|w| text.matches(w.as_str()).count()).sum();
            if count > 0 {
                matched += 1;
            }
        }
    }
    Ok(std::hint::black_box(matched))
}

/// Skill discovery with `n` skills in the user source; returns the
/// catalogue's tokens (built-ins alone, with the `n` skills) at 128k.
fn skills(root: &Path, n: usize) -> anyhow::Result<(u64, u64)> {
    let mut rng = StdRng::seed_from_u64(SEED ^ 0x5c11);
    let user = root.join("config/skills");
    let mut body_bytes = 0usize;
    for i in 0..n {
        let name = format!("{}-{}-{i}", pick(&mut rng, WORDS), pick(&mut rng, WORDS));
        let dir = user.join(&name);
        std::fs::create_dir_all(&dir).context("skill folder")?;
        let len = rng.gen_range(12..40);
        let description = format!(
            "Use when the user asks to {}. Covers {}.",
            sentence(&mut rng, false, len / 2),
            sentence(&mut rng, false, len / 2)
        );
        let mut body = String::new();
        let size = rng.gen_range(1000..6000);
        while body.len() < size {
            body.push_str(&format!("## {}\n\n", sentence(&mut rng, false, 3)));
            let len = rng.gen_range(10..30);
            body.push_str(&sentence(&mut rng, false, len));
            body.push_str(".\n\n");
        }
        body_bytes += body.len();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n\n{body}"),
        )
        .context("SKILL.md")?;
        if rng.gen_ratio(1, 3) {
            std::fs::create_dir_all(dir.join("references")).context("references")?;
            std::fs::write(dir.join("references/guide.md"), "# Guide\n").context("guide")?;
        }
    }
    let work = root.join("work");
    println!(
        "\n== knowledge: skill discovery, {n} skills in the user source (bodies {} KB in all), plus the built-ins ==",
        body_bytes / 1024
    );
    let config = SkillConfig {
        user_dir: Some(user),
        project: false,
        rescan_every: None,
    };
    let start = Instant::now();
    let registry = SkillRegistry::new(config);
    let startup = start.elapsed();
    let mut reloads: Vec<u64> = (0..10)
        .map(|_| {
            let start = Instant::now();
            registry.reload();
            let _ = std::hint::black_box(registry.for_workdir(&work));
            start.elapsed().as_nanos() as u64
        })
        .collect();
    reloads.sort();
    let set = registry.for_workdir(&work);
    println!(
        "start-up scan (SkillRegistry::new, warm page cache): {:.1}ms; reload + resolve p50 {:.1}ms over 10; {} skills valid, {} broken",
        startup.as_secs_f64() * 1e3,
        percentile(&reloads, 0.5) as f64 / 1e6,
        set.skills.len(),
        set.broken.len()
    );
    for window in [128_000u64, 16_000] {
        let c = catalogue(&set, window);
        println!(
            "catalogue for a {}k window: {} chars (budget {}), shortened: {}; {} tokens",
            window / 1000,
            c.text.chars().count(),
            c.budget,
            if c.shortened { "yes" } else { "no" },
            text_tokens(&c.text)
        );
    }
    let with = text_tokens(&catalogue(&set, 128_000).text);
    let builtin = SkillRegistry::new(SkillConfig::default()).for_workdir(&work);
    let alone = text_tokens(&catalogue(&builtin, 128_000).text);
    Ok((alone, with))
}

/// Memory's and the catalogue's share of every call's prompt.
fn overhead(
    rt: &tokio::runtime::Runtime,
    root: &Path,
    median_entry: u64,
    (builtin, with_skills): (u64, u64),
    n_skills: usize,
) -> anyhow::Result<()> {
    // A fresh store filled through the real writer until each scope's
    // index cap refuses: the most the indexes can cost.
    let mut rng = StdRng::seed_from_u64(SEED ^ 0x1de);
    let state = root.join("state-full");
    let work = root.join("work");
    let mem = start_memory(rt, &state, "flyto-bench.memory-full")?;
    let now = flyto_actors::clock::Clock::now_ms(&SystemClock);
    let mut lines = [0usize; 2];
    for (scope, kind) in [(0, Kind::Project), (1, Kind::User)] {
        for i in 0.. {
            let (meta, body) = gen_entry(&mut rng, i, now);
            let req = WriteReq {
                name: meta.name,
                kind,
                description: meta.description,
                body,
                source: "s-bench".into(),
                session: None,
            };
            match rt.block_on(mem.write(&work, req)) {
                Ok(_) => lines[scope] += 1,
                Err(MemoryError::Cap(_)) => break,
                Err(e) => anyhow::bail!("memory write: {e}"),
            }
        }
    }
    let paths = mem.paths(&work).map_err(|e| anyhow::anyhow!("{e}"))?;
    let index = |dir: &Path| std::fs::read_to_string(dir.join("MEMORY.md")).unwrap_or_default();
    let (pi, ui) = (index(&paths.project), index(&paths.user));
    let index_tokens = text_tokens(&pi) + text_tokens(&ui);
    let entries = INJECTED as u64 * median_entry;
    let memory = index_tokens + entries;
    println!("\n== knowledge: prompt overhead per model call (estimated tokens) ==");
    println!(
        "skill catalogue: built-ins alone {builtin} tokens; with {n_skills} user skills {with_skills} tokens (128k window)"
    );
    println!(
        "memory indexes at their caps (filled through memory_write until refused): project {} lines / {} bytes, user {} lines / {} bytes: {index_tokens} tokens",
        lines[0],
        pi.len(),
        lines[1],
        ui.len()
    );
    println!(
        "memory: {INJECTED} injected entries of the median size ({median_entry} tokens each): {entries} tokens; indexes + entries {memory} tokens"
    );
    println!(
        "per call: memory + catalogue {} tokens with the built-ins alone, {} tokens with {n_skills} skills ({:.1}% of a 128k window)",
        memory + builtin,
        memory + with_skills,
        (memory + with_skills) as f64 * 100.0 / 128_000.0
    );
    Ok(())
}

/// Projects in the dream gate-check round.
const DREAM_PROJECTS: usize = 1000;
const DREAM_ROUNDS: usize = 200;

/// The cost of one dream check round over 1,000 projects none of which is
/// eligible (a third each stopped by the time gate, the session gate and
/// the backoff), against a plain `stat` of the same projects' folders.
fn dream_gates(root: &Path) -> anyhow::Result<()> {
    use flyto_actors::dream::DreamConfig;
    use flyto_actors::dream::actor::{Project, check_all};
    use std::collections::HashMap;
    println!(
        "\n== knowledge: dream gate check, {DREAM_PROJECTS} projects, none eligible, {DREAM_ROUNDS} rounds =="
    );
    let now = flyto_actors::clock::Clock::now_ms(&SystemClock);
    let cfg = DreamConfig::default();
    let mut projects = HashMap::new();
    let mut dirs = Vec::new();
    for i in 0..DREAM_PROJECTS {
        let id = format!("{i:016x}");
        let dir = root.join("dream-projects").join(&id).join("memory");
        std::fs::create_dir_all(&dir).context("project folder")?;
        dirs.push(dir);
        let mut p = Project::default();
        p.id.clone_from(&id);
        p.workdir = format!("/work/p{i}");
        match i % 3 {
            0 => p.last_success_ms = Some(now - 3_600_000),
            1 => {
                p.last_success_ms = Some(now - 48 * 3_600_000);
                p.sessions.insert(1, now);
            }
            _ => p.state.retry_after_ms = Some(now + 3_600_000),
        }
        projects.insert(id, p);
    }
    let mut ours = Vec::new();
    for _ in 0..DREAM_ROUNDS {
        let t = Instant::now();
        let round = check_all(&mut projects, &cfg, now);
        ours.push(t.elapsed().as_nanos() as u64);
        anyhow::ensure!(round.ready.is_empty(), "a project passed its gates");
    }
    let mut stats = Vec::new();
    for _ in 0..DREAM_ROUNDS {
        let t = Instant::now();
        let mut n = 0;
        for d in &dirs {
            n += usize::from(std::fs::metadata(d).is_ok());
        }
        stats.push(t.elapsed().as_nanos() as u64);
        anyhow::ensure!(n == dirs.len(), "a folder is missing");
    }
    ours.sort_unstable();
    stats.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    let (p50, p99) = (percentile(&ours, 0.5), percentile(&ours, 0.99));
    let (s50, s99) = (percentile(&stats, 0.5), percentile(&stats, 0.99));
    println!(
        "check round: p50 {:.3}ms, p99 {:.3}ms; baseline (stat each project's memory folder): p50 {:.3}ms, p99 {:.3}ms",
        ms(p50),
        ms(p99),
        ms(s50),
        ms(s99)
    );
    println!(
        "check round p99 ratio {:.2} (ours / stat); target under 1 ms per round: {}",
        p99 as f64 / s99.max(1) as f64,
        verdict(p99 < 1_000_000)
    );
    Ok(())
}

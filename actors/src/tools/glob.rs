//! glob: the `glob` tool — lists files inside the session workdir whose
//! path matches a glob, skipping what `.gitignore` (and `.ignore`, and git's
//! excludes) ignore, even outside a git repository. Results are sorted
//! most recently modified first and bounded.
//!
//! It only lists; it never opens file contents, never follows symlinks
//! while walking, and never lists the `.git` directory.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::builtin::{OnCancel, parse_args, run_blocking};
use super::fs_guard;
use super::{Tool, ToolContext, ToolFuture, ToolOutput};

/// Paths in one answer.
pub const MAX_RESULTS: usize = 200;
/// Matches collected before the walk stops (sorting needs them all).
const MAX_COLLECTED: usize = 100_000;

const EXPECTED: &str = "{\"pattern\": string (e.g. \"**/*.rs\"), \"path\"?: string (directory \
                        to search, default the workdir)}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

pub struct GlobTool;

impl Tool for GlobTool {
    fn name(&self) -> &'static str {
        "glob"
    }

    fn description(&self) -> &'static str {
        "Finds files by path pattern inside the session workdir, e.g. `**/*.rs` or \
         `src/**/test_*.py`. The pattern is matched against paths relative to `path` (default: \
         the workdir); `*` does not cross `/`, `**` does, `{a,b}` and `[abc]` work. Files \
         ignored by .gitignore are skipped, and so is .git. Returns up to 200 paths relative \
         to the workdir, most recently modified first."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Glob matched against paths relative to `path`, e.g. \"**/*.rs\"."},
    "path": {"type": "string", "description": "Directory to search, relative to the session workdir. Default: the workdir."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}"#
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("glob", args_json, EXPECTED) {
                Ok(args) => args,
                Err(out) => return out,
            };
            let root = match fs_guard::resolve(&ctx.workdir, args.path.as_deref().unwrap_or(".")) {
                Ok(root) => root,
                Err(err) => return ToolOutput::error(err.to_string()),
            };
            let shown_root = fs_guard::display_rel(&ctx.workdir, &root);
            if !root.is_dir() {
                return ToolOutput::error(format!(
                    "path {shown_root} is not a directory: give a directory to search in (or \
                     leave path out to search the whole workdir)"
                ));
            }
            let matcher = match build_matcher(&args.pattern, &root) {
                Ok(m) => m,
                Err(msg) => return ToolOutput::error(msg),
            };
            let workdir = ctx.workdir.clone();
            let pattern = args.pattern;
            run_blocking(ctx, "glob", OnCancel::Abandon, move |cancel| {
                glob_files(&workdir, &root, &shown_root, &pattern, &matcher, &cancel)
            })
            .await
        })
    }
}

/// Compiles the pattern. An absolute pattern inside the search root is
/// taken relative to it, since models often repeat the workdir.
fn build_matcher(pattern: &str, root: &Path) -> Result<GlobMatcher, String> {
    let mut pat = pattern.trim();
    let root_prefix = format!("{}/", root.display());
    if let Some(rest) = pat.strip_prefix(&root_prefix) {
        pat = rest;
    } else if pat.starts_with('/') {
        return Err(format!(
            "pattern {pattern} is absolute: give it relative to the searched directory {}, \
             e.g. \"**/*.rs\"",
            root.display()
        ));
    }
    let pat = pat.strip_prefix("./").unwrap_or(pat);
    if pat.is_empty() {
        return Err("pattern is empty: give a glob such as \"**/*.rs\"".to_string());
    }
    GlobBuilder::new(pat)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|err| {
            format!(
                "pattern {pattern} is not a valid glob ({err}): use forms like \"**/*.rs\" or \
                 \"src/*.{{ts,tsx}}\""
            )
        })
}

/// A walker over `root` (the workdir or a directory inside it) with the
/// ignore rules every search tool uses: hidden files included (`.github/`,
/// `.env.example` are often what is asked for), `.git` itself skipped,
/// symlinks not followed, and .gitignore/.ignore/git excludes applied —
/// also outside a git repository.
///
/// Outside a repository, only ignore files inside the workdir count: the
/// walk starts at the workdir (pruned to `root`'s subtree) and does not look
/// at parents, because a `.gitignore` of `*` in a home directory managed as
/// a dotfiles repo would otherwise hide everything. Inside a repository,
/// git's own rules apply, up to the repository root.
pub(crate) fn walker(workdir: &Path, root: &Path) -> WalkBuilder {
    let in_git = workdir.ancestors().any(|dir| dir.join(".git").exists());
    let start = if in_git { root } else { workdir };
    let mut builder = WalkBuilder::new(start);
    let keep = root.to_path_buf();
    builder
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .ignore(true)
        .parents(in_git)
        .require_git(in_git)
        .follow_links(false)
        .filter_entry(move |entry| {
            if entry.file_name() == ".git" {
                return false;
            }
            let path = entry.path();
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            // Ancestors of `root` are walked through, not listed.
            path.starts_with(&keep) || (is_dir && keep.starts_with(path))
        });
    builder
}

fn glob_files(
    workdir: &Path,
    root: &Path,
    shown_root: &str,
    pattern: &str,
    matcher: &GlobMatcher,
    cancel: &CancellationToken,
) -> ToolOutput {
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    let mut capped = false;
    for entry in walker(workdir, root).build() {
        if cancel.is_cancelled() {
            return ToolOutput::error("glob was stopped: the run was cancelled");
        }
        // Unreadable directories are skipped, as `find` would report and
        // go on.
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_none_or(|t| t.is_dir()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        if !matcher.is_match(rel) {
            continue;
        }
        let mtime = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        found.push((mtime, entry.into_path()));
        if found.len() >= MAX_COLLECTED {
            capped = true;
            break;
        }
    }
    if found.is_empty() {
        return ToolOutput::ok(format!(
            "no files match {pattern} under {shown_root} (files ignored by .gitignore are \
             skipped; `*` does not cross `/`, use `**/` to search subdirectories)"
        ));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(MAX_RESULTS)
        .map(|(_, p)| fs_guard::display_rel(workdir, p) + "\n")
        .collect();
    if total > MAX_RESULTS {
        let total = if capped {
            format!("more than {total}")
        } else {
            total.to_string()
        };
        out.push_str(&format!(
            "\n[showing {MAX_RESULTS} of {total} matching files, most recently modified first; \
             narrow the pattern or the path to see the others]"
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::test_support::{call, ctx};
    use serde_json::json;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for f in [
            "src/main.rs",
            "src/lib/mod.rs",
            "README.md",
            "target/debug/out.rs",
            "gen/x.rs",
            "gen/keep.rs",
            ".github/ci.yml",
        ] {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::fs::write(p.join(".gitignore"), "target/\ngen/*\n!gen/keep.rs\n").unwrap();
        dir
    }

    fn lines(out: &ToolOutput) -> Vec<&str> {
        let mut v: Vec<&str> = out.content.lines().filter(|l| !l.is_empty()).collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn matches_and_respects_gitignore_outside_a_git_repo() {
        let dir = tree();
        let c = ctx(dir.path());
        let out = call(&GlobTool, &c, json!({"pattern": "**/*.rs"})).await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            lines(&out),
            ["gen/keep.rs", "src/lib/mod.rs", "src/main.rs"]
        );
        let out = call(&GlobTool, &c, json!({"pattern": "*.rs", "path": "src"})).await;
        assert_eq!(lines(&out), ["src/main.rs"]);
        let out = call(&GlobTool, &c, json!({"pattern": "**/*.yml"})).await;
        assert_eq!(lines(&out), [".github/ci.yml"]);
        let out = call(&GlobTool, &c, json!({"pattern": "*.py"})).await;
        assert!(
            !out.is_error && out.content.starts_with("no files match"),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn respects_gitignore_in_a_git_repo_and_skips_dot_git() {
        let dir = tree();
        let p = dir.path();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::write(p.join(".git/config.rs"), "x").unwrap();
        std::fs::write(p.join("src/.gitignore"), "lib/\n").unwrap();
        let c = ctx(p);
        let out = call(&GlobTool, &c, json!({"pattern": "**/*.rs"})).await;
        assert_eq!(lines(&out), ["gen/keep.rs", "src/main.rs"]);
        let out = call(&GlobTool, &c, json!({"pattern": "**/*", "path": "src"})).await;
        assert_eq!(lines(&out), ["src/.gitignore", "src/main.rs"]);
    }

    #[tokio::test]
    async fn ignore_files_above_a_non_git_workdir_do_not_apply() {
        let outer = tempfile::tempdir().unwrap();
        // As a home directory managed as a dotfiles repo.
        std::fs::write(outer.path().join(".gitignore"), "*\n").unwrap();
        let work = outer.path().join("work");
        std::fs::create_dir_all(work.join("src/deep")).unwrap();
        std::fs::write(work.join("src/deep/a.rs"), "x").unwrap();
        std::fs::write(work.join("src/b.rs"), "x").unwrap();
        std::fs::write(work.join("top.rs"), "x").unwrap();
        std::fs::write(work.join(".gitignore"), "b.rs\n").unwrap();
        let c = ctx(&work);
        let out = call(&GlobTool, &c, json!({"pattern": "**/*.rs"})).await;
        assert_eq!(lines(&out), ["src/deep/a.rs", "top.rs"]);
        // A subdirectory search still honours the workdir's .gitignore and
        // lists nothing outside the subdirectory.
        let out = call(&GlobTool, &c, json!({"pattern": "**/*.rs", "path": "src"})).await;
        assert_eq!(lines(&out), ["src/deep/a.rs"]);
    }

    #[tokio::test]
    async fn sorted_newest_first_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..250 {
            std::fs::write(dir.path().join(format!("f{i:03}.txt")), "x").unwrap();
        }
        let newest = dir.path().join("f007.txt");
        let f = std::fs::File::options().write(true).open(&newest).unwrap();
        f.set_modified(SystemTime::now() + std::time::Duration::from_secs(60))
            .unwrap();
        let out = call(&GlobTool, &ctx(dir.path()), json!({"pattern": "*.txt"})).await;
        assert!(!out.is_error, "{out:?}");
        assert!(
            out.content.starts_with("f007.txt\n"),
            "{}",
            &out.content[..40]
        );
        assert_eq!(
            out.content.lines().filter(|l| l.ends_with(".txt")).count(),
            MAX_RESULTS
        );
        assert!(
            out.content.contains("[showing 200 of 250 matching files"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn search_root_must_stay_inside_and_patterns_must_be_valid() {
        let dir = tree();
        let c = ctx(dir.path());
        let out = call(&GlobTool, &c, json!({"pattern": "*", "path": ".."})).await;
        assert!(
            out.is_error && out.content.contains("outside the session workdir"),
            "{out:?}"
        );
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let out = call(&GlobTool, &c, json!({"pattern": "*", "path": "out"})).await;
        assert!(out.is_error && out.content.contains("symlink"), "{out:?}");
        let out = call(&GlobTool, &c, json!({"pattern": "src/[", "path": "."})).await;
        assert!(
            out.is_error && out.content.contains("not a valid glob"),
            "{out:?}"
        );
        let out = call(&GlobTool, &c, json!({"pattern": "/etc/*"})).await;
        assert!(out.is_error && out.content.contains("absolute"), "{out:?}");
        let abs = format!("{}/src/*.rs", c.workdir.display());
        let out = call(&GlobTool, &c, json!({"pattern": abs})).await;
        assert_eq!(lines(&out), ["src/main.rs"]);
    }
}

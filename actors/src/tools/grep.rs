//! grep: the `grep` tool — searches file contents inside the session
//! workdir with a regex, using ripgrep's crates (`grep-regex`,
//! `grep-searcher`, `ignore`): .gitignore respected, binary files skipped,
//! output `path:line:text` (context lines `path-line-text`), bounded in
//! matches and bytes.
//!
//! It only reads, never follows symlinks while walking, and shares the walk
//! rules with `glob` ([`super::glob::walker`]).

use std::io;
use std::path::Path;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::overrides::OverrideBuilder;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::builtin::{OnCancel, parse_args, run_blocking};
use super::fs_guard;
use super::glob::walker;
use super::{Tool, ToolContext, ToolFuture, ToolOutput};

/// Matching lines in one answer.
pub const MAX_MATCHES: usize = 200;
/// Bytes in one answer; below the loop's 16 K-char cut so the note survives.
pub const MAX_OUTPUT_BYTES: usize = 15_000;
/// Longer lines are cut (minified files).
pub const MAX_LINE_CHARS: usize = 500;
/// Context lines allowed around each match.
const MAX_CONTEXT: usize = 10;

const EXPECTED: &str = "{\"pattern\": string (regex), \"path\"?: string (file or directory), \
                        \"glob\"?: string (file filter such as \"*.rs\"), \"case_insensitive\"?: \
                        boolean, \"context\"?: integer (lines around each match)}";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    context: usize,
}

pub struct GrepTool;

impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &'static str {
        "Searches file contents inside the session workdir for a regular expression (Rust \
         regex syntax, as ripgrep: escape ( [ { . * + ? with a backslash for literal text). \
         Searches `path` (a file or directory, default the workdir), optionally only files \
         whose name matches `glob` (e.g. \"*.rs\" or \"src/**/*.{ts,tsx}\"). Files ignored by \
         .gitignore and binary files are skipped. Prints `path:line:text` per matching line \
         (context lines as `path-line-text`), at most 200 matches."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "description": "Regular expression to search for (one line at a time)."},
    "path": {"type": "string", "description": "File or directory to search, relative to the session workdir. Default: the workdir."},
    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. \"*.py\"."},
    "case_insensitive": {"type": "boolean", "description": "Ignore case. Default false."},
    "context": {"type": "integer", "minimum": 0, "maximum": 10, "description": "Lines of context before and after each match. Default 0."}
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
            let args: Args = match parse_args("grep", args_json, EXPECTED) {
                Ok(args) => args,
                Err(out) => return out,
            };
            if args.pattern.is_empty() {
                return ToolOutput::error(
                    "pattern is empty: give a regular expression to search for",
                );
            }
            if args.context > MAX_CONTEXT {
                return ToolOutput::error(format!(
                    "context {} is too large: use at most {MAX_CONTEXT} lines, and read the file \
                     for more",
                    args.context
                ));
            }
            let root = match fs_guard::resolve(&ctx.workdir, args.path.as_deref().unwrap_or(".")) {
                Ok(root) => root,
                Err(err) => return ToolOutput::error(err.to_string()),
            };
            let matcher = match RegexMatcherBuilder::new()
                .case_insensitive(args.case_insensitive)
                .line_terminator(Some(b'\n'))
                .build(&args.pattern)
            {
                Ok(m) => m,
                Err(err) => {
                    return ToolOutput::error(format!(
                        "pattern is not a valid regex: {err}. Escape ( [ {{ . * + ? | \\ with a \
                         backslash to match them literally; a pattern matches within one line"
                    ));
                }
            };
            let workdir = ctx.workdir.clone();
            run_blocking(ctx, "grep", OnCancel::Abandon, move |cancel| {
                grep(&workdir, &root, &args, &matcher, &cancel)
            })
            .await
        })
    }
}

/// Why the answer ended early.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    Matches,
    Bytes,
}

/// What one search gathers across files.
struct Collected {
    out: String,
    matches: usize,
    files: usize,
    cut: Option<Cut>,
    context: bool,
}

/// Sink for one file: appends its lines to the shared [`Collected`].
struct FileSink<'a> {
    acc: &'a mut Collected,
    shown: &'a str,
    started: bool,
}

impl FileSink<'_> {
    /// Appends one line; false once the byte bound is reached.
    fn push(&mut self, sep: char, line: Option<u64>, bytes: &[u8]) -> bool {
        let mut text = String::new();
        if !self.started {
            self.started = true;
            self.acc.files += 1;
            // Separates groups of different files, as ripgrep does.
            if self.acc.context && !self.acc.out.is_empty() {
                text.push_str("--\n");
            }
        }
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let line_text = String::from_utf8_lossy(bytes);
        let line_text = match line_text.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!("{}… [line cut]", &line_text[..cut]),
            None => line_text.into_owned(),
        };
        text.push_str(&format!(
            "{}{sep}{}{sep}{line_text}\n",
            self.shown,
            line.unwrap_or(0)
        ));
        if self.acc.out.len() + text.len() > MAX_OUTPUT_BYTES {
            self.acc.cut = Some(Cut::Bytes);
            return false;
        }
        self.acc.out.push_str(&text);
        true
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.acc.matches >= MAX_MATCHES {
            self.acc.cut = Some(Cut::Matches);
            return Ok(false);
        }
        self.acc.matches += 1;
        Ok(self.push(':', mat.line_number(), mat.bytes()))
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        Ok(self.push('-', ctx.line_number(), ctx.bytes()))
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        if self.acc.out.len() + 3 > MAX_OUTPUT_BYTES {
            self.acc.cut = Some(Cut::Bytes);
            return Ok(false);
        }
        self.acc.out.push_str("--\n");
        Ok(true)
    }
}

fn grep(
    workdir: &Path,
    root: &Path,
    args: &Args,
    matcher: &RegexMatcher,
    cancel: &CancellationToken,
) -> ToolOutput {
    let shown_root = fs_guard::display_rel(workdir, root);
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(args.context)
        .after_context(args.context)
        // As ripgrep: a NUL byte means binary, and the file is skipped.
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let mut acc = Collected {
        out: String::new(),
        matches: 0,
        files: 0,
        cut: None,
        context: args.context > 0,
    };
    let mut errors = 0usize;

    let meta = match std::fs::metadata(root) {
        Ok(meta) => meta,
        Err(err) => {
            return ToolOutput::error(format!(
                "cannot search {shown_root}: {err} (check the path with glob)"
            ));
        }
    };
    if meta.is_file() {
        // An explicitly named file is searched even if .gitignore lists it.
        let mut sink = FileSink {
            acc: &mut acc,
            shown: &shown_root,
            started: false,
        };
        if let Err(err) = searcher.search_path(matcher, root, &mut sink) {
            return ToolOutput::error(format!("cannot search {shown_root}: {err}"));
        }
    } else {
        let mut walk = walker(workdir, root);
        walk.sort_by_file_name(|a, b| a.cmp(b));
        if let Some(glob) = args.glob.as_deref().filter(|g| !g.trim().is_empty()) {
            let overrides = OverrideBuilder::new(root).add(glob).and_then(|b| b.build());
            match overrides {
                Ok(o) => {
                    walk.overrides(o);
                }
                Err(err) => {
                    return ToolOutput::error(format!(
                        "glob {glob} is not a valid file filter ({err}): use forms like \"*.rs\" \
                         or \"src/**/*.{{ts,tsx}}\""
                    ));
                }
            }
        }
        for entry in walk.build() {
            if cancel.is_cancelled() {
                return ToolOutput::error("grep was stopped: the run was cancelled");
            }
            let Ok(entry) = entry else {
                errors += 1;
                continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let shown = fs_guard::display_rel(workdir, entry.path());
            let mut sink = FileSink {
                acc: &mut acc,
                shown: &shown,
                started: false,
            };
            // One unreadable file does not spoil the search.
            if searcher
                .search_path(matcher, entry.path(), &mut sink)
                .is_err()
            {
                errors += 1;
            }
            if acc.cut.is_some() {
                break;
            }
        }
    }

    let mut out = acc.out;
    if acc.matches == 0 {
        let filter = args
            .glob
            .as_deref()
            .map(|g| format!(" in files matching {g}"))
            .unwrap_or_default();
        out = format!(
            "no matches for /{}/ under {shown_root}{filter} (files ignored by .gitignore and \
             binary files are skipped{})",
            args.pattern,
            if args.case_insensitive {
                ""
            } else {
                "; set case_insensitive to ignore case"
            }
        );
    }
    match acc.cut {
        Some(Cut::Matches) => out.push_str(&format!(
            "\n[stopped after {MAX_MATCHES} matches in {} files; narrow the pattern, path or glob \
             to see the rest]",
            acc.files
        )),
        Some(Cut::Bytes) => out.push_str(&format!(
            "\n[stopped after {} matches: the answer is capped at {MAX_OUTPUT_BYTES} bytes; narrow \
             the pattern, path or glob, or use less context]",
            acc.matches
        )),
        None => {}
    }
    if errors > 0 {
        out.push_str(&format!(
            "\n[{errors} files or directories could not be read and were skipped]"
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
        let files = [
            (
                "src/main.rs",
                "fn main() {\n    let needle = 1;\n    other();\n}\n",
            ),
            ("src/lib.py", "NEEDLE = 2\n"),
            ("target/out.rs", "let needle = 3;\n"),
            ("notes.md", "one\ntwo\nneedle here\nfour\nfive\n"),
        ];
        for (f, body) in files {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), body).unwrap();
        }
        std::fs::write(p.join("blob.bin"), b"needle\x00\x01\x02").unwrap();
        std::fs::write(p.join(".gitignore"), "target/\n").unwrap();
        dir
    }

    #[tokio::test]
    async fn finds_matches_as_path_line_text_and_respects_gitignore() {
        let dir = tree();
        let out = call(&GrepTool, &ctx(dir.path()), json!({"pattern": "needle"})).await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            out.content,
            "notes.md:3:needle here\nsrc/main.rs:2:    let needle = 1;\n"
        );
    }

    #[tokio::test]
    async fn case_glob_path_and_context() {
        let dir = tree();
        let c = ctx(dir.path());
        let out = call(
            &GrepTool,
            &c,
            json!({"pattern": "needle", "case_insensitive": true, "glob": "*.py"}),
        )
        .await;
        assert_eq!(out.content, "src/lib.py:1:NEEDLE = 2\n");
        let out = call(&GrepTool, &c, json!({"pattern": "needle", "path": "src"})).await;
        assert_eq!(out.content, "src/main.rs:2:    let needle = 1;\n");
        // An explicitly named ignored file is still searched.
        let out = call(
            &GrepTool,
            &c,
            json!({"pattern": "needle", "path": "target/out.rs"}),
        )
        .await;
        assert_eq!(out.content, "target/out.rs:1:let needle = 3;\n");
        let out = call(
            &GrepTool,
            &c,
            json!({"pattern": "needle", "path": "notes.md", "context": 1}),
        )
        .await;
        assert_eq!(
            out.content,
            "notes.md-2-two\nnotes.md:3:needle here\nnotes.md-4-four\n"
        );
        let out = call(&GrepTool, &c, json!({"pattern": "absent"})).await;
        assert!(
            !out.is_error && out.content.starts_with("no matches for /absent/"),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn respects_gitignore_in_a_git_repo_with_a_subdir_path() {
        let dir = tree();
        let p = dir.path();
        std::fs::create_dir_all(p.join(".git")).unwrap();
        std::fs::write(p.join(".git/HEAD"), "needle").unwrap();
        std::fs::write(p.join("src/.gitignore"), "gen.rs\n").unwrap();
        std::fs::write(p.join("src/gen.rs"), "needle\n").unwrap();
        let c = ctx(p);
        let out = call(&GrepTool, &c, json!({"pattern": "needle", "path": "src"})).await;
        assert_eq!(out.content, "src/main.rs:2:    let needle = 1;\n");
        let out = call(&GrepTool, &c, json!({"pattern": "needle"})).await;
        assert_eq!(
            out.content,
            "notes.md:3:needle here\nsrc/main.rs:2:    let needle = 1;\n"
        );
    }

    #[tokio::test]
    async fn bounded_by_matches_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("many.txt"), "hit\n".repeat(500)).unwrap();
        let c = ctx(dir.path());
        let out = call(&GrepTool, &c, json!({"pattern": "hit"})).await;
        assert_eq!(
            out.content
                .lines()
                .filter(|l| l.starts_with("many.txt:"))
                .count(),
            MAX_MATCHES
        );
        assert!(
            out.content
                .contains("[stopped after 200 matches in 1 files"),
            "{}",
            out.content
        );
        let wide = format!("hit {}\n", "w".repeat(400)).repeat(100);
        std::fs::write(dir.path().join("many.txt"), wide).unwrap();
        let out = call(&GrepTool, &c, json!({"pattern": "hit"})).await;
        assert!(
            out.content.len() < MAX_OUTPUT_BYTES + 300,
            "{}",
            out.content.len()
        );
        assert!(
            out.content.contains("capped at 15000 bytes"),
            "{}",
            &out.content[out.content.len() - 200..]
        );
    }

    #[tokio::test]
    async fn bad_regex_and_escapes_are_errors() {
        let dir = tree();
        let c = ctx(dir.path());
        let out = call(&GrepTool, &c, json!({"pattern": "fn main("})).await;
        assert!(
            out.is_error && out.content.contains("not a valid regex"),
            "{out:?}"
        );
        let out = call(&GrepTool, &c, json!({"pattern": "root", "path": "/etc"})).await;
        assert!(
            out.is_error && out.content.contains("outside the session workdir"),
            "{out:?}"
        );
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("s.txt"), "needle").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("od")).unwrap();
        let out = call(&GrepTool, &c, json!({"pattern": "needle", "path": "od"})).await;
        assert!(out.is_error && out.content.contains("symlink"), "{out:?}");
        // Walking the workdir does not follow the link out either.
        let out = call(&GrepTool, &c, json!({"pattern": "needle"})).await;
        assert!(!out.content.contains("od/"), "{}", out.content);
    }
}

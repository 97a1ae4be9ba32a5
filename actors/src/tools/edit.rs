//! edit: the `edit` tool — replaces an exact string in an existing UTF-8
//! file inside the session workdir. The old string must match exactly once
//! (or `replace_all` is set); zero or several matches are errors that say
//! what was found and how to fix the call. New secrets are refused and the
//! file is replaced atomically.
//!
//! It never creates files (that is `write`) and never guesses: a near miss
//! is reported as a hint, not applied.

use std::io;
use std::path::Path;

use serde::Deserialize;

use super::builtin::{OnCancel, parse_args, run_blocking};
use super::read::looks_binary;
use super::write::atomic_write;
use super::{Tool, ToolContext, ToolFuture, ToolOutput};
use super::{fs_guard, secrets};

const EXPECTED: &str = "{\"path\": string, \"old_string\": string, \"new_string\": string, \
                        \"replace_all\"?: boolean (default false)}";

/// Match lines listed in a "several matches" error.
const MAX_LISTED_LINES: usize = 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

pub struct EditTool;

impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }

    fn description(&self) -> &'static str {
        "Replaces text in an existing file inside the session workdir. `old_string` must \
         match the file exactly — whitespace, indentation and line breaks included, line \
         numbers from `read` left out — and exactly once; include enough surrounding lines \
         to make it unique, or set `replace_all` to change every occurrence. Use `write` to \
         create a file. Edits that add a secret (API keys, tokens, private keys) are refused."
    }

    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File to change, relative to the session workdir."},
    "old_string": {"type": "string", "description": "Exact text to replace; must occur exactly once unless replace_all is true."},
    "new_string": {"type": "string", "description": "Text to put in its place."},
    "replace_all": {"type": "boolean", "description": "Replace every occurrence. Default false."}
  },
  "required": ["path", "old_string", "new_string"],
  "additionalProperties": false
}"#
    }

    fn concurrency_safe(&self, _args_json: &str) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: Args = match parse_args("edit", args_json, EXPECTED) {
                Ok(args) => args,
                Err(out) => return out,
            };
            if args.old_string.is_empty() {
                return ToolOutput::error(
                    "old_string is empty: give the exact text to replace (to create a file, use \
                     write; to insert, include the neighbouring text in old_string and new_string)",
                );
            }
            if args.old_string == args.new_string {
                return ToolOutput::error(
                    "old_string and new_string are identical: there is nothing to change",
                );
            }
            let path = match fs_guard::resolve(&ctx.workdir, &args.path) {
                Ok(path) => path,
                Err(err) => return ToolOutput::error(err.to_string()),
            };
            let shown = fs_guard::display_rel(&ctx.workdir, &path);
            run_blocking(ctx, "edit", OnCancel::Finish, move |_| {
                edit_file(&path, &shown, &args)
            })
            .await
        })
    }
}

fn edit_file(path: &Path, shown: &str, args: &Args) -> ToolOutput {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return ToolOutput::error(format!(
                "{shown} does not exist: edit only changes existing files; use write to create \
                 it, or check the name with glob"
            ));
        }
        Err(err) if err.kind() == io::ErrorKind::IsADirectory => {
            return ToolOutput::error(format!("{shown} is a directory: give a file path"));
        }
        Err(err) => return ToolOutput::error(format!("cannot read {shown}: {err}")),
    };
    if looks_binary(&bytes[..bytes.len().min(8192)]) {
        return ToolOutput::error(format!(
            "{shown} is a binary file: edit only changes text files"
        ));
    }
    let Ok(content) = String::from_utf8(bytes) else {
        return ToolOutput::error(format!(
            "{shown} is not valid UTF-8: edit only changes UTF-8 text files (it would damage the \
             other bytes); use bash for this file"
        ));
    };

    let (mut old, mut new) = (args.old_string.clone(), args.new_string.clone());
    let mut starts: Vec<usize> = content.match_indices(&old).map(|(i, _)| i).collect();
    if starts.is_empty() && content.contains("\r\n") && old.contains('\n') && !old.contains("\r\n")
    {
        // The file has Windows line ends and the model wrote `\n`: the same
        // text with the file's line ends is an exact match, not a guess.
        old = old.replace('\n', "\r\n");
        new = new.replace("\r\n", "\n").replace('\n', "\r\n");
        starts = content.match_indices(&old).map(|(i, _)| i).collect();
    }
    let lines: Vec<usize> = starts.iter().map(|&i| line_of(&content, i)).collect();
    match lines.len() {
        0 => return ToolOutput::error(not_found(shown, &content, &args.old_string)),
        1 => {}
        n if !args.replace_all => {
            let mut listed: Vec<String> = lines
                .iter()
                .take(MAX_LISTED_LINES)
                .map(|l| l.to_string())
                .collect();
            if n > MAX_LISTED_LINES {
                listed.push("…".to_string());
            }
            return ToolOutput::error(format!(
                "old_string matches {n} times in {shown} (at lines {}): include more \
                 surrounding lines in old_string so it matches exactly once, or set replace_all \
                 to true to replace every occurrence. The file was not changed.",
                listed.join(", ")
            ));
        }
        _ => {}
    }
    let updated = if args.replace_all {
        content.replace(&old, &new)
    } else {
        content.replacen(&old, &new, 1)
    };
    if let Some(found) = secrets::scan_new(&content, &updated) {
        return ToolOutput::error(found.refusal(shown));
    }
    if let Err(err) = atomic_write(path, updated.as_bytes()) {
        return ToolOutput::error(format!(
            "cannot write {shown}: {err}. The file was not changed."
        ));
    }
    match lines.as_slice() {
        [line] => ToolOutput::ok(format!(
            "edited {shown}: replaced 1 occurrence at line {line}"
        )),
        many => {
            let listed: Vec<String> = many
                .iter()
                .take(MAX_LISTED_LINES)
                .map(|l| l.to_string())
                .collect();
            let more = if many.len() > MAX_LISTED_LINES {
                ", …"
            } else {
                ""
            };
            ToolOutput::ok(format!(
                "edited {shown}: replaced {} occurrences (lines {}{more})",
                many.len(),
                listed.join(", ")
            ))
        }
    }
}

/// 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The "not found" error, with the most useful hint we can find cheaply.
fn not_found(shown: &str, content: &str, old: &str) -> String {
    let head = format!(
        "old_string was not found in {shown}. It must match the file exactly, including \
         whitespace, indentation and line breaks."
    );
    let hint = near_miss(content, old).unwrap_or_else(|| {
        "Read the file again (it may have changed) and copy the text from it.".to_string()
    });
    format!("{head} {hint} The file was not changed.")
}

fn near_miss(content: &str, old: &str) -> Option<String> {
    let file_lines: Vec<&str> = content.lines().collect();
    let old_lines: Vec<&str> = old.lines().collect();
    if old_lines.iter().any(|l| {
        l.trim_start()
            .split_once('\t')
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    }) {
        return Some(
            "old_string seems to contain line numbers from read's output (`  12<tab>`): leave \
             them out."
                .to_string(),
        );
    }
    let trimmed: Vec<&str> = old_lines.iter().map(|l| l.trim()).collect();
    if !trimmed.is_empty() && trimmed.iter().any(|l| !l.is_empty()) {
        let window = trimmed.len();
        for start in 0..file_lines.len().saturating_sub(window - 1) {
            if file_lines[start..start + window]
                .iter()
                .zip(&trimmed)
                .all(|(f, o)| f.trim() == *o)
            {
                return Some(format!(
                    "Text that differs only in indentation or surrounding whitespace starts at \
                     line {}: read it and copy the exact whitespace.",
                    start + 1
                ));
            }
        }
    }
    let first = trimmed.iter().find(|l| !l.is_empty())?;
    let at = file_lines.iter().position(|l| l.trim() == *first)?;
    Some(format!(
        "Its first line appears at line {}, but the lines after it differ: read around that \
         line and copy them exactly.",
        at + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::test_support::{call, ctx, fake_github_token};
    use serde_json::json;

    const SRC: &str = "fn a() {\n    let x = 1;\n}\n\nfn b() {\n    let x = 1;\n}\n";

    fn setup() -> (tempfile::TempDir, crate::tools::ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lib.rs"), SRC).unwrap();
        let c = ctx(dir.path());
        (dir, c)
    }

    fn file(dir: &tempfile::TempDir) -> String {
        std::fs::read_to_string(dir.path().join("lib.rs")).unwrap()
    }

    #[tokio::test]
    async fn one_match_is_replaced() {
        let (dir, c) = setup();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "fn b() {\n    let x = 1;", "new_string": "fn b() {\n    let x = 2;"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            out.content,
            "edited lib.rs: replaced 1 occurrence at line 5"
        );
        assert_eq!(
            file(&dir),
            SRC.replace("fn b() {\n    let x = 1;", "fn b() {\n    let x = 2;")
        );
    }

    #[tokio::test]
    async fn zero_matches_is_an_error_with_a_hint() {
        let (dir, c) = setup();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "let y = 1;", "new_string": "z"}),
        )
        .await;
        assert!(out.is_error, "{out:?}");
        assert!(
            out.content.contains("old_string was not found in lib.rs"),
            "{}",
            out.content
        );
        assert!(out.content.contains("whitespace"), "{}", out.content);
        assert_eq!(file(&dir), SRC);
        // Wrong indentation: the hint points at the line.
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "fn b() {\nlet x = 1;", "new_string": "z"}),
        )
        .await;
        assert!(
            out.content.contains("differs only in indentation") && out.content.contains("line 5"),
            "{}",
            out.content
        );
        // Line numbers pasted from read.
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "     2\t    let x = 1;", "new_string": "z"}),
        )
        .await;
        assert!(out.content.contains("line numbers"), "{}", out.content);
    }

    #[tokio::test]
    async fn two_matches_is_an_error_naming_the_lines() {
        let (dir, c) = setup();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
        )
        .await;
        assert!(out.is_error, "{out:?}");
        assert!(
            out.content
                .contains("matches 2 times in lib.rs (at lines 2, 6)"),
            "{}",
            out.content
        );
        assert!(out.content.contains("replace_all"), "{}", out.content);
        assert_eq!(file(&dir), SRC);
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "let x = 1;", "new_string": "let x = 2;", "replace_all": true}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            out.content,
            "edited lib.rs: replaced 2 occurrences (lines 2, 6)"
        );
        assert_eq!(file(&dir), SRC.replace("let x = 1;", "let x = 2;"));
    }

    #[tokio::test]
    async fn refuses_a_new_secret_without_echoing_it() {
        let (dir, c) = setup();
        let token = fake_github_token();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "fn a() {\n    let x = 1;", "new_string": format!("fn a() {{\n    let x = \"{token}\";")}),
        )
        .await;
        assert!(out.is_error, "{out:?}");
        assert!(
            out.content.contains("github-token") && out.content.contains("line 2"),
            "{}",
            out.content
        );
        assert!(!out.content.contains(&token));
        assert_eq!(file(&dir), SRC);
        // A secret completed by joining old and new text is still caught.
        let half = &token[..20];
        std::fs::write(dir.path().join("lib.rs"), format!("T = \"{half}XX\"\n")).unwrap();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "XX", "new_string": &token[20..]}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("github-token"),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn a_secret_already_in_the_file_does_not_block_other_edits() {
        let dir = tempfile::tempdir().unwrap();
        let token = fake_github_token();
        std::fs::write(
            dir.path().join(".env"),
            format!("TOKEN={token}\nMODE=dev\n"),
        )
        .unwrap();
        let out = call(
            &EditTool,
            &ctx(dir.path()),
            json!({"path": ".env", "old_string": "MODE=dev", "new_string": "MODE=prod"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
    }

    #[tokio::test]
    async fn crlf_files_match_lf_old_strings() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.txt"), "a\r\nb\r\nc\r\n").unwrap();
        let out = call(
            &EditTool,
            &ctx(dir.path()),
            json!({"path": "w.txt", "old_string": "a\nb", "new_string": "a\nB"}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("w.txt")).unwrap(),
            "a\r\nB\r\nc\r\n"
        );
    }

    #[tokio::test]
    async fn missing_file_empty_old_string_and_escapes_are_errors() {
        let (_dir, c) = setup();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("use write to create"),
            "{out:?}"
        );
        let out = call(
            &EditTool,
            &c,
            json!({"path": "lib.rs", "old_string": "", "new_string": "b"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("old_string is empty"),
            "{out:?}"
        );
        let out = call(
            &EditTool,
            &c,
            json!({"path": "../lib.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("outside the session workdir"),
            "{out:?}"
        );
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("o.rs"), "let x = 1;").unwrap();
        std::os::unix::fs::symlink(outside.path(), c.workdir.join("od")).unwrap();
        let out = call(
            &EditTool,
            &c,
            json!({"path": "od/o.rs", "old_string": "1", "new_string": "2"}),
        )
        .await;
        assert!(out.is_error && out.content.contains("symlink"), "{out:?}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("o.rs")).unwrap(),
            "let x = 1;"
        );
    }
}
